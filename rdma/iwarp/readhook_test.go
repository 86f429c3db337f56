package iwarp

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// TestReadResponsesPlacedWhileHookRuns: while Read Responses are owed the
// completion hook runs off the reader goroutine, so the consumer's work on
// a completed RDMA Read overlaps the placement of the next one's response.
// The hook here takes Read 1's completion, has the peer answer Read 2 and
// waits (bounded) for Read 2's completion, which only a reader not busy
// running the hook can produce.
func TestReadResponsesPlacedWhileHookRuns(t *testing.T) {
	p := newFakePeer(t, Config{CompleteOnTransmit: true}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 1, IRD: 4, ORD: 4}, 0)
	h, ok := p.server.(rdma.CQHook)
	if !ok {
		t.Fatal("no rdma.CQHook")
	}
	sink := make([]byte, 16)
	mr, err := p.dev.Register(sink, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	type sinkAddr struct {
		stag uint32
		to   uint64
	}
	reqs := make(chan sinkAddr, 2)
	var mu sync.Mutex // the hook may run on two goroutines at once
	verdict := make(chan string, 1)
	h.SetCQHook(func() {
		if !mu.TryLock() {
			return
		}
		defer mu.Unlock()
		var out [4]rdma.Completion
		n, _ := h.TryPoll(out[:])
		if n == 0 || out[0].ID != 1 {
			return
		}
		r2 := <-reqs
		// Not p.send: t.Fatal is for the test's goroutine.
		if _, err := p.nc.Write(fpduBytes(tagged(0xc1, 0x42, r2.stag, r2.to, []byte("efghijkl")), p.crc)); err != nil {
			verdict <- "writing Read 2's response: " + err.Error()
			return
		}
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if n, _ := h.TryPoll(out[:]); n > 0 {
				verdict <- ""
				return
			}
		}
		verdict <- "Read 2's response was not placed while the hook ran"
	})
	for i, id := range []uint64{1, 2} {
		if err := p.server.PostSend(rdma.SendWR{ID: id, Op: rdma.OpRDMARead, Signaled: true,
			Local:  []rdma.SGE{{MR: mr, Offset: 8 * i, Length: 8}},
			Remote: rdma.RemoteAddr{Addr: 0x1000 + uint64(8*i), RKey: 0x55}}); err != nil {
			t.Fatal(err)
		}
	}
	var first sinkAddr
	for i := range 2 {
		u, err := p.readFPDU()
		if err != nil {
			t.Fatal(err)
		}
		if u[0]&0x80 != 0 || u[1]&0x0f != opReadRequest {
			t.Fatalf("FPDU %d: %x, want a Read Request", i, u)
		}
		a := sinkAddr{binary.BigEndian.Uint32(u[18:]), binary.BigEndian.Uint64(u[22:])}
		if i == 0 {
			first = a
		} else {
			reqs <- a
		}
	}
	p.send(tagged(0xc1, 0x42, first.stag, first.to, []byte("abcdefgh")))
	select {
	case v := <-verdict:
		if v != "" {
			t.Fatal(v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hook never took Read 1's completion")
	}
	if !bytes.Equal(sink, []byte("abcdefghefghijkl")) {
		t.Fatalf("sink %q", sink)
	}
}
