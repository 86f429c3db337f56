package target

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp"
)

// A 128 KiB WRITE to a RAM logical unit, on a device that gives local
// regions, is fetched by RDMA READs into the medium's own memory (local
// regions as the sinks, no data buffer taken) and reads back; so does one
// described by several descriptors.
func TestViewOutWriteReadBack(t *testing.T) {
	e, ld := newViewEnv(t, nil)
	i := e.login(defaultLogin())
	i.tur(2)
	for k, out := range []func() srp.DataBuf{
		func() srp.DataBuf { _, d := i.buf(0, 128<<10); return direct(d) },
		func() srp.DataBuf {
			ds := i.split(0, 128<<10, 3)
			return srp.DataBuf{Format: srp.DescIndirect, Desc: ds, Table: i.tableAt(3<<20, ds), Len: 128 << 10}
		},
	} {
		mem, _ := i.buf(0, 128<<10)
		fill(mem, byte(k+1))
		want := bytes.Clone(mem)
		regions := ld.regions.Load()
		tag := uint64(10 + 2*k)
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x2a, 64, 256), DataOut: out()})
		checkGood(t, i.rspIU(), tag)
		if ld.regions.Load() == regions {
			t.Fatalf("WRITE %d: no local region: the data-out was not placed into the medium", k)
		}
		waitDataMemory(t, e, func(n int64) bool { return n == 0 }, "no data memory held after the WRITE")
		back, d := i.buf(1<<20, 128<<10)
		clear(back)
		i.sendIU(&srp.Cmd{Tag: tag + 1, CDB: cdb10(0x28, 64, 256), DataIn: direct(d)})
		checkGood(t, i.rspIU(), tag+1)
		if !bytes.Equal(back, want) {
			t.Fatalf("WRITE %d: the data read back differs", k)
		}
	}
}

// A WRITE whose RDMA READ stalls holds its task in the core; however the
// channel goes away meanwhile, the task ends once its READs are flushed
// (posted) or dropped (queued behind ORD), so an ORDERED command of the
// next login runs.
func TestViewOutChannelGone(t *testing.T) {
	for _, how := range []string{"close", "logout"} {
		t.Run(how, func(t *testing.T) {
			e, ld := newViewEnv(t, nil)
			i := e.login(defaultLogin())
			i.tur(2)
			if err := ld.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMARead, Delay: time.Second}); err != nil {
				t.Fatal(err)
			}
			// 32 descriptors with gaps between them (so they are not
			// merged): 32 READs, more than ORD lets out at once.
			var ds []srp.DirectBuf
			for k := range 32 {
				_, d := i.buf(k*8192, 4096)
				ds = append(ds, d)
			}
			i.sendIU(&srp.Cmd{Tag: 10, CDB: cdb10(0x2a, 0, 256), DataOut: srp.DataBuf{Format: srp.DescIndirect, Desc: ds, Table: i.tableAt(3<<20, ds), Len: 128 << 10}})
			time.Sleep(100 * time.Millisecond)
			if how == "close" {
				_ = i.conn.Close()
			} else {
				removeSessions(e)
			}
			waitReleased(t, e)
			if !orderedRuns(t, e) {
				t.Fatal("ORDERED READ never answered: the WRITE's task was left in the task set")
			}
		})
	}
}

// ABORT TASK of a WRITE whose RDMA READ stalls is answered FUNCTION
// COMPLETE once the READ is done, and the WRITE gets no response.
func TestViewOutAbortTask(t *testing.T) {
	e, ld := newViewEnv(t, nil)
	i := e.login(defaultLogin())
	i.tur(2)
	if err := ld.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMARead, Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	_, d := i.buf(0, 128<<10)
	i.sendIU(&srp.Cmd{Tag: 10, CDB: cdb10(0x2a, 0, 256), DataOut: direct(d)})
	time.Sleep(50 * time.Millisecond)
	i.sendIU(&srp.TaskMgmt{Tag: 100, Func: srp.TMFAbortTask, TaskTag: 10})
	r := i.rspIU()
	if code, ok := r.TMFCode(); !ok || code != srp.TMFRspComplete || r.Tag != 100 {
		t.Fatalf("ABORT TASK: %+v, want tag 100 FUNCTION COMPLETE", r)
	}
	// The next response is a new command's, not the aborted WRITE's.
	i.sendIU(&srp.Cmd{Tag: 11, CDB: cdb10(0x00, 0, 0)})
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	b, err := i.tryNext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rsp srp.Rsp
	if err := rsp.Unmarshal(b); err != nil || rsp.Tag != 11 {
		t.Fatalf("after ABORT TASK: %+v (%v), want the TEST UNIT READY's response", rsp, err)
	}
}
