package target

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp"
)

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
		removeSessions(e)
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
			i.tur(2)
			if err := ld.raw.InjectFault(c.fault); err != nil {
				t.Fatal(err)
			}
			for k := range 8 {
				_, d := i.buf(k*(256<<10), 256<<10)
				b, err := (&srp.Cmd{Tag: uint64(10 + k), CDB: cdb10(0x28, uint32(k*512), 512), DataIn: direct(d)}).Marshal()
				if err != nil {
					t.Fatal(err)
				}
				// A fault may take the connection down before the last
				// READs are sent: the views of those sent must come back.
				if err := i.trySend(b); err != nil {
					if k == 0 {
						t.Fatalf("post send of READ %d: %v", k, err)
					}
					break
				}
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
