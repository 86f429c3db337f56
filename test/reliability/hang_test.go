package reliability

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/srp/initiator"
)

// Backstore that stops answering, two cases. The target answers ABORT
// TASK and LUN RESET only once the tasks they abort have left the
// backstore, as LIO does (core_tmr_abort_task waits for the command): a
// write still queued in the backstore could otherwise land after the
// initiator was told it was aborted and had rewritten the blocks.
//
// Slow (the backstore answers after 2 s, within the TMF timeout): the READ
// ends with the command timeout and ABORT TASK (ErrAborted), never with
// data, and the channel survives.
//
// Hung (the backstore answers after 8 s, beyond the TMF timeout): ABORT
// TASK times out, the initiator drops the channel and reconnects (ib_srp's
// srp_reset_host), and the READ fails.
//
// In both, LUN 1 keeps serving I/O throughout, LUN 0 serves again once
// its backstore answers, LUN RESET is answered, and the target frees every
// channel and command.
func TestHungBackstore(t *testing.T) {
	for _, tc := range []struct {
		name string
		hang time.Duration
	}{{"slow", 2 * time.Second}, {"hung", 8 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			hungBackstore(t, tc.hang)
		})
	}
}

func hungBackstore(t *testing.T, hang time.Duration) {
	hung := backstore.NewFault(backstore.NewRAM(1 << 20))
	tg := startTarget(t, hung, backstore.NewRAM(1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const cmdTimeout, tmfTimeout = time.Second, 4 * time.Second
	s := dial(t, ctx, tg.addr, initiator.Options{CommandTimeout: cmdTimeout, TMFTimeout: tmfTimeout,
		ReconnectDelay: 200 * time.Millisecond, FastIOFailTmo: 30 * time.Second})
	lun0, lun1 := initiator.LUN(0), initiator.LUN(1)
	for _, l := range []uint64{lun0, lun1} {
		_ = s.TestUnitReady(ctx, l) // the power-on unit attention
	}
	want := bytes.Repeat([]byte("before the hang "), 512/16)
	if err := s.Write16(ctx, lun0, 8, want, blockSize, false); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	hung.Set(func(f *backstore.Fault) { f.Hang = release })
	start := time.Now()
	time.AfterFunc(hang, func() {
		hung.Set(func(f *backstore.Fault) { f.Hang = nil })
		close(release)
	})
	readDone := make(chan error, 1)
	got := make([]byte, 512)
	go func() { readDone <- s.Read16(ctx, lun0, 8, got, blockSize, false) }()

	// LUN 1 serves while LUN 0 hangs (across the reconnect when there is one).
	w := bytes.Repeat([]byte{0x5a}, 4096)
	var slowest time.Duration
	n := 0
	for time.Since(start) < hang+time.Second {
		t0 := time.Now()
		if err := s.Write16(ctx, lun1, uint64(n%64*8), w, blockSize, false); err != nil {
			t.Fatalf("LUN 1 WRITE(16) while LUN 0 hangs: %v", err)
		}
		r := make([]byte, len(w))
		if err := s.Read16(ctx, lun1, uint64(n%64*8), r, blockSize, false); err != nil || !bytes.Equal(r, w) {
			t.Fatalf("LUN 1 READ(16) while LUN 0 hangs: %v", err)
		}
		slowest = max(slowest, time.Since(t0))
		n++
		time.Sleep(50 * time.Millisecond)
	}
	err := <-readDone
	took := time.Since(start)
	if err == nil {
		t.Fatalf("READ(16) on the hung LUN succeeded after %v", took)
	}
	if hang < tmfTimeout && !errors.Is(err, initiator.ErrAborted) {
		t.Fatalf("READ(16) on the slow LUN: %v, want the command timeout's ErrAborted", err)
	}
	if took < cmdTimeout || took > hang+tmfTimeout+5*time.Second {
		t.Fatalf("READ(16) on the hung LUN ended after %v (command timeout %v, TMF timeout %v)", took, cmdTimeout, tmfTimeout)
	}
	t.Logf("backstore hung %v: READ(16) failed after %v (%v); LUN 1 served %d write+read pairs meanwhile, slowest %v",
		hang, took.Round(time.Millisecond), err, n, slowest.Round(time.Millisecond))
	if hang < tmfTimeout && slowest > time.Second {
		t.Fatalf("LUN 1 I/O took %v while LUN 0 was slow", slowest)
	}

	<-release
	t0 := time.Now()
	if err := s.LUNReset(ctx, lun0); err != nil {
		t.Fatalf("LUN RESET after the backstore answered: %v", err)
	}
	t.Logf("LUN RESET answered in %v", time.Since(t0).Round(time.Millisecond))
	_ = s.TestUnitReady(ctx, lun0) // the reset's unit attention
	if err := s.Read16(ctx, lun0, 8, got, blockSize, false); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("LUN 0 after the hang: %v (data equal: %v)", err, bytes.Equal(got, want))
	}
	if err := s.Write16(ctx, lun0, 16, want, blockSize, false); err != nil {
		t.Fatalf("LUN 0 WRITE(16) after the hang: %v", err)
	}
	tg.waitIdle(t, 1)
}
