package target

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp"
)

// A READ's write list is posted in chunks (queueSend). When the channel
// leaves LIVE by SRP_T_LOGOUT (no disconnect) with the first chunk posted
// and the response still queued, its views must stay held until the
// posted RDMA WRITEs are done: another initiator's ORDERED WRITE of the
// same blocks waits, and the stalled WRITE sends the data the READ read.
func TestViewsHeldByPostedWritesAtLogout(t *testing.T) {
	e, ld := newViewEnv(t, func(c *Config) { c.SQSize, c.MaxRDMASize = 4, 16<<10 })
	a := e.login(defaultLogin())
	a.tur(2)
	old := bytes.Repeat([]byte{0x11}, 4096)
	a.sendIU(&srp.Cmd{Tag: 3, CDB: cdb10(0x2a, 0, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: old})
	if r := a.rspIU(); r.Status != 0 {
		t.Fatalf("initial WRITE: %#x", r.Status)
	}
	if err := ld.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	bufA, d := a.buf(0, 64<<10)
	for k := range bufA {
		bufA[k] = 0xEE
	}
	// READ(10) LBA 0, 128 blocks: 0x11 then zeros. Four 16 KiB
	// WRITEs: chunks [w0 w1] [w2 w3] posted, [SEND] waits in sendQ.
	a.sendIU(&srp.Cmd{Tag: 10, CDB: cdb10(0x28, 0, 128), DataIn: direct(d)})
	time.Sleep(200 * time.Millisecond)
	removeSessions(e)
	time.Sleep(100 * time.Millisecond)

	lr := defaultLogin()
	lr.InitiatorPortID = srp.NewPortID(0x99, 0x0002c90300009999)
	b := e.login(lr)
	b.tur(3)
	data := bytes.Repeat([]byte{0x5A}, 4096)
	t0 := time.Now()
	b.sendIU(&srp.Cmd{Tag: 20, TaskAttr: srp.TaskAttrOrdered, CDB: cdb10(0x2a, 0, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: data})
	r := b.rspIU()
	t.Logf("ORDERED WRITE status %#x after %v", r.Status, time.Since(t0))
	time.Sleep(2 * time.Second)
	a.waitClosed() // T_LOGOUT, then the disconnect: orders the test's read after the WRITEs
	got := append([]byte(nil), bufA[:4096]...)
	if bytes.Equal(got, data) {
		t.Fatalf("initiator A's READ buffer holds the ORDERED WRITE's data, which ran after A's views were released: the stalled RDMA WRITE read the backstore after ReleaseViews")
	}
	t.Logf("bufA[0:8] = % x", got[:8])
}
