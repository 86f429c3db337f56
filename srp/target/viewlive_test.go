package target

import (
	"fmt"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp"
)

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

// Every way a channel with views in flight goes away must give
// them back (else later ORDERED tasks of the LU hang forever).
func TestViewsReleasedOnEveryTeardown(t *testing.T) {
	type tc struct {
		name  string
		mod   func(*Config)
		fault loopback.Fault
		end   func(e *env, i *ini)
	}
	closeConn := func(e *env, i *ini) { _ = i.conn.Close() }
	logout := func(e *env, i *ini) {
		e.port.mu.Lock()
		var ids []string
		for c := range e.port.channels {
			ids = append(ids, fmt.Sprint(c.id))
		}
		e.port.mu.Unlock()
		for _, id := range ids {
			e.port.RemoveSession(id)
		}
		// the initiator goes away after the T_LOGOUT
		time.Sleep(100 * time.Millisecond)
		_ = i.conn.Close()
	}
	for _, c := range []tc{
		{"stall+close", func(c *Config) { c.SQSize = 4 }, loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 2 * time.Second}, closeConn},
		{"stall+logout", func(c *Config) { c.SQSize = 4 }, loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 2 * time.Second}, logout},
		{"stall+close SRQ", func(c *Config) { c.SQSize, c.UseSRQ, c.SRQSize = 4, true, 64 }, loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 2 * time.Second}, closeConn},
		{"stall+logout SRQ", func(c *Config) { c.SQSize, c.UseSRQ, c.SRQSize = 4, true, 64 }, loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 2 * time.Second}, logout},
		{"write error", nil, loopback.Fault{Op: rdma.OpRDMAWrite, Skip: 3, Status: rdma.StatusRemoteAccess}, closeConn},
		{"send error", nil, loopback.Fault{Op: rdma.OpSend, Skip: 4, Status: rdma.StatusRemoteAccess}, closeConn},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ld := newViewEnv(t, c.mod)
			i := e.login(defaultLogin())
			for tag := uint64(1); tag <= 2; tag++ {
				i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x00, 0, 0)})
				i.rspIU()
			}
			if err := ld.raw.InjectFault(c.fault); err != nil {
				t.Fatal(err)
			}
			for k := range 8 {
				_, d := i.buf(k*(256<<10), 256<<10)
				i.sendIU(&srp.Cmd{Tag: uint64(10 + k), CDB: cdb10(0x28, uint32(k*512), 512), DataIn: direct(d)})
			}
			time.Sleep(300 * time.Millisecond)
			c.end(e, i)
			waitReleased(t, e)
			if !orderedRuns(t, e) {
				t.Fatal("ORDERED READ never answered: views leaked")
			}
		})
	}
}
