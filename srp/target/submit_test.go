package target

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestSubmitOverIWARP runs initiator.Session.Submit against the target over
// pure-Go iWARP with two channels: each of 16 slots submits its next
// command from the completion of its last (the commands a batch of
// completions submits are posted deferred and go out with the doorbell
// after the batch), writing a pattern and reading it back. A post left
// without its doorbell would stall a slot and fail the test by its bound.
func TestSubmitOverIWARP(t *testing.T) {
	const slots, rounds, bs = 16, 64, 4096
	ctx, s := iwarpStackChannels(t, backstore.NewRAM(16<<20), 0, 0, 2)
	type slot struct {
		cmd           initiator.Command
		res           initiator.Result
		cdb           [16]byte
		inBuf, outBuf *initiator.Buffer
		lba           uint64
		round         int
		done          func(error)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
		wg.Done()
	}
	pattern := func(i, round int) byte { return byte(i*31 + round*7 + 1) }
	all := make([]*slot, slots)
	for i := range all {
		sl := &slot{lba: uint64(i * 64)}
		var err error
		if sl.inBuf, err = s.NewBuffer(bs, true); err == nil {
			sl.outBuf, err = s.NewBuffer(bs, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer sl.inBuf.Release()
		defer sl.outBuf.Release()
		// Even steps write the round's pattern, odd steps read it back.
		issue := func() error {
			write := sl.round%2 == 0
			if write {
				sl.cmd = initiator.Command{Buffer: sl.outBuf, Length: bs}
				b := sl.outBuf.Bytes()
				for j := range b {
					b[j] = pattern(i, sl.round/2) ^ byte(j)
				}
			} else {
				sl.cmd = initiator.Command{Buffer: sl.inBuf, Length: bs}
			}
			initiator.PutRW16(sl.cdb[:], write, sl.lba, bs/512, false)
			sl.cmd.CDB = sl.cdb[:]
			return s.Submit(&sl.cmd, &sl.res, sl.done)
		}
		sl.done = func(err error) {
			if err == nil {
				err = sl.res.Err()
			}
			if err == nil && sl.round%2 == 1 {
				want := make([]byte, bs)
				for j := range want {
					want[j] = pattern(i, sl.round/2) ^ byte(j)
				}
				if !bytes.Equal(sl.inBuf.Bytes(), want) {
					err = fmt.Errorf("slot %d round %d: read back differs from what was written", i, sl.round)
				}
			}
			if err != nil {
				fail(err)
				return
			}
			if sl.round++; sl.round == 2*rounds {
				wg.Done()
				return
			}
			if err := issue(); err != nil {
				fail(fmt.Errorf("slot %d: Submit from the callback: %w", i, err))
			}
		}
		all[i] = sl
		wg.Add(1)
		if err := issue(); err != nil {
			t.Fatalf("slot %d: first Submit: %v", i, err)
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		t.Fatal("session ended before the slots finished")
	case <-time.After(30 * time.Second):
		t.Fatal("slots stalled: a submitted command was not sent or its completion not delivered")
	}
	for _, err := range failures {
		if errors.Is(err, initiator.ErrQueueFull) {
			t.Errorf("%v (16 slots over two channels of %d credits)", err, s.Info().CanQueue)
			continue
		}
		t.Error(err)
	}
}
