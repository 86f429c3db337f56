package pr

import (
	"fmt"
	"sync"
	"testing"
)

// memShared is a SharedStore in memory with the notify of a real one: after
// a successful swap every other State sharing it refreshes before
// CompareAndSwap returns.
type memShared struct {
	mu      sync.Mutex
	data    []byte
	ver     uint64
	states  []*State
	swaps   int
	refused int
}

func (m *memShared) Load() ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data, m.ver, nil
}

func (m *memShared) CompareAndSwap(ver uint64, data []byte) (uint64, bool, error) {
	m.mu.Lock()
	if ver != m.ver {
		m.refused++
		m.mu.Unlock()
		return 0, false, nil
	}
	m.data, m.ver = data, m.ver+1
	m.swaps++
	nv, states := m.ver, m.states
	m.mu.Unlock()
	for _, s := range states {
		s.Invalidate()
	}
	return nv, true, nil
}

func sharedPair(t *testing.T) (*memShared, *fix, *fix) {
	m := &memShared{}
	a, b := newFix(t, Config{Shared: m}), newFix(t, Config{Shared: m})
	m.states = []*State{a.s, b.s}
	return m, a, b
}

// TestSharedAcrossGateways: a registration and a reservation made through
// gateway A are what gateway B reports and enforces, at once.
func TestSharedAcrossGateways(t *testing.T) {
	_, a, b := sharedPair(t)
	a.register(nA, 0xA)
	b.register(nB2, 0xB)
	gen, keys := a.keys()
	if gen != 2 || len(keys) != 2 || keys[0] != 0xA || keys[1] != 0xB {
		t.Fatalf("A reads gen %d keys %x, want 2 [a b]", gen, keys)
	}
	a.reserve(nA, 0xA, WriteExclusive)
	// B enforces A's reservation on its own nexuses without a PR command.
	if o := b.s.Check(nB2, ClassWrite); o.OK() {
		t.Fatal("B let a write through under A's WRITE EXCLUSIVE reservation")
	}
	if o := b.s.Check(nA, ClassWrite); !o.OK() {
		t.Fatalf("B refused the holder's write: %v", o)
	}
	if key, typ, ok := b.resv(); !ok || key != 0xA || typ != WriteExclusive {
		t.Fatalf("B reads reservation %x/%v/%v", key, typ, ok)
	}
	// A release through B is seen by A.
	b.must(nA, OutRelease, WriteExclusive, basic(0xA, 0, 0))
	if o := a.s.Check(nB2, ClassWrite); !o.OK() {
		t.Fatalf("A still enforces the released reservation: %v", o)
	}
}

// TestSharedConcurrentRegistrations: gateways registering at the same time
// lose compare-and-sets, re-read and apply again: no registration is lost
// and PRgeneration counts every one.
func TestSharedConcurrentRegistrations(t *testing.T) {
	m, a, b := sharedPair(t)
	const per = 20
	var wg sync.WaitGroup
	for g, f := range []*fix{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				ini := fmt.Sprintf("%016x%016x", g+1, i+1)
				n := Nexus{InitiatorPortID: ini, TargetPortID: t1, RelativeTargetPort: 1, TransportID: tid(ini)}
				if _, o := f.s.Out(n, outCDB(OutRegister, 0, 24), basic(0, uint64(g<<8|i+1), 0)); !o.OK() {
					t.Errorf("register %s: %v", ini, o)
				}
			}
		}()
	}
	wg.Wait()
	gen, keys := b.keys()
	if gen != 2*per || len(keys) != 2*per {
		t.Fatalf("gen %d, %d keys; want %d and %d", gen, len(keys), 2*per, 2*per)
	}
	if m.swaps != 2*per {
		t.Fatalf("%d swaps, want %d", m.swaps, 2*per)
	}
	t.Logf("%d compare-and-sets lost and retried", m.refused)
}

// TestSharedRestart: a gateway that starts later (or restarts) adopts the
// stored state, PRgeneration included.
func TestSharedRestart(t *testing.T) {
	m, a, _ := sharedPair(t)
	a.register(nA, 0xA)
	a.reserve(nA, 0xA, ExclusiveAccess)
	c := newFix(t, Config{Shared: m})
	if err := c.s.Refresh(); err != nil {
		t.Fatal(err)
	}
	if o := c.s.Check(nB, ClassRead); o.OK() {
		t.Fatal("a new gateway does not enforce the stored reservation")
	}
	if gen, keys := c.keys(); gen != 1 || len(keys) != 1 {
		t.Fatalf("new gateway reads gen %d keys %x", gen, keys)
	}
	// REPORT CAPABILITIES: PTPL_C with a shared store.
	if b := c.in(nA, InReportCapabilities); b[2]&0x01 == 0 {
		t.Fatalf("PTPL_C not set: % x", b)
	}
}
