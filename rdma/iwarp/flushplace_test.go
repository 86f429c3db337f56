package iwarp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// TestReadFlushedAfterPlacement: a connection that fails (here as a send
// error does) while Read Responses stream in reports the Read flushed only
// once the reader no longer writes its sink: TryPoll does not report the
// end of completions before the Read's, and the sink does not change after
// that completion was seen. Many tries, to meet the reader inside a
// placement and between placements.
func TestReadFlushedAfterPlacement(t *testing.T) {
	tries := 200
	if testing.Short() {
		tries = 10
	}
	for try := 0; try < tries; try++ {
		p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
		srv := p.server.(*conn)
		const size = 4 << 20
		sink := make([]byte, size)
		sinkSTag, sinkTO, _ := p.postRead(9, []rdma.SGE{{MR: p.dev.LocalRegion(sink), Length: size}})
		stop := make(chan struct{})
		go func() {
			payload := bytes.Repeat([]byte{0xab}, 64)
			for off := 0; off+64 < size; {
				var b []byte
				for i := 0; i < 2000 && off+64 < size; i++ {
					b = append(b, fpduBytes(tagged(0x81, 0x42, sinkSTag, sinkTO+uint64(off), payload), false)...)
					off += 64
				}
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.nc.Write(b); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(try%6) * time.Millisecond)
		srv.fail(errors.New("send failed"), nil)
		var out [4]rdma.Completion
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := p.server.(rdma.CQNotifier).TryPoll(out[:])
			if n > 0 {
				if out[0].ID != 9 || out[0].Status != rdma.StatusFlushed {
					t.Fatalf("try %d: completion %+v, want the Read flushed", try, out[0])
				}
				break
			}
			if err != nil {
				t.Fatalf("try %d: TryPoll: %v (the end of completions) before the Read's", try, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("try %d: no completion for the Read", try)
			}
		}
		snap := bytes.Clone(sink) // the consumer owns the sink again
		p.server.Close()
		close(stop)
		if !bytes.Equal(snap, sink) {
			t.Fatalf("try %d: the sink changed after its Read completed flushed", try)
		}
	}
}
