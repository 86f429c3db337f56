package target

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// waitDataMemory polls the port's data-memory count until it is want, or
// fails the test at the environment's deadline.
func waitDataMemory(t *testing.T, e *env, cond func(int64) bool, what string) {
	t.Helper()
	for !cond(e.port.DataMemory()) {
		if e.ctx.Err() != nil {
			t.Fatalf("data memory %d bytes: want %s", e.port.DataMemory(), what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextRsp returns the next SRP_RSP, answering SRP_CRED_REQs on the way.
func nextRsp(t *testing.T, i *ini) *srp.Rsp {
	t.Helper()
	for {
		b := i.next()
		if b[0] == byte(srp.OpCredReq) {
			var cr srp.CredReq
			if err := cr.Unmarshal(b); err != nil {
				t.Fatalf("SRP_CRED_REQ % x: %v", b, err)
			}
			i.sendIU(&srp.CredRsp{Tag: cr.Tag})
			continue
		}
		r, err := srp.UnmarshalRsp(b)
		if err != nil {
			t.Fatalf("want SRP_RSP, got % x: %v", b, err)
		}
		return r
	}
}

// TestDataMemoryBudget: with MaxDataMemory of four 16 KiB buffers, a fifth
// READ of 16 KiB is answered at once with TASK SET FULL (SAM-5 §5.3.1,
// status 28h) and its credit, without reaching the SCSI core; the budget
// is given back by a completion, an ABORT TASK and a channel close, and
// ends at zero.
func TestDataMemoryBudget(t *testing.T) {
	const bufLen = 16 << 10 // one size class: 16384 bytes counted per buffer
	e := newEnv(t, func(c *Config) {
		c.MaxDataLen = bufLen
		c.MaxDataMemory = 4 * bufLen
	})
	var mu sync.Mutex
	gates := map[uint64]chan struct{}{}
	gate := func(tag uint64) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[tag] == nil {
			gates[tag] = make(chan struct{})
		}
		return gates[tag]
	}
	started := make(chan uint64, 16)
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.CDB[0] != 0x28 {
			return scsi.Result{}, false
		}
		started <- cmd.Tag
		select {
		case <-gate(cmd.Tag):
			return scsi.Result{}, false
		case <-ctx.Done():
			return scsi.Result{Aborted: true}, true
		}
	})
	waitStart := func(tag uint64) {
		t.Helper()
		select {
		case got := <-started:
			if got != tag {
				t.Fatalf("core started tag %d, want %d", got, tag)
			}
		case <-e.ctx.Done():
			t.Fatalf("tag %d never reached the core", tag)
		}
	}
	i := e.login(defaultLogin())
	_, d := i.buf(0, bufLen)
	read := func(tag uint64) {
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x28, 0, bufLen/512), DataIn: direct(d)})
	}
	for tag := uint64(1); tag <= 4; tag++ {
		read(tag)
		waitStart(tag)
	}
	if got := e.port.DataMemory(); got != 4*bufLen {
		t.Fatalf("4 commands of %d bytes hold %d bytes, want %d", bufLen, got, 4*bufLen)
	}

	// Over the budget: TASK SET FULL, no sense, credit back, core not asked.
	read(5)
	r := nextRsp(t, i)
	if r.Tag != 5 || r.Status != 0x28 || r.ReqLimDelta < 1 || len(r.Sense) != 0 || r.Flags&srp.SnsValid != 0 {
		t.Fatalf("command over the budget: %+v, want tag 5, status 0x28, req_lim_delta >= 1, no sense", r)
	}
	select {
	case tag := <-started:
		t.Fatalf("tag %d reached the core over the budget", tag)
	default:
	}

	// A completion gives its buffer back (once its SRP_RSP's SEND is done).
	close(gate(1))
	if r := nextRsp(t, i); r.Tag != 1 || r.Status != 0 {
		t.Fatalf("completion: %+v, want tag 1 GOOD", r)
	}
	waitDataMemory(t, e, func(n int64) bool { return n == 3*bufLen }, "3 buffers after a completion")
	read(6)
	waitStart(6)

	// ABORT TASK of a command in the core gives its buffer back.
	i.sendIU(&srp.TaskMgmt{Tag: 100, Func: srp.TMFAbortTask, TaskTag: 2})
	r = nextRsp(t, i)
	if code, ok := r.TMFCode(); !ok || code != srp.TMFRspComplete || r.Tag != 100 {
		t.Fatalf("ABORT TASK: %+v, want tag 100 FUNCTION COMPLETE", r)
	}
	waitDataMemory(t, e, func(n int64) bool { return n == 3*bufLen }, "3 buffers after an abort")

	// Closing the channel with commands in the core gives back the rest.
	_ = i.conn.Close()
	waitDataMemory(t, e, func(n int64) bool { return n == 0 }, "0 after the channel closed")
}

// TestMaxDataMemoryValidate: the budget must hold one buffer of
// MaxDataLen (its power-of-two size class); 0 takes the default.
func TestMaxDataMemoryValidate(t *testing.T) {
	if err := (Config{MaxDataLen: 16 << 20, MaxDataMemory: 16<<20 - 1}).Validate(); err == nil {
		t.Fatal("max_data_memory below max_data_len accepted")
	}
	if err := (Config{MaxDataLen: 5000, MaxDataMemory: 5000}).Validate(); err == nil {
		t.Fatal("max_data_memory below max_data_len's 8192-byte size class accepted")
	}
	if err := (Config{MaxDataLen: 5000, MaxDataMemory: 8192}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Config{}).withDefaults().MaxDataMemory; got != 512<<20 {
		t.Fatalf("default max_data_memory %d, want %d", got, 512<<20)
	}
	if got := (Config{MaxDataLen: 1 << 30}).withDefaults().MaxDataMemory; got != 1<<30 {
		t.Fatalf("default max_data_memory with max_data_len 1 GiB: %d, want %d", got, 1<<30)
	}
}
