package pr

import "testing"

var (
	reserve6  = []byte{0x16, 0, 0, 0, 0, 0}
	release6  = []byte{0x17, 0, 0, 0, 0, 0}
	reserve10 = []byte{0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	release10 = []byte{0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0}
)

func TestSPC2ReserveRelease(t *testing.T) {
	f := newFix(t, Config{})
	expect := func(name string, o Outcome, want Reason) {
		t.Helper()
		if o.Reason != want {
			t.Errorf("%s: %v, want %v", name, o, want)
		}
	}
	expect("A RESERVE(6)", f.s.Reserve(nA, reserve6), OK)
	expect("A RESERVE(10) again", f.s.Reserve(nA, reserve10), OK)
	expect("B RESERVE(10)", f.s.Reserve(nB, reserve10), ReservationConflict)
	expect("A through port 2 is another nexus", f.s.Reserve(nA2, reserve6), ReservationConflict)

	// SPC-2 annex B: the holder may do anything; others only the
	// unrestricted commands.
	for _, tc := range []struct {
		cl   Class
		want Reason
	}{
		{ClassUnrestricted, OK}, {ClassAllowed, ReservationConflict},
		{ClassRead, ReservationConflict}, {ClassWrite, ReservationConflict},
	} {
		expect("A "+tc.cl.String(), f.s.Check(nA, tc.cl), OK)
		expect("B "+tc.cl.String(), f.s.Check(nB, tc.cl), tc.want)
	}
	// PERSISTENT RESERVE OUT conflicts with any SPC-2 reservation.
	for _, n := range []Nexus{nA, nB} {
		_, o := f.out(n, OutRegister, 0, basic(0, 1, 0))
		expect("PR OUT from "+name(n), o, ReservationConflict)
	}
	// ... before any field is checked.
	if _, o := f.s.Out(nB, outCDB(0x1F, 0, 3), nil); o.Reason != ReservationConflict {
		t.Errorf("bad PR OUT under SPC-2 reservation: %v", o)
	}
	if _, o := f.s.In(nB, inCDB(0x1F, 8), make([]byte, 8)); o.Reason != ReservationConflict {
		t.Errorf("bad PR IN under SPC-2 reservation: %v", o)
	}
	expect("B RELEASE(6): GOOD, no effect", f.s.Release(nB, release6), OK)
	expect("still reserved", f.s.Check(nB, ClassRead), ReservationConflict)
	expect("A RELEASE(10)", f.s.Release(nA, release10), OK)
	expect("released", f.s.Check(nB, ClassWrite), OK)
	expect("RELEASE with nothing reserved", f.s.Release(nB, release6), OK)

	// Released by I_T nexus loss of the holder only, and by LUN reset.
	expect("A RESERVE", f.s.Reserve(nA, reserve6), OK)
	f.s.NexusLost(nB)
	expect("B's nexus loss", f.s.Check(nB, ClassWrite), ReservationConflict)
	f.s.NexusLost(nA)
	expect("A's nexus loss", f.s.Check(nB, ClassWrite), OK)
	expect("B RESERVE", f.s.Reserve(nB, reserve10), OK)
	f.s.LUNReset()
	expect("LUN reset", f.s.Check(nA, ClassWrite), OK)
}

func TestSPC2CDBErrors(t *testing.T) {
	f := newFix(t, Config{})
	for _, tc := range []struct {
		name string
		o    Outcome
		want Outcome
	}{
		{"RESERVE(6) extent", f.s.Reserve(nA, []byte{0x16, 0x01, 0, 0, 0, 0}), badCDB(1, 0)},
		{"RESERVE(10) third party", f.s.Reserve(nA, []byte{0x56, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}), badCDB(1, 4)},
		{"RELEASE(10) third party", f.s.Release(nA, []byte{0x57, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}), badCDB(1, 4)},
		{"RESERVE short", f.s.Reserve(nA, []byte{0x16, 0}), badCDB(0, 7)},
		{"RESERVE(10) short", f.s.Reserve(nA, reserve10[:6]), badCDB(0, 7)},
		{"not a RESERVE", f.s.Reserve(nA, release6), badCDB(0, 7)},
		{"not a RELEASE", f.s.Release(nA, reserve6), badCDB(0, 7)},
		// SPC-2 §7.23: RELEASE(6) byte 1 bit 0 is the (unsupported) EXTENT bit.
		{"RELEASE(6) extent", f.s.Release(nA, []byte{0x17, 0x01, 0, 0, 0, 0}), badCDB(1, 0)},
		{"RELEASE(10) short", f.s.Release(nA, release10[:6]), badCDB(0, 7)},
		{"RELEASE short", f.s.Release(nA, []byte{0x17}), badCDB(0, 7)},
	} {
		if tc.o != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.o, tc.want)
		}
	}
	if !f.s.Check(nB, ClassWrite).OK() {
		t.Error("a refused RESERVE reserved")
	}
}

func TestSPC2WithPersistentReservations(t *testing.T) {
	// SPC-4 §5.13.3: with registrations present, RESERVE and RELEASE are
	// GOOD without effect from the PR holder or from a registrant under an
	// RO/AR reservation, and RESERVATION CONFLICT otherwise.
	for _, tc := range []struct {
		name     string
		typ      Type // 0: registrations, no reservation
		n        Nexus
		wantGood bool
	}{
		{"registered, no reservation", 0, nA, false},
		{"unregistered, no reservation", 0, nC, false},
		{"WR_EX holder", WriteExclusive, nA, true},
		{"WR_EX registrant", WriteExclusive, nB, false},
		{"EX_AC unregistered", ExclusiveAccess, nC, false},
		{"WR_EX_RO registrant", WriteExclusiveRegistrantsOnly, nB, true},
		{"EX_AC_RO unregistered", ExclusiveAccessRegistrantsOnly, nC, false},
		{"EX_AC_AR registrant", ExclusiveAccessAllRegistrants, nB, true},
	} {
		f := newFix(t, Config{})
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		if tc.typ != 0 {
			f.reserve(nA, 0xA, tc.typ)
		}
		want := ReservationConflict
		if tc.wantGood {
			want = OK
		}
		for _, cdb := range [][]byte{reserve6, reserve10, release6, release10} {
			if o := f.s.Reserve; cdb[0] == 0x16 || cdb[0] == 0x56 {
				if got := o(tc.n, cdb); got.Reason != want {
					t.Errorf("%s: RESERVE %#x: %v", tc.name, cdb[0], got)
				}
			} else if got := f.s.Release(tc.n, cdb); got.Reason != want {
				t.Errorf("%s: RELEASE %#x: %v", tc.name, cdb[0], got)
			}
		}
		// No SPC-2 reservation was made: PR commands still work.
		if _, o := f.out(nD, OutRegister, 0, basic(0, 0xD, 0)); !o.OK() {
			t.Errorf("%s: SPC-2 reservation established: %v", tc.name, o)
		}
	}
}
