package target

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// localDev makes the loopback device an rdma.LocalRegioner (as the iWARP
// one is), so the target asks the core for views; its "local regions" are
// plain loopback registrations with local write (RDMA READ sinks), which
// the test never deregisters. regions counts them.
type localDev struct {
	*trackDev
	raw     *loopback.Device
	regions *atomic.Int64
}

func (d localDev) LocalRegion(buf []byte) rdma.MemoryRegion {
	d.regions.Add(1)
	mr, err := d.raw.Register(buf, rdma.AccessLocalWrite)
	if err != nil {
		panic(err)
	}
	return mr
}

// newViewEnv is newEnvCore over the real SCSI core with a RAM logical
// unit, on a loopback device that gives local regions.
func newViewEnv(t *testing.T, mod func(*Config)) (*env, localDev) {
	t.Helper()
	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(64 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	var ld localDev
	e := newEnvDev(t, mod, scsiCore{st}, func(td *trackDev, raw *loopback.Device) rdma.Device {
		ld = localDev{trackDev: td, raw: raw, regions: new(atomic.Int64)}
		return ld
	})
	return e, ld
}

// tur sends n TEST UNIT READYs (tags 1 to n) and reads their responses:
// the unit attentions of a new nexus are taken.
func (i *ini) tur(n int) {
	for tag := uint64(1); tag <= uint64(n); tag++ {
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x00, 0, 0)})
		i.rspIU()
	}
}

// waitReleased waits until the port has no channel.
func waitReleased(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.port.mu.Lock()
		n := len(e.port.channels)
		e.port.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("channel not released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeSessions ends every channel of the port by RemoveSession (the
// target sends SRP_T_LOGOUT).
func removeSessions(e *env) {
	e.port.mu.Lock()
	var ids []string
	for c := range e.port.channels {
		ids = append(ids, fmt.Sprint(c.id))
	}
	e.port.mu.Unlock()
	for _, id := range ids {
		e.port.RemoveSession(id)
	}
}

// orderedRuns logs in, clears the unit attention and sends an ORDERED
// READ: it reports whether its response came within 3 s.
func orderedRuns(t *testing.T, e *env) bool {
	t.Helper()
	i := e.login(defaultLogin())
	defer func() { _ = i.conn.Close() }()
	i.tur(2)
	_, d := i.buf(0, 4096)
	i.sendIU(&srp.Cmd{Tag: 99, TaskAttr: srp.TaskAttrOrdered, CDB: cdb10(0x28, 0, 8), DataIn: direct(d)})
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	_, err := i.tryNext(ctx)
	return err == nil
}

// Response batches still queued in the channel's sendQ when the connection
// goes down are dropped by sendQ.reset (effAbortCommands): their commands
// are never freed, so their views are never released and every later
// ORDERED task of the logical unit (any initiator) stays dormant forever.
func TestViewsLeakedBySendQueueReset(t *testing.T) {
	e, ld := newViewEnv(t, func(c *Config) { c.SQSize = 4 })
	i := e.login(defaultLogin())
	i.tur(2) // power-on unit attention
	// The first RDMA WRITE stalls the send queue; the responses behind it
	// wait in sendQ.
	if err := ld.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for k := range 8 {
		_, d := i.buf(k*(64<<10), 64<<10)
		i.sendIU(&srp.Cmd{Tag: uint64(10 + k), CDB: cdb10(0x28, uint32(k*128), 128), DataIn: direct(d)})
	}
	time.Sleep(300 * time.Millisecond)
	_ = i.conn.Close()
	waitReleased(t, e)
	if !orderedRuns(t, e) {
		t.Fatal("ORDERED READ never answered: views of commands dropped from sendQ were never released")
	}
}

// Control: with nothing left in sendQ at the disconnect the views are all
// released.
func TestViewsReleasedAfterCleanClose(t *testing.T) {
	e, _ := newViewEnv(t, nil)
	i := e.login(defaultLogin())
	i.tur(2)
	for k := range 8 {
		_, d := i.buf(k*(64<<10), 64<<10)
		i.sendIU(&srp.Cmd{Tag: uint64(10 + k), CDB: cdb10(0x28, uint32(k*128), 128), DataIn: direct(d)})
	}
	for range 8 {
		i.rspIU()
	}
	_ = i.conn.Close()
	time.Sleep(200 * time.Millisecond)
	if !orderedRuns(t, e) {
		t.Fatal("ORDERED READ never answered")
	}
}
