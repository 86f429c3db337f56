package hostile

import (
	"runtime"
	"testing"
	"time"
)

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestDataBufferAmplification measures what a peer makes the target hold
// with a few IUs: WRITEs of one block whose data-out descriptors claim
// max_data_len (16 MiB) each, with the RDMA READs never answered. The
// target allocates each command's whole descriptor length up front; the
// test reports the amplification, and checks the memory is given back once
// the connection is reset (no leak of data buffers or their regions).
func TestDataBufferAmplification(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	before := heapInuse()
	p, lr := loggedIn(t, tg.addr)
	p.holdReads = true
	n := int(lr.ReqLimDelta) - 1
	for i := 0; i < n; i++ {
		p.send(cmdIU(uint64(100+i), lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 16<<20)))
	}
	// A TEST UNIT READY behind them proves they were all started.
	p.send(tur(1))
	p.expectRsp(t, 1)
	held := heapInuse() - before
	t.Logf("%d SRP_CMDs of %d bytes make the target hold %d MiB (RDMA Read Requests received: %d)", n, 64, held>>20, len(p.heldReads))
	rst(p)
	tg.waitSessions(t, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := heapInuse()
		if after < before+32<<20 {
			t.Logf("after the reset: %d MiB above the start", int64(after-before)>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reset the heap stays %d MiB above the start: data buffers leaked", (after-before)>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
