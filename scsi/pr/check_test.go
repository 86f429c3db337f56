package pr

import (
	"sync"
	"testing"
)

func TestCheckMatrix(t *testing.T) {
	// SPC-4 §5.13.1 table 45 and SBC-3 table 13, for a write-class and a
	// read-class command: holder, registered non-holder, unregistered.
	// "A" allowed, "C" RESERVATION CONFLICT; each pair is write then read.
	for _, tc := range []struct {
		typ                Type
		holder, reg, unreg string
	}{
		{WriteExclusive, "AA", "CA", "CA"},
		{ExclusiveAccess, "AA", "CC", "CC"},
		{WriteExclusiveRegistrantsOnly, "AA", "AA", "CA"},
		{ExclusiveAccessRegistrantsOnly, "AA", "AA", "CC"},
		{WriteExclusiveAllRegistrants, "AA", "AA", "CA"},
		{ExclusiveAccessAllRegistrants, "AA", "AA", "CC"},
	} {
		f := newFix(t, Config{})
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		f.reserve(nA, 0xA, tc.typ)
		for _, row := range []struct {
			n    Nexus
			want string
		}{{nA, tc.holder}, {nB, tc.reg}, {nC, tc.unreg}} {
			got := ""
			for _, cl := range []Class{ClassWrite, ClassRead} {
				switch f.s.Check(row.n, cl).Reason {
				case OK:
					got += "A"
				case ReservationConflict:
					got += "C"
				default:
					got += "?"
				}
			}
			if got != row.want {
				t.Errorf("%v, nexus %s: %s, want %s", tc.typ, name(row.n), got, row.want)
			}
			for _, cl := range []Class{ClassAllowed, ClassUnrestricted, ClassPersistentReserve, ClassReserveRelease} {
				if o := f.s.Check(row.n, cl); !o.OK() {
					t.Errorf("%v, nexus %s, class %v: %v", tc.typ, name(row.n), cl, o)
				}
			}
		}
	}
	// No reservation, registrations or not: everything is allowed.
	f := newFix(t, Config{})
	f.register(nA, 0xA)
	for _, n := range []Nexus{nA, nB} {
		for cl := ClassWrite; cl <= ClassReserveRelease; cl++ {
			if o := f.s.Check(n, cl); !o.OK() {
				t.Errorf("no reservation, %s, %v: %v", name(n), cl, o)
			}
		}
	}
}

func TestCheckByCDB(t *testing.T) {
	// End to end through Classify: WRITE(10) and READ(10) and TEST UNIT READY
	// from an unregistered nexus under EX_AC_RO.
	f := newFix(t, Config{})
	f.register(nA, 0xA)
	f.reserve(nA, 0xA, ExclusiveAccessRegistrantsOnly)
	for _, tc := range []struct {
		cdb  []byte
		want Reason
	}{
		{[]byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, ReservationConflict},
		{[]byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, ReservationConflict},
		{[]byte{0x00, 0, 0, 0, 0, 0}, OK},
		{[]byte{0x12, 0, 0, 0, 36, 0}, OK},
		{[]byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, OK},
	} {
		if o := f.s.Check(nB, Classify(tc.cdb)); o.Reason != tc.want {
			t.Errorf("opcode %#x: %v, want %v", tc.cdb[0], o, tc.want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	// Many nexuses registering, reserving, checking and reading at once;
	// run with -race. Every goroutine's own steps must succeed.
	f := newFix(t, Config{})
	var wg sync.WaitGroup
	for i := range 8 {
		n := nx(iA[:30]+string("0123456789abcdef"[i])+"f", t1, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := uint64(i + 1)
			buf := make([]byte, 512)
			for range 50 {
				if _, o := f.s.Out(n, outCDB(OutRegister, 0, 24), basic(0, key, 0)); !o.OK() {
					t.Errorf("register: %v", o)
					return
				}
				_, _ = f.s.Out(n, outCDB(OutReserve, WriteExclusiveAllRegistrants, 24), basic(key, 0, 0))
				f.s.Check(n, ClassWrite)
				f.s.In(n, inCDB(InReadFullStatus, 512), buf)
				if _, o := f.s.Out(n, outCDB(OutRegister, 0, 24), basic(key, 0, 0)); !o.OK() {
					t.Errorf("unregister: %v", o)
					return
				}
			}
		}()
	}
	wg.Wait()
	if gen, keys := f.keys(); len(keys) != 0 || gen != 8*50*2 {
		t.Errorf("gen %d keys %x", gen, keys)
	}
	if _, _, ok := f.resv(); ok {
		t.Error("reservation survived every registrant")
	}
}

func BenchmarkCheck(b *testing.B) {
	for _, tc := range []struct {
		name string
		typ  Type
	}{{"unreserved", 0}, {"EX_AC_RO", ExclusiveAccessRegistrantsOnly}} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Config{})
			for i, n := range []Nexus{nA, nB, nC} {
				s.Out(n, outCDB(OutRegister, 0, 24), basic(0, uint64(i+1), 0))
			}
			if tc.typ != 0 {
				s.Out(nA, outCDB(OutReserve, tc.typ, 24), basic(1, 0, 0))
			}
			cdb := []byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 8, 0}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Check(nC, Classify(cdb))
				}
			})
		})
	}
}
