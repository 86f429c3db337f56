//go:build ceph

package rbd

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/scsi/pr"
)

// gatewayPR is one gateway's reservation state on the shared object.
func gatewayPR(t *testing.T, im *Image) *pr.State {
	t.Helper()
	var st *pr.State
	store, err := im.ReservationStore(func() { st.Invalidate() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	st = pr.New(pr.Config{Shared: store})
	if err := st.Refresh(); err != nil {
		t.Fatal(err)
	}
	return st
}

func nexus(ini, tgt string) pr.Nexus {
	tid := make([]byte, 24)
	tid[0] = 0x04
	id, _ := hex.DecodeString(ini)
	copy(tid[8:], id)
	return pr.Nexus{InitiatorPortID: ini, TargetPortID: tgt, RelativeTargetPort: 1, TransportID: tid}
}

// prOut runs PERSISTENT RESERVE OUT with a basic parameter list (SPC-4
// tables 208, 213).
func prOut(st *pr.State, n pr.Nexus, sa byte, typ pr.Type, key, saKey uint64) pr.Outcome {
	cdb := make([]byte, 10)
	cdb[0], cdb[1], cdb[2] = 0x5F, sa, byte(typ)
	binary.BigEndian.PutUint32(cdb[5:], 24)
	p := make([]byte, 24)
	binary.BigEndian.PutUint64(p, key)
	binary.BigEndian.PutUint64(p[8:], saKey)
	_, o := st.Out(n, cdb, p)
	return o
}

// readKeys returns PRgeneration and the registered keys (READ KEYS).
func readKeys(t *testing.T, st *pr.State, n pr.Nexus) (uint32, int) {
	cdb := []byte{0x5E, 0, 0, 0, 0, 0, 0, 0x10, 0, 0}
	buf := make([]byte, 4096)
	m, o := st.In(n, cdb, buf)
	if !o.OK() || m < 8 {
		t.Fatalf("READ KEYS: %v", o)
	}
	return binary.BigEndian.Uint32(buf), int(binary.BigEndian.Uint32(buf[4:]) / 8)
}

// TestSharedReservations: two gateways on one image share registrations, the
// reservation and PRgeneration through the RADOS object; a reservation taken
// through A is enforced by B as soon as A's command completed; concurrent
// registrations through both lose nothing; a gateway started later adopts
// the state.
func TestSharedReservations(t *testing.T) {
	a, cfg := openNew(t, 1<<20)
	cfg.CreateSize = 0
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	pa, pb := gatewayPR(t, a), gatewayPR(t, b)
	const tA, tB = "1111111111111111111111111111111f", "2222222222222222222222222222222f"
	n1A, n2B := nexus("0000000000000000000000000000000a", tA), nexus("0000000000000000000000000000000b", tB)
	if o := prOut(pa, n1A, pr.OutRegister, 0, 0, 0xA); !o.OK() {
		t.Fatal(o)
	}
	if o := prOut(pb, n2B, pr.OutRegister, 0, 0, 0xB); !o.OK() {
		t.Fatal(o)
	}
	if o := prOut(pa, n1A, pr.OutReserve, pr.WriteExclusive, 0xA, 0); !o.OK() {
		t.Fatal(o)
	}
	// No PR command through B since: the notify made it re-read.
	if o := pb.Check(n2B, pr.ClassWrite); o.OK() {
		t.Fatal("gateway B let a write through under A's WRITE EXCLUSIVE reservation")
	}
	if o := pb.Check(n1A, pr.ClassWrite); !o.OK() {
		t.Fatalf("gateway B refused the holder's write: %v", o)
	}
	if o := prOut(pb, n1A, pr.OutRelease, pr.WriteExclusive, 0xA, 0); !o.OK() {
		t.Fatal(o)
	}
	if o := pa.Check(n2B, pr.ClassWrite); !o.OK() {
		t.Fatalf("gateway A still enforces the reservation released through B: %v", o)
	}

	const per = 10
	var wg sync.WaitGroup
	for g, st := range []*pr.State{pa, pb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				n := nexus(fmt.Sprintf("%016x%016x", g+1, i+1), tA)
				if o := prOut(st, n, pr.OutRegister, 0, 0, uint64(g<<8|i+1)); !o.OK() {
					t.Errorf("register through gateway %d: %v", g, o)
				}
			}
		}()
	}
	wg.Wait()
	gen, keys := readKeys(t, pa, n1A)
	// 2 registrations, a reservation and its release (RESERVE and RELEASE do
	// not count, SPC-4 §6.15.2), then 2*per registrations.
	if keys != 2+2*per || gen != uint32(2+2*per) {
		t.Fatalf("gen %d, %d keys; want %d and %d", gen, keys, 2+2*per, 2+2*per)
	}

	// A gateway started later sees it all.
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if g2, k2 := readKeys(t, gatewayPR(t, c), n1A); g2 != gen || k2 != keys {
		t.Fatalf("new gateway: gen %d, %d keys; want %d and %d", g2, k2, gen, keys)
	}
}
