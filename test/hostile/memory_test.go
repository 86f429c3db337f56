package hostile

import (
	"runtime"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestDataBufferAmplification: a peer sends WRITEs whose CDB and data-out
// descriptors ask for 1 MiB each (the whole logical unit, so the core
// accepts them before any data moves), and never answers the RDMA READs. The target allocates each
// command's data-out buffer before fetching it, so the port's
// max_data_memory budget (here four such buffers) must bound what the
// peer pins: the commands beyond it are answered at
// once with TASK SET FULL (SAM-5 §5.3.1, status 28h) and their credit, the
// heap grows by no more than the budget (plus slack for the runtime), and
// after the connection is reset the budget and the heap return to where
// they started.
func TestDataBufferAmplification(t *testing.T) {
	const (
		claim  = lunBytes // bytes each command asks for: the whole LU
		budget = 4 * claim
		slack  = 32 << 20 // heap noise allowed above the budget
	)
	cfg := targetCfgSmall(0)
	cfg.MaxDataLen = claim // the budget must hold at least one buffer of max_data_len
	cfg.MaxDataMemory = budget
	tg := startTarget(t, tgtOpts{port: cfg})
	before := heapInuse()
	p, lr := loggedIn(t, tg.addr)
	p.holdReads = true
	n := int(lr.ReqLimDelta) - 1
	if n <= budget/claim {
		t.Fatalf("req_lim %d leaves too few commands to exceed the budget", lr.ReqLimDelta)
	}
	for i := 0; i < n; i++ {
		p.send(cmdIU(uint64(100+i), lun0, write10(0, claim/512), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, claim)))
	}
	// A TEST UNIT READY behind them proves they were all started; every
	// command beyond the budget is answered before it.
	p.send(tur(1))
	full := 0
	for {
		iu, err := p.recvIU()
		if err != nil {
			t.Fatalf("waiting for SRP_RSP tag 1: %v", err)
		}
		if len(iu) == 0 || srp.Opcode(iu[0]) != srp.OpRsp {
			continue
		}
		rsp, err := srp.UnmarshalRsp(iu)
		if err != nil {
			t.Fatalf("SRP_RSP: %v", err)
		}
		if rsp.Tag == 1 {
			break
		}
		if rsp.Tag < 100 || rsp.Tag >= uint64(100+n) || rsp.Status != 0x28 || rsp.ReqLimDelta < 1 {
			t.Fatalf("SRP_RSP %+v: want TASK SET FULL (0x28) with credit for a command over the budget", rsp)
		}
		full++
	}
	if want := n - budget/claim; full != want {
		t.Fatalf("%d commands answered TASK SET FULL, want %d (%d sent, budget %d buffers)", full, want, n, budget/claim)
	}
	if got := tg.port.DataMemory(); got > budget {
		t.Fatalf("port holds %d bytes of data buffers, over max_data_memory %d", got, budget)
	}
	held := int64(heapInuse()) - int64(before)
	t.Logf("%d SRP_CMDs of %d bytes make the target hold %d MiB (budget %d MiB; RDMA Read Requests received: %d)", n, 64, held>>20, budget>>20, len(p.heldReads))
	if held > budget+slack {
		t.Fatalf("heap grew %d MiB with a budget of %d MiB", held>>20, budget>>20)
	}
	rst(p)
	tg.waitSessions(t, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, mem := heapInuse(), tg.port.DataMemory()
		if int64(after)-int64(before) < slack && mem == 0 {
			t.Logf("after the reset: %d MiB above the start", int64(after-before)>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reset the heap stays %d MiB above the start, port data memory %d bytes: data buffers leaked", int64(after-before)>>20, mem)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
