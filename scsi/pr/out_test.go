package pr

import (
	"slices"
	"testing"
)

func TestRegister(t *testing.T) {
	// SPC-4 §5.13.7 and the REGISTER rows of table 210.
	f := newFix(t, Config{})
	step := func(name string, n Nexus, sa byte, key, saKey uint64, want Reason, wantGen uint32, wantKeys ...uint64) {
		t.Helper()
		_, o := f.out(n, sa, 0, basic(key, saKey, 0))
		gen, keys := f.keys()
		if o.Reason != want || gen != wantGen || !eqKeys(keys, wantKeys) {
			t.Errorf("%s: %v gen %d keys %x; want %v gen %d keys %x", name, o, gen, keys, want, wantGen, wantKeys)
		}
	}
	step("unregistered, nonzero key", nA, OutRegister, 5, 0xA1, ReservationConflict, 0)
	step("unregistered, SA key 0: nothing", nA, OutRegister, 0, 0, OK, 0)
	step("register A", nA, OutRegister, 0, 0xA1, OK, 1, 0xA1)
	step("register B", nB, OutRegister, 0, 0xB1, OK, 2, 0xA1, 0xB1)
	step("A with wrong key", nA, OutRegister, 0xB1, 0xA2, ReservationConflict, 2, 0xA1, 0xB1)
	step("A with zero key while registered", nA, OutRegister, 0, 0xA2, ReservationConflict, 2, 0xA1, 0xB1)
	step("A changes key", nA, OutRegister, 0xA1, 0xA2, OK, 3, 0xA2, 0xB1)
	step("A same key again", nA, OutRegister, 0xA2, 0xA2, OK, 4, 0xA2, 0xB1)
	step("ignore existing: A with garbage key", nA, OutRegisterAndIgnoreExistingKey, 0x999, 0xA3, OK, 5, 0xA3, 0xB1)
	step("ignore existing: unregistered C", nC, OutRegisterAndIgnoreExistingKey, 0x777, 0xC1, OK, 6, 0xA3, 0xB1, 0xC1)
	step("ignore existing: unregistered D, key 0", nD, OutRegisterAndIgnoreExistingKey, 0x777, 0, OK, 6, 0xA3, 0xB1, 0xC1)
	step("B unregisters", nB, OutRegister, 0xB1, 0, OK, 7, 0xA3, 0xC1)
	step("C unregisters ignoring key", nC, OutRegisterAndIgnoreExistingKey, 0, 0, OK, 8, 0xA3)
	step("same key on two nexuses", nB, OutRegister, 0, 0xA3, OK, 9, 0xA3, 0xA3)
}

func TestUnregisterReleases(t *testing.T) {
	// SPC-4 §5.13.11.3: unregistering the holder releases the reservation;
	// for registrants-only types the other registrants get RESERVATIONS
	// RELEASED; all-registrants reservations end with the last registrant.
	for _, typ := range []Type{WriteExclusive, ExclusiveAccess, WriteExclusiveRegistrantsOnly, ExclusiveAccessRegistrantsOnly} {
		f := newFix(t, Config{})
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		f.register(nC, 0xC)
		f.reserve(nA, 0xA, typ)
		e := f.must(nA, OutRegister, 0, basic(0xA, 0, 0))
		if _, _, ok := f.resv(); ok {
			t.Errorf("%v: reservation survived its holder's unregistration", typ)
		}
		var want []uint16
		if typ.RegistrantsOnly() {
			want = []uint16{0x2A04}
		}
		for _, n := range []Nexus{nB, nC} {
			if got := uaFor(e, n); !slices.Equal(got, want) {
				t.Errorf("%v: UA for %s = %x, want %x", typ, n.InitiatorPortID[31:], got, want)
			}
		}
		if got := uaFor(e, nA); got != nil {
			t.Errorf("%v: issuer got UA %x", typ, got)
		}
	}
	for _, typ := range []Type{WriteExclusiveAllRegistrants, ExclusiveAccessAllRegistrants} {
		f := newFix(t, Config{})
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		f.reserve(nA, 0xA, typ)
		e := f.must(nA, OutRegister, 0, basic(0xA, 0, 0))
		if _, got, ok := f.resv(); !ok || got != typ || len(e.UnitAttentions) != 0 {
			t.Errorf("%v: after first unregister: type %v ok %v effects %+v", typ, got, ok, e)
		}
		f.must(nB, OutRegister, 0, basic(0xB, 0, 0))
		if _, _, ok := f.resv(); ok {
			t.Errorf("%v: reservation survived the last registrant", typ)
		}
	}
}

func TestReserve(t *testing.T) {
	f := newFix(t, Config{})
	f.register(nA, 0xA)
	f.register(nB, 0xB)
	check := func(name string, n Nexus, key uint64, typ Type, scope byte, want Outcome) {
		t.Helper()
		cdb := outCDB(OutReserve, typ, 24)
		cdb[2] |= scope << 4
		if _, o := f.s.Out(n, cdb, basic(key, 0, 0)); o != want {
			t.Errorf("%s: %v, want %v", name, o, want)
		}
	}
	bad := func(bit uint8) Outcome { return Outcome{Reason: InvalidFieldInCDB, Byte: 2, Bit: bit, BitValid: true} }
	for _, typ := range []Type{0, 2, 4, 9, 0xF} {
		check("type "+typ.String(), nA, 0xA, typ, 0, bad(3))
	}
	check("element scope", nA, 0xA, WriteExclusive, 2, bad(7))
	check("bad type from an unregistered nexus: key first", nC, 0, 2, 0, conflict)
	check("unregistered", nC, 0, WriteExclusive, 0, conflict)
	check("wrong key", nA, 0xB, WriteExclusive, 0, conflict)
	check("A reserves", nA, 0xA, WriteExclusive, 0, good)
	check("A again, same type", nA, 0xA, WriteExclusive, 0, good)
	check("A again, other type", nA, 0xA, ExclusiveAccess, 0, conflict)
	check("B, not holder", nB, 0xB, WriteExclusive, 0, conflict)
	if gen, _ := f.keys(); gen != 2 {
		t.Errorf("RESERVE changed PRgeneration to %d", gen)
	}
	if key, typ, ok := f.resv(); !ok || key != 0xA || typ != WriteExclusive {
		t.Errorf("reservation %x %v %v", key, typ, ok)
	}
	// All registrants: any registrant is a holder and may repeat RESERVE.
	f = newFix(t, Config{})
	f.register(nA, 0xA)
	f.register(nB, 0xB)
	f.reserve(nA, 0xA, WriteExclusiveAllRegistrants)
	check("AR: B same type", nB, 0xB, WriteExclusiveAllRegistrants, 0, good)
	check("AR: B other type", nB, 0xB, ExclusiveAccessAllRegistrants, 0, conflict)
}

func TestRelease(t *testing.T) {
	for _, typ := range []Type{WriteExclusive, ExclusiveAccess, WriteExclusiveRegistrantsOnly,
		ExclusiveAccessRegistrantsOnly, WriteExclusiveAllRegistrants, ExclusiveAccessAllRegistrants} {
		f := newFix(t, Config{})
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		f.register(nC, 0xC)
		if _, o := f.out(nA, OutRelease, typ, basic(0xA, 0, 0)); !o.OK() {
			t.Errorf("%v: release without reservation: %v", typ, o)
		}
		f.reserve(nA, 0xA, typ)
		if _, o := f.out(nD, OutRelease, typ, basic(0, 0, 0)); o.Reason != ReservationConflict {
			t.Errorf("%v: unregistered release: %v", typ, o)
		}
		if _, o := f.out(nA, OutRelease, typ, basic(0xB, 0, 0)); o.Reason != ReservationConflict {
			t.Errorf("%v: release with wrong key: %v", typ, o)
		}
		other := WriteExclusive
		if typ == WriteExclusive {
			other = ExclusiveAccess
		}
		releaser := nA
		if typ.AllRegistrants() {
			releaser = nB // every registrant is a holder
		} else {
			// A non-holder's RELEASE is GOOD and changes nothing.
			if e, o := f.out(nB, OutRelease, typ, basic(0xB, 0, 0)); !o.OK() || len(e.UnitAttentions) != 0 {
				t.Errorf("%v: non-holder release: %v %+v", typ, o, e)
			}
			if _, _, ok := f.resv(); !ok {
				t.Errorf("%v: non-holder released the reservation", typ)
			}
		}
		key := map[string]uint64{iA: 0xA, iB: 0xB}[releaser.InitiatorPortID]
		if _, o := f.out(releaser, OutRelease, other, basic(key, 0, 0)); o.Reason != InvalidReleaseOfPersistentReservation {
			t.Errorf("%v: release with type %v: %v", typ, other, o)
		}
		cdb := outCDB(OutRelease, typ, 24)
		cdb[2] |= 0x10
		if _, o := f.s.Out(releaser, cdb, basic(key, 0, 0)); o.Reason != InvalidReleaseOfPersistentReservation {
			t.Errorf("%v: release with scope 1: %v", typ, o)
		}
		e := f.must(releaser, OutRelease, typ, basic(key, 0, 0))
		if _, _, ok := f.resv(); ok {
			t.Errorf("%v: not released", typ)
		}
		var want []uint16
		if typ.RegistrantsOnly() || typ.AllRegistrants() {
			want = []uint16{0x2A04}
		}
		for _, n := range []Nexus{nA, nB, nC} {
			w := want
			if name(n) == name(releaser) {
				w = nil
			}
			if got := uaFor(e, n); !slices.Equal(got, w) {
				t.Errorf("%v: UA for %s: %x, want %x", typ, n.InitiatorPortID[31:], got, w)
			}
		}
		if gen, keys := f.keys(); gen != 3 || len(keys) != 3 {
			t.Errorf("%v: RELEASE changed generation (%d) or registrations (%x)", typ, gen, keys)
		}
	}
}

func TestClear(t *testing.T) {
	f := newFix(t, Config{})
	f.register(nA, 0xA)
	f.register(nB, 0xB)
	f.register(nC, 0xC)
	f.reserve(nB, 0xB, ExclusiveAccess)
	if _, o := f.out(nD, OutClear, 0, basic(0, 0, 0)); o.Reason != ReservationConflict {
		t.Errorf("unregistered CLEAR: %v", o)
	}
	if _, o := f.out(nA, OutClear, 0, basic(0xB, 0, 0)); o.Reason != ReservationConflict {
		t.Errorf("CLEAR with wrong key: %v", o)
	}
	e := f.must(nA, OutClear, 0, basic(0xA, 0, 0))
	gen, keys := f.keys()
	if gen != 4 || len(keys) != 0 {
		t.Errorf("after CLEAR: gen %d keys %x", gen, keys)
	}
	if _, _, ok := f.resv(); ok {
		t.Error("reservation survived CLEAR")
	}
	for _, tc := range []struct {
		n    Nexus
		want []uint16
	}{{nA, nil}, {nB, []uint16{0x2A03}}, {nC, []uint16{0x2A03}}, {nD, nil}} {
		if got := uaFor(e, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("UA for %s: %x, want %x", tc.n.InitiatorPortID[31:], got, tc.want)
		}
	}
}

func TestPreempt(t *testing.T) {
	type reg struct {
		n   Nexus
		key uint64
	}
	all := []Nexus{nA, nB, nC, nD}
	for _, tc := range []struct {
		name     string
		regs     []reg
		holder   *reg // reserves with resType before the PREEMPT
		resType  Type
		by       Nexus
		key      uint64 // RESERVATION KEY
		saKey    uint64
		typ      Type
		abort    bool
		want     Outcome
		wantKeys []uint64
		wantRes  Type // 0: no reservation
		wantHold uint64
		wantUA   map[string][]uint16
		aborted  []string
	}{
		{name: "no reservation: remove B's registration",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, by: nA, key: 0xA, saKey: 0xB, typ: WriteExclusive,
			want: good, wantKeys: []uint64{0xA, 0xC}, wantUA: map[string][]uint16{"B": {0x2A05}}},
		{name: "no reservation: key registered twice",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xB}}, by: nA, key: 0xA, saKey: 0xB,
			want: good, wantKeys: []uint64{0xA}, wantUA: map[string][]uint16{"B": {0x2A05}, "C": {0x2A05}}},
		{name: "no reservation: unknown key",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, by: nA, key: 0xA, saKey: 0xF,
			want: conflict, wantKeys: []uint64{0xA, 0xB}},
		{name: "no reservation: SA key zero",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, by: nA, key: 0xA, saKey: 0,
			want: badParam(8, 7), wantKeys: []uint64{0xA, 0xB}},
		{name: "unregistered issuer",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, by: nC, key: 0, saKey: 0xB,
			want: conflict, wantKeys: []uint64{0xA, 0xB}},
		{name: "wrong reservation key",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, by: nA, key: 0xB, saKey: 0xB,
			want: conflict, wantKeys: []uint64{0xA, 0xB}},
		{name: "preempt holder, type changes",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: WriteExclusive,
			by: nA, key: 0xA, saKey: 0xB, typ: ExclusiveAccess,
			want: good, wantKeys: []uint64{0xA, 0xC}, wantRes: ExclusiveAccess, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}, "C": {0x2A04}}},
		{name: "preempt holder, same type",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: WriteExclusiveRegistrantsOnly,
			by: nA, key: 0xA, saKey: 0xB, typ: WriteExclusiveRegistrantsOnly,
			want: good, wantKeys: []uint64{0xA, 0xC}, wantRes: WriteExclusiveRegistrantsOnly, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}}},
		{name: "preempt holder with invalid type",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, holder: &reg{nB, 0xB}, resType: WriteExclusive,
			by: nA, key: 0xA, saKey: 0xB, typ: 2,
			want: badCDB(2, 3), wantKeys: []uint64{0xA, 0xB}, wantRes: WriteExclusive, wantHold: 0xB},
		{name: "preempt non-holder key: reservation stays",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: ExclusiveAccess,
			by: nA, key: 0xA, saKey: 0xC, typ: WriteExclusive,
			want: good, wantKeys: []uint64{0xA, 0xB}, wantRes: ExclusiveAccess, wantHold: 0xB,
			wantUA: map[string][]uint16{"C": {0x2A05}}},
		{name: "SA key zero under a single-holder reservation",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, holder: &reg{nB, 0xB}, resType: ExclusiveAccess,
			by: nA, key: 0xA, saKey: 0, typ: WriteExclusive,
			want: badParam(8, 7), wantKeys: []uint64{0xA, 0xB}, wantRes: ExclusiveAccess, wantHold: 0xB},
		{name: "holder preempts itself to change type",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, holder: &reg{nA, 0xA}, resType: WriteExclusive,
			by: nA, key: 0xA, saKey: 0xA, typ: ExclusiveAccessRegistrantsOnly,
			want: good, wantKeys: []uint64{0xA, 0xB}, wantRes: ExclusiveAccessRegistrantsOnly, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A04}}},
		{name: "holder key shared by another nexus: both preempted",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xB}, {nD, 0xD}}, holder: &reg{nB, 0xB}, resType: ExclusiveAccess,
			by: nA, key: 0xA, saKey: 0xB, typ: ExclusiveAccess,
			want: good, wantKeys: []uint64{0xA, 0xD}, wantRes: ExclusiveAccess, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}, "C": {0x2A05}}},
		{name: "all registrants, SA key zero: everyone else removed",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: WriteExclusiveAllRegistrants,
			by: nA, key: 0xA, saKey: 0, typ: ExclusiveAccess,
			want: good, wantKeys: []uint64{0xA}, wantRes: ExclusiveAccess, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}, "C": {0x2A05}}},
		{name: "all registrants, SA key zero, same type",
			regs: []reg{{nA, 0xA}, {nB, 0xB}}, holder: &reg{nA, 0xA}, resType: ExclusiveAccessAllRegistrants,
			by: nB, key: 0xB, saKey: 0, typ: ExclusiveAccessAllRegistrants,
			want: good, wantKeys: []uint64{0xB}, wantRes: ExclusiveAccessAllRegistrants, wantHold: 0,
			wantUA: map[string][]uint16{"A": {0x2A05}}},
		{name: "all registrants, nonzero SA key: registrations only",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: ExclusiveAccessAllRegistrants,
			by: nA, key: 0xA, saKey: 0xB, typ: WriteExclusive,
			want: good, wantKeys: []uint64{0xA, 0xC}, wantRes: ExclusiveAccessAllRegistrants, wantHold: 0,
			wantUA: map[string][]uint16{"B": {0x2A05}}},
		{name: "preempt and abort: holder",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nB, 0xB}, resType: WriteExclusive,
			by: nA, key: 0xA, saKey: 0xB, typ: WriteExclusive, abort: true,
			want: good, wantKeys: []uint64{0xA, 0xC}, wantRes: WriteExclusive, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}}, aborted: []string{"B"}},
		{name: "preempt and abort: all registrants",
			regs: []reg{{nA, 0xA}, {nB, 0xB}, {nC, 0xC}}, holder: &reg{nC, 0xC}, resType: ExclusiveAccessAllRegistrants,
			by: nA, key: 0xA, saKey: 0, typ: ExclusiveAccess, abort: true,
			want: good, wantKeys: []uint64{0xA}, wantRes: ExclusiveAccess, wantHold: 0xA,
			wantUA: map[string][]uint16{"B": {0x2A05}, "C": {0x2A05}}, aborted: []string{"B", "C"}},
		{name: "preempt and abort: own key among removed, issuer not aborted",
			regs: []reg{{nA, 0xA}, {nB, 0xA}, {nC, 0xC}},
			by:   nA, key: 0xA, saKey: 0xA, abort: true,
			want: good, wantKeys: []uint64{0xC}, wantUA: map[string][]uint16{"B": {0x2A05}}, aborted: []string{"B"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFix(t, Config{})
			for _, r := range tc.regs {
				f.register(r.n, r.key)
			}
			if tc.holder != nil {
				f.reserve(tc.holder.n, tc.holder.key, tc.resType)
			}
			gen0, _ := f.keys()
			sa := byte(OutPreempt)
			if tc.abort {
				sa = OutPreemptAndAbort
			}
			e, o := f.out(tc.by, sa, tc.typ, basic(tc.key, tc.saKey, 0))
			if o != tc.want {
				t.Fatalf("outcome %v, want %v", o, tc.want)
			}
			gen, keys := f.keys()
			wantGen := gen0
			if o.OK() {
				wantGen++
			}
			if gen != wantGen || !eqKeys(keys, tc.wantKeys) {
				t.Errorf("gen %d keys %x, want gen %d keys %x", gen, keys, wantGen, tc.wantKeys)
			}
			hold, typ, ok := f.resv()
			if tc.wantRes == 0 && ok || tc.wantRes != 0 && (!ok || typ != tc.wantRes || hold != tc.wantHold) {
				t.Errorf("reservation %v key %#x (%v), want %v key %#x", typ, hold, ok, tc.wantRes, tc.wantHold)
			}
			for _, n := range all {
				if got := uaFor(e, n); !slices.Equal(got, tc.wantUA[name(n)]) {
					t.Errorf("UA for %s: %x, want %x", name(n), got, tc.wantUA[name(n)])
				}
				if got := abortsFor(e, n); got != slices.Contains(tc.aborted, name(n)) {
					t.Errorf("abort %s: %v", n.InitiatorPortID[31:], got)
				}
			}
		})
	}
}

func TestRegisterAndMove(t *testing.T) {
	setup := func(t *testing.T, cfg Config, typ Type) *fix {
		f := newFix(t, cfg)
		f.register(nA, 0xA)
		f.register(nB, 0xB)
		f.reserve(nA, 0xA, typ)
		return f
	}
	move := func(f *fix, by Nexus, key, saKey uint64, flags byte, rtpi uint16, dst []byte) Outcome {
		_, o := f.out(by, OutRegisterAndMove, 0, moveParams(key, saKey, flags, rtpi, dst))
		return o
	}

	t.Run("moves to a new nexus", func(t *testing.T) {
		f := setup(t, Config{}, WriteExclusiveRegistrantsOnly)
		if o := move(f, nA, 0xA, 0xD, 0, 1, tid(iD)); !o.OK() {
			t.Fatal(o)
		}
		gen, keys := f.keys()
		if gen != 3 || !eqKeys(keys, []uint64{0xA, 0xB, 0xD}) {
			t.Errorf("gen %d keys %x", gen, keys)
		}
		if key, typ, ok := f.resv(); !ok || key != 0xD || typ != WriteExclusiveRegistrantsOnly {
			t.Errorf("reservation %#x %v %v", key, typ, ok)
		}
		// D (not yet logged in) now holds it: its writes pass, A's still do
		// as a registrant of a registrants-only type.
		if o := f.s.Check(nD, ClassWrite); !o.OK() {
			t.Errorf("D write: %v", o)
		}
		// READ FULL STATUS shows D's TransportID from the parameter list.
		b := f.in(nA, InReadFullStatus)
		d := b[8+2*48:]
		if d[7] != 0xD || d[12] != 0x01 || d[13] != 0x05 || d[19] != 1 || string(d[24:48]) != string(tid(iD)) {
			t.Errorf("D's descriptor % x", d)
		}
	})
	t.Run("bytes past the TransportID are ignored", func(t *testing.T) {
		f := setup(t, Config{}, WriteExclusive)
		param := append(moveParams(0xA, 0xD, 0, 1, tid(iD)), 0xFF, 0xFF, 0xFF, 0xFF)
		if _, o := f.s.Out(nA, outCDB(OutRegisterAndMove, 0, uint32(len(param))), param); !o.OK() {
			t.Fatal(o)
		}
		if key, _, _ := f.resv(); key != 0xD {
			t.Errorf("holder key %#x", key)
		}
	})
	t.Run("unreg", func(t *testing.T) {
		f := setup(t, Config{}, ExclusiveAccess)
		if o := move(f, nA, 0xA, 0xBB, 0x02, 1, tid(iB)); !o.OK() {
			t.Fatal(o)
		}
		_, keys := f.keys()
		if !eqKeys(keys, []uint64{0xBB}) { // A gone; B's key replaced
			t.Errorf("keys %x", keys)
		}
		if key, typ, ok := f.resv(); !ok || key != 0xBB || typ != ExclusiveAccess {
			t.Errorf("reservation %#x %v %v", key, typ, ok)
		}
		if f.s.Check(nA, ClassRead).OK() {
			t.Error("A still reads under B's EX_AC")
		}
	})
	t.Run("other target port", func(t *testing.T) {
		ports := map[uint16]string{1: t1, 2: t2}
		f := setup(t, Config{TargetPort: func(r uint16) (string, bool) { p, ok := ports[r]; return p, ok }}, ExclusiveAccess)
		if o := move(f, nA, 0xA, 0xB2, 0, 2, tid(iB)); !o.OK() {
			t.Fatal(o)
		}
		if !f.s.Check(nB2, ClassWrite).OK() || f.s.Check(nB, ClassWrite).OK() {
			t.Error("the reservation should be B's through port 2 only")
		}
		if o := move(f, nB2, 0xB2, 0xA, 0, 3, tid(iA)); o != badParam(18, 7) {
			t.Errorf("unknown port: %v", o)
		}
	})
	t.Run("errors", func(t *testing.T) {
		f := setup(t, Config{}, WriteExclusive)
		for _, tc := range []struct {
			name string
			o    Outcome
			want Outcome
		}{
			{"unregistered", move(f, nC, 0, 0xC, 0, 1, tid(iD)), conflict},
			{"wrong key", move(f, nA, 0xB, 0xD, 0, 1, tid(iD)), conflict},
			{"not holder", move(f, nB, 0xB, 0xD, 0, 1, tid(iD)), conflict},
			{"SA key zero", move(f, nA, 0xA, 0, 0, 1, tid(iD)), badParam(8, 7)},
			{"to itself", move(f, nA, 0xA, 0xD, 0, 1, tid(iA)), badParam(24, 7)},
			{"unknown relative port", move(f, nA, 0xA, 0xD, 0, 7, tid(iD)), badParam(18, 7)},
			{"not an SRP TransportID", move(f, nA, 0xA, 0xD, 0, 1, append([]byte{0x01}, tid(iD)[1:]...)), badParam(24, 7)},
			{"APTPL without PTPL", move(f, nA, 0xA, 0xD, 0x01, 1, tid(iD)), badParam(17, 0)},
		} {
			if tc.o != tc.want {
				t.Errorf("%s: %v, want %v", tc.name, tc.o, tc.want)
			}
		}
		if gen, keys := f.keys(); gen != 2 || len(keys) != 2 {
			t.Errorf("failed moves changed state: gen %d keys %x", gen, keys)
		}
		f = newFix(t, Config{})
		f.register(nA, 0xA)
		if o := move(f, nA, 0xA, 0xD, 0, 1, tid(iD)); o.Reason != InvalidFieldInCDB {
			t.Errorf("no reservation: %v", o)
		}
		for _, typ := range []Type{WriteExclusiveAllRegistrants, ExclusiveAccessAllRegistrants} {
			f = setup(t, Config{}, typ)
			if o := move(f, nA, 0xA, 0xD, 0, 1, tid(iD)); o != conflict {
				t.Errorf("%v: %v", typ, o)
			}
		}
	})
}

func TestParameterListErrors(t *testing.T) {
	f := newFix(t, Config{})
	pll := Outcome{Reason: ParamListLengthError}
	for _, tc := range []struct {
		name  string
		cdb   []byte
		param []byte
		want  Outcome
	}{
		{"PLL 0", outCDB(OutRegister, 0, 0), nil, pll},
		{"PLL 23", outCDB(OutRegister, 0, 23), basic(0, 1, 0), pll},
		{"PLL 25", outCDB(OutRegister, 0, 25), append(basic(0, 1, 0), 0), pll},
		{"PLL beyond data", outCDB(OutRegister, 0, 24), basic(0, 1, 0)[:20], pll},
		{"SPEC_I_PT without TRANSPORTID PARAMETER DATA LENGTH", outCDB(OutRegister, 0, 24), basic(0, 1, fSpecIPT), pll},
		{"SPEC_I_PT on RESERVE", outCDB(OutReserve, 1, 24), basic(0, 1, fSpecIPT), badParam(20, 3)},
		{"SPEC_I_PT on REGISTER AND IGNORE", outCDB(OutRegisterAndIgnoreExistingKey, 0, 52), specIPT(0, 1, 0, tid(iB)), badParam(20, 3)},
		{"SPEC_I_PT: list short of TransportIDs", outCDB(OutRegister, 0, 51), specIPT(0, 1, 0, tid(iB))[:51], pll},
		{"SPEC_I_PT: truncated TransportID", outCDB(OutRegister, 0, 48), specIPT(0, 1, 0, tid(iB)[:20]), badParamByte(28)},
		{"SPEC_I_PT: second TransportID truncated", outCDB(OutRegister, 0, 72), specIPT(0, 1, 0, tid(iB), tid(iC)[:20]), badParamByte(52)},
		{"SPEC_I_PT: not an SRP TransportID", outCDB(OutRegister, 0, 76), specIPT(0, 1, 0, tid(iB), append([]byte{0x00}, tid(iC)[1:]...)), badParamByte(52)},
		{"APTPL without PTPL", outCDB(OutRegister, 0, 24), basic(0, 1, fAPTPL), badParam(20, 0)},
		{"unknown service action", outCDB(0x08, 0, 24), basic(0, 1, 0), badCDB(1, 4)},
		{"short CDB", outCDB(OutRegister, 0, 24)[:6], basic(0, 1, 0), badCDB(0, 7)},
		{"move: length short of TransportID", outCDB(OutRegisterAndMove, 0, 40), moveParams(0, 1, 0, 1, tid(iB))[:40], pll},
		{"move: TransportID length 20", outCDB(OutRegisterAndMove, 0, 44), moveParams(0, 1, 0, 1, tid(iB)[:20]), badParamByte(20)},
		{"move: TransportID length 26", outCDB(OutRegisterAndMove, 0, 50), moveParams(0, 1, 0, 1, append(tid(iB), 0, 0)), badParamByte(20)},
	} {
		if _, o := f.s.Out(nA, tc.cdb, tc.param); o != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, o, tc.want)
		}
	}
	if gen, keys := f.keys(); gen != 0 || len(keys) != 0 {
		t.Errorf("errors changed state: gen %d keys %x", gen, keys)
	}
	// Data-out longer than PARAMETER LIST LENGTH: the excess is ignored.
	if _, o := f.s.Out(nA, outCDB(OutRegister, 0, 24), append(basic(0, 1, 0), 9, 9, 9)); !o.OK() {
		t.Errorf("long data-out: %v", o)
	}
}

func TestAllTargetPorts(t *testing.T) {
	f := newFix(t, Config{})
	f.must(nB, OutRegister, 0, basic(0, 0xB, fAllTgPt))
	// Registered through every target port: B via port 2 can reserve with
	// the same key, and the registration is listed once.
	f.reserve(nB2, 0xB, ExclusiveAccess)
	if !f.s.Check(nB, ClassWrite).OK() || !f.s.Check(nB2, ClassWrite).OK() {
		t.Error("B should hold through both ports")
	}
	if f.s.Check(nA, ClassRead).OK() || f.s.Check(nA2, ClassRead).OK() {
		t.Error("A should conflict through both ports")
	}
	if _, keys := f.keys(); !eqKeys(keys, []uint64{0xB}) {
		t.Errorf("keys %x", keys)
	}
	// ALL_TG_PT in a REGISTER from a registered nexus is ignored; the key
	// changes for the whole registration.
	f.must(nB, OutRegister, 0, basic(0xB, 0xB1, 0))
	if _, o := f.out(nB2, OutRegister, 0, basic(0xB, 0xB2, 0)); o != conflict {
		t.Errorf("old key through port 2: %v", o)
	}
	// Preempting it sends the unit attention to B through every port.
	f.register(nA, 0xA)
	e := f.must(nA, OutPreempt, WriteExclusive, basic(0xA, 0xB1, 0))
	if !slices.Equal(uaFor(e, nB), []uint16{0x2A05}) || !slices.Equal(uaFor(e, nB2), []uint16{0x2A05}) {
		t.Errorf("effects %+v", e)
	}
	// An ALL_TG_PT registrant's own preempt does not target the issuing nexus.
	f = newFix(t, Config{})
	f.must(nA, OutRegister, 0, basic(0, 0xA, fAllTgPt))
	f.register(nB, 0xB)
	f.reserve(nB, 0xB, ExclusiveAccessAllRegistrants)
	e = f.must(nB, OutPreempt, ExclusiveAccess, basic(0xB, 0, 0))
	if len(uaFor(e, nB)) != 0 || !slices.Equal(uaFor(e, nA), []uint16{0x2A05}) || !slices.Equal(uaFor(e, nA2), []uint16{0x2A05}) {
		t.Errorf("effects %+v", e)
	}
}

func TestRegistrationLimit(t *testing.T) {
	f := newFix(t, Config{MaxRegistrations: 2})
	f.register(nA, 0xA)
	f.register(nB, 0xB)
	if _, o := f.out(nC, OutRegister, 0, basic(0, 0xC, 0)); o.Reason != InsufficientRegistrationResources {
		t.Errorf("third registration: %v", o)
	}
	f.must(nB, OutRegister, 0, basic(0xB, 0xB2, 0)) // key change needs no new entry
}

func TestGenerationWraps(t *testing.T) {
	f := newFix(t, Config{})
	f.s.c.gen = 0xFFFFFFFF
	f.register(nA, 1)
	if g := f.s.Generation(); g != 0 {
		t.Errorf("generation after 0xFFFFFFFF: %#x", g)
	}
}

// specIPT is a basic parameter list with SPEC_I_PT=1 and the TransportIDs
// (SPC-4 table 213): TRANSPORTID PARAMETER DATA LENGTH in bytes 24-27.
func specIPT(key, saKey uint64, flags byte, tids ...[]byte) []byte {
	b := basic(key, saKey, flags|fSpecIPT)
	n := 0
	for _, t := range tids {
		n += len(t)
	}
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	for _, t := range tids {
		b = append(b, t...)
	}
	return b
}

func TestSpecIPT(t *testing.T) {
	f := newFix(t, Config{})
	f.register(nC, 0xC)
	// A registers itself, B and C (already registered: skipped) and
	// itself again (skipped) through port 1.
	f.must(nA, OutRegister, 0, specIPT(0, 0x5, 0, tid(iB), tid(iC), tid(iA)))
	gen, keys := f.keys()
	if gen != 2 || !eqKeys(keys, []uint64{0xC, 0x5, 0x5}) {
		t.Fatalf("gen %d keys %x", gen, keys)
	}
	// B's registration is through port 1 only, with its TransportID.
	b := f.in(nA, InReadFullStatus)
	d := b[8+2*48:]
	if d[7] != 0x5 || d[12] != 0 || d[19] != 1 || string(d[24:48]) != string(tid(iB)) {
		t.Errorf("B's descriptor % x", d)
	}
	f.reserve(nB, 0x5, ExclusiveAccessRegistrantsOnly)
	if !f.s.Check(nB, ClassWrite).OK() || f.s.Check(nB2, ClassWrite).OK() {
		t.Error("B should be registered through port 1 only")
	}
	// From a registered nexus SPEC_I_PT is refused (after the key check).
	if _, o := f.out(nA, OutRegister, 0, specIPT(0x6, 0x7, 0, tid(iD))); o != conflict {
		t.Errorf("registered, wrong key: %v", o)
	}
	if _, o := f.out(nA, OutRegister, 0, specIPT(0x5, 0x7, 0, tid(iD))); o != badParam(20, 3) {
		t.Errorf("registered: %v", o)
	}

	// With ALL_TG_PT the named initiator ports are registered through
	// every port.
	f = newFix(t, Config{})
	f.must(nA, OutRegister, 0, specIPT(0, 0x5, fAllTgPt, tid(iB)))
	f.reserve(nB2, 0x5, WriteExclusive)
	if !f.s.Check(nB, ClassWrite).OK() || !f.s.Check(nA2, ClassRead).OK() || f.s.Check(nA2, ClassWrite).OK() {
		t.Error("ALL_TG_PT registrations not through every port")
	}

	// All or nothing.
	f = newFix(t, Config{MaxRegistrations: 2})
	if _, o := f.out(nA, OutRegister, 0, specIPT(0, 0x5, 0, tid(iB), tid(iC))); o.Reason != InsufficientRegistrationResources {
		t.Errorf("over the limit: %v", o)
	}
	if gen, keys := f.keys(); gen != 0 || len(keys) != 0 {
		t.Errorf("partial registration: gen %d keys %x", gen, keys)
	}
	// SERVICE ACTION RESERVATION KEY zero: nothing, even with TransportIDs.
	f.must(nA, OutRegister, 0, specIPT(0, 0, 0, tid(iB)))
	if gen, keys := f.keys(); gen != 0 || len(keys) != 0 {
		t.Errorf("key 0: gen %d keys %x", gen, keys)
	}
}
