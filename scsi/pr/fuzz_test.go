package pr

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func FuzzParseParams(f *testing.F) {
	f.Add(outCDB(OutRegister, 0, 24), basic(0, 1, fAPTPL|fAllTgPt))
	f.Add(outCDB(OutRegister, 0, 76), specIPT(0, 1, 0, tid(iB), tid(iC)))
	f.Add(outCDB(OutRegisterAndMove, 0, 48), moveParams(1, 2, 3, 1, tid(iB)))
	f.Add(outCDB(OutRegisterAndMove, 0, 0xFFFFFFFF), moveParams(1, 2, 3, 1, tid(iB)))
	f.Add([]byte{0x5F}, []byte{})
	f.Fuzz(func(t *testing.T, cdb, param []byte) {
		p, o := ParseParams(cdb, param)
		if !o.OK() {
			return
		}
		pll := int(binary.BigEndian.Uint32(cdb[5:9]))
		if pll < 24 || pll > len(param) {
			t.Fatalf("accepted PARAMETER LIST LENGTH %d with %d bytes", pll, len(param))
		}
		if p.ReservationKey != binary.BigEndian.Uint64(param) || p.ServiceActionKey != binary.BigEndian.Uint64(param[8:]) {
			t.Fatal("keys misread")
		}
		if cdb[1]&0x1f == OutRegisterAndMove {
			if 24+len(p.TransportID) > pll || int(binary.BigEndian.Uint32(param[20:])) != len(p.TransportID) || len(p.TransportID)%4 != 0 || len(p.TransportID) < 24 {
				t.Fatalf("TransportID of %d bytes in a list of %d", len(p.TransportID), pll)
			}
		} else if p.SpecIPT {
			tpdl := int(binary.BigEndian.Uint32(param[24:]))
			sum := 0
			for _, t := range p.TransportIDs {
				sum += len(t)
			}
			if cdb[1]&0x1f != OutRegister || 28+tpdl > pll || sum != tpdl {
				t.Fatalf("SPEC_I_PT list of %d bytes: TPDL %d, TransportIDs %d bytes", pll, tpdl, sum)
			}
		} else if pll != 24 {
			t.Fatalf("accepted basic list of %d bytes", pll)
		}
	})
}

// FuzzOut drives a State with a sequence of PR OUT, PR IN, RESERVE and
// RELEASE commands decoded from the input and checks invariants after each:
// no panic, failed commands change nothing, the reservation's holder is
// registered, and READ FULL STATUS lengths add up.
func FuzzOut(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 1, 1, 1, 1, 2, 4, 0, 2, 1})
	f.Add([]byte{0, 1, 0xA, 1, 0, 0xA, 5, 3, 0xA, 0xA, 7, 5, 0, 2, 0xA, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := &memPersister{}
		s := New(Config{Persister: m, MaxRegistrations: 4})
		nexuses := []Nexus{nA, nB, nC, nA2, nB2}
		next := func() byte {
			if len(prog) == 0 {
				return 0
			}
			b := prog[0]
			prog = prog[1:]
			return b
		}
		for steps := 0; len(prog) > 0 && steps < 64; steps++ {
			n := nexuses[int(next())%len(nexuses)]
			op := next()
			var img0 bytes.Buffer
			_ = s.Save(&img0)
			gen0 := s.Generation()
			var o Outcome
			switch op % 4 {
			case 0, 1:
				sa := next() % 9
				typ := Type(next() % 10)
				key, saKey := uint64(next()%4), uint64(next()%4)
				flags := next() & 0x0f
				var param []byte
				if sa == OutRegister && flags&fSpecIPT != 0 {
					param = specIPT(key, saKey, flags, tid(nexuses[int(next())%len(nexuses)].InitiatorPortID))
				} else if sa == OutRegisterAndMove {
					param = moveParams(key, saKey, flags&3, uint16(next()%3), tid(nexuses[int(next())%len(nexuses)].InitiatorPortID))
				} else {
					param = basic(key, saKey, flags)
				}
				_, o = s.Out(n, outCDB(sa, typ, uint32(len(param))), param)
			case 2:
				if next()%2 == 0 {
					o = s.Reserve(n, reserve10)
				} else {
					o = s.Release(n, release6)
				}
			case 3:
				buf := make([]byte, int(next())*4)
				var k int
				k, o = s.In(n, inCDB(next()%5, uint16(len(buf))), buf)
				if k > len(buf) {
					t.Fatalf("PR IN wrote %d bytes into %d", k, len(buf))
				}
			}
			var img1 bytes.Buffer
			_ = s.Save(&img1)
			if !o.OK() && (!bytes.Equal(img0.Bytes(), img1.Bytes()) || s.Generation() != gen0) {
				t.Fatalf("failed command (%v) changed the state", o)
			}
			// While APTPL is active the persisted image is the state; after
			// it is turned off the image is gone.
			last, writes := m.last()
			if s.APTPL() && !bytes.Equal(last, img1.Bytes()) {
				t.Fatalf("persisted image differs from the state:\n%s\n%s", last, img1.Bytes())
			}
			if !s.APTPL() && writes > 0 && last != nil {
				t.Fatal("image kept after APTPL was turned off")
			}
			s.mu.Lock()
			c := &s.c
			if c.res != nil && (c.byID(c.res.holder) == nil || !c.res.typ.Valid()) {
				t.Fatalf("reservation %+v without a registered holder", *c.res)
			}
			for _, r := range c.regs {
				if r.key == 0 || (r.target == "") != r.allTgPt {
					t.Fatalf("bad registration %+v", r)
				}
			}
			if len(c.regs) > 4 {
				t.Fatalf("%d registrations over the limit", len(c.regs))
			}
			fs := c.readFullStatus()
			s.mu.Unlock()
			if int(binary.BigEndian.Uint32(fs[4:]))+8 != len(fs) {
				t.Fatal("READ FULL STATUS length mismatch")
			}
		}
	})
}
