package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

type coreOf struct{ t *scsi.Target }

func (c coreOf) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return c.t.OpenSession(n, v), nil
}

// gateway is one srptd-like target exporting the shared medium as LUN 0,
// with its own target port group.
type gateway struct {
	t      *testing.T
	net    *loopback.Network
	addr   string
	core   *scsi.Target
	medium backstore.Backstore
	group  uint16
	groups []scsi.PortGroup
	dev    *loopback.Device
	cancel context.CancelFunc
	served chan struct{}
	port   *target.Port
	dead   bool
}

func (g *gateway) start() {
	t := g.t
	g.core = scsi.NewTarget(scsi.TargetConfig{TargetPortGroup: g.group})
	if err := g.core.SetPortGroups(g.groups); err != nil {
		t.Fatal(err)
	}
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: g.medium, Serial: "0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.core.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	g.dead = false
	g.dev = g.net.NewDevice(fmt.Sprintf("gw%d", g.group))
	p, err := target.NewPort(target.Config{ServiceGUID: 0x0002c90300a1b200 + uint64(g.group), DemoMode: true, RelativePort: g.group,
		LogoutTimeout: 200 * time.Millisecond}, g.dev, coreOf{g.core})
	if err != nil {
		t.Fatal(err)
	}
	l, err := g.dev.Listen(context.Background(), g.addr)
	if err != nil {
		t.Fatal(err)
	}
	g.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.served, g.port = cancel, make(chan struct{}), p
	go func() { defer close(g.served); _ = p.Serve(ctx, l) }()
}

// kill drops the gateway at once, as a SIGKILL does: every connection goes
// down, nothing is drained.
func (g *gateway) kill() {
	g.dead = true
	g.dev.Close()
	g.cancel()
	<-g.served
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.port.Close(cctx)
}

func newGateways(t *testing.T, states ...scsi.ALUAState) []*gateway {
	net := loopback.NewNetwork()
	medium := backstore.NewRAM(4 << 20)
	var all []scsi.PortGroup
	for i, st := range states {
		all = append(all, scsi.PortGroup{ID: uint16(i + 1), State: st, Preferred: i == 0, Ports: []uint16{uint16(i + 1)}})
	}
	var gws []*gateway
	for i := range states {
		g := &gateway{t: t, net: net, medium: medium, group: uint16(i + 1), groups: all}
		g.start()
		t.Cleanup(func() {
			if !g.dead {
				g.kill()
			}
		})
		gws = append(gws, g)
	}
	return gws
}

func dialAll(t *testing.T, ctx context.Context, gws []*gateway) *initiator.Multipath {
	var sessions []*initiator.Session
	var names []string
	for _, g := range gws {
		dev := g.net.NewDevice("host")
		t.Cleanup(func() { dev.Close() })
		s, err := initiator.Dial(ctx, dev, initiator.Options{Dest: g.addr, IDExt: 0x0002c90300a1b200 + uint64(g.group), IOCGUID: 0x0002c90300a1b200 + uint64(g.group),
			InitiatorExt: 1, InitiatorGUID: 0x1122334455667788, ReconnectDelay: 100 * time.Millisecond, FastIOFailTmo: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sessions = append(sessions, s)
		names = append(names, fmt.Sprintf("gw%d", g.group))
	}
	m, err := initiator.NewMultipath(ctx, sessions, names, 0, initiator.MultipathOptions{ProbeInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func block(lba uint64, gen byte) []byte {
	b := bytes.Repeat([]byte{gen}, 512)
	copy(b, fmt.Sprintf("lba %d gen %d", lba, gen))
	return b
}

// writeVerify writes blocks [0, n) of generation gen with qd writers through
// m, calling mid once after half, then reads every block back and counts
// mismatches.
func writeVerify(t *testing.T, ctx context.Context, m *initiator.Multipath, n uint64, gen byte, mid func()) (mismatches int) {
	var next uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var once sync.Once
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				lba := next
				next++
				mu.Unlock()
				if lba >= n {
					return
				}
				if lba == n/2 {
					once.Do(mid)
				}
				cdb := make([]byte, 16)
				initiator.PutRW16(cdb, true, lba, 1, false)
				if _, err := m.Run(ctx, &initiator.Command{CDB: cdb, DataOut: [][]byte{block(lba, gen)}}); err != nil {
					errs <- fmt.Errorf("write lba %d: %w", lba, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for lba := uint64(0); lba < n; lba++ {
		cdb := make([]byte, 16)
		initiator.PutRW16(cdb, false, lba, 1, false)
		buf := make([]byte, 512)
		if _, err := m.Run(ctx, &initiator.Command{CDB: cdb, DataIn: [][]byte{buf}}); err != nil {
			t.Fatalf("read lba %d: %v", lba, err)
		}
		if !bytes.Equal(buf, block(lba, gen)) {
			mismatches++
		}
	}
	return mismatches
}

func waitCurrent(t *testing.T, m *initiator.Multipath, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// Traffic makes the multipath pick the best path.
		_, _ = m.Run(ctx, &initiator.Command{CDB: make([]byte, 6)})
		cancel()
		if p := m.Current(); p != nil && p.Name == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("current path %v, want %s", m.Current(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMultipathGatewayDeath: two gateways on one medium, gw1 active/optimized
// and gw2 active/non-optimized; gw1 dies in the middle of a write run, which
// finishes through gw2 with every block intact; gw1 restarts and takes the
// I/O back.
func TestMultipathGatewayDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gws := newGateways(t, scsi.ALUAActiveOptimized, scsi.ALUAActiveNonOptimized)
	m := dialAll(t, ctx, gws)
	if p := m.Current(); p == nil || p.Name != "gw1" {
		t.Fatalf("first path %v, want gw1 (active/optimized)", p)
	}
	if bad := writeVerify(t, ctx, m, 2000, 1, gws[0].kill); bad != 0 {
		t.Fatalf("%d mismatches after gw1 died", bad)
	}
	if p := m.Current(); p.Name != "gw2" {
		t.Fatalf("path after gw1 died: %s, want gw2", p.Name)
	}
	gws[0].start() // same address: its session reconnects
	waitCurrent(t, m, "gw1")
	if bad := writeVerify(t, ctx, m, 200, 2, func() {}); bad != 0 {
		t.Fatalf("%d mismatches after failback", bad)
	}
}

// TestMultipathRefusedState: gw1 turns standby under I/O; commands it
// refuses (NOT READY, TARGET PORT IN STANDBY STATE) are re-issued on gw2; it
// turns active/optimized again and gets the I/O back.
func TestMultipathRefusedState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gws := newGateways(t, scsi.ALUAActiveOptimized, scsi.ALUAActiveNonOptimized)
	m := dialAll(t, ctx, gws)
	standby := func() {
		if err := gws[0].core.SetPortGroupState(1, scsi.ALUAStandby); err != nil {
			t.Error(err)
		}
	}
	if bad := writeVerify(t, ctx, m, 1000, 3, standby); bad != 0 {
		t.Fatalf("%d mismatches", bad)
	}
	if p := m.Current(); p.Name != "gw2" {
		t.Fatalf("path with gw1 in standby: %s, want gw2", p.Name)
	}
	if err := gws[0].core.SetPortGroupState(1, scsi.ALUAActiveOptimized); err != nil {
		t.Fatal(err)
	}
	waitCurrent(t, m, "gw1")
}

// TestMultipathNotSameLU: sessions to different logical units are refused.
func TestMultipathNotSameLU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newGateways(t, scsi.ALUAActiveOptimized)
	b := newGateways(t, scsi.ALUAActiveOptimized)
	b[0].core.RemoveLUN(0)
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(1 << 20), Serial: "fedcba9876543210"})
	if err != nil {
		t.Fatal(err)
	}
	b[0].core.AddLUN(0, lu)
	var sessions []*initiator.Session
	for _, g := range []*gateway{a[0], b[0]} {
		dev := g.net.NewDevice("host")
		t.Cleanup(func() { dev.Close() })
		s, err := initiator.Dial(ctx, dev, initiator.Options{Dest: g.addr, IDExt: 0x0002c90300a1b200 + uint64(g.group), IOCGUID: 0x0002c90300a1b200 + uint64(g.group), InitiatorExt: 1, InitiatorGUID: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sessions = append(sessions, s)
	}
	if _, err := initiator.NewMultipath(ctx, sessions, nil, 0, initiator.MultipathOptions{}); !errors.Is(err, initiator.ErrNotSameLU) {
		t.Fatalf("NewMultipath over two LUs: %v, want ErrNotSameLU", err)
	}
}

// TestMultipathActivatesStandby: gw1 active/optimized, gw2 standby; gw1 dies
// under writes, and the multipath activates gw2 with SET TARGET PORT GROUPS
// (explicit ALUA), which then serves the rest of the run.
func TestMultipathActivatesStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gws := newGateways(t, scsi.ALUAActiveOptimized, scsi.ALUAStandby)
	m := dialAll(t, ctx, gws)
	if bad := writeVerify(t, ctx, m, 1000, 4, gws[0].kill); bad != 0 {
		t.Fatalf("%d mismatches", bad)
	}
	if p := m.Current(); p.Name != "gw2" {
		t.Fatalf("path after gw1 died: %s, want gw2", p.Name)
	}
	if pg := gws[1].core.PortGroups(); pg[1].ID != 2 || pg[1].State != scsi.ALUAActiveOptimized {
		t.Fatalf("gw2's groups after the failover: %+v, want group 2 active/optimized", pg)
	}
}
