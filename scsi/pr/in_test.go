package pr

import (
	"bytes"
	"testing"
)

func TestReportCapabilities(t *testing.T) {
	// SPC-4 table 204: LENGTH=0008h; byte 2 CRH(10h)|SIP_C(08h)|ATP_C(04h)|
	// PTPL_C(01h);
	// byte 3 TMV(80h)|ALLOW COMMANDS 011b (30h)|PTPL_A(01h); type mask byte 4
	// WR_EX_AR 80h, EX_AC_RO 40h, WR_EX_RO 20h, EX_AC 08h, WR_EX 02h; byte 5
	// EX_AC_AR 01h.
	f := newFix(t, Config{})
	if got, want := f.in(nA, InReportCapabilities), []byte{0, 8, 0x1C, 0xB0, 0xEA, 0x01, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("no persister: % x, want % x", got, want)
	}
	f = newFix(t, Config{Persister: &memPersister{}})
	if got, want := f.in(nA, InReportCapabilities), []byte{0, 8, 0x1D, 0xB0, 0xEA, 0x01, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("persister: % x, want % x", got, want)
	}
	f.must(nA, OutRegister, 0, basic(0, 1, fAPTPL))
	if got, want := f.in(nA, InReportCapabilities), []byte{0, 8, 0x1D, 0xB1, 0xEA, 0x01, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("APTPL active: % x, want % x", got, want)
	}
}

func TestReadKeysAndReservationBytes(t *testing.T) {
	f := newFix(t, Config{})
	// Empty: PRgeneration 0, ADDITIONAL LENGTH 0.
	if got := f.in(nA, InReadKeys); !bytes.Equal(got, make([]byte, 8)) {
		t.Fatalf("empty READ KEYS % x", got)
	}
	if got := f.in(nA, InReadReservation); !bytes.Equal(got, make([]byte, 8)) {
		t.Fatalf("empty READ RESERVATION % x", got)
	}
	f.register(nA, 0x0102030405060708)
	f.register(nB, 0x1112131415161718)
	f.reserve(nA, 0x0102030405060708, ExclusiveAccessRegistrantsOnly)
	wantKeys := []byte{
		0, 0, 0, 2, // PRgeneration: two REGISTERs
		0, 0, 0, 16, // ADDITIONAL LENGTH
		1, 2, 3, 4, 5, 6, 7, 8,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
	}
	if got := f.in(nA, InReadKeys); !bytes.Equal(got, wantKeys) {
		t.Errorf("READ KEYS\n got % x\nwant % x", got, wantKeys)
	}
	wantRes := []byte{
		0, 0, 0, 2, // RESERVE does not change PRgeneration
		0, 0, 0, 16,
		1, 2, 3, 4, 5, 6, 7, 8, // holder's key
		0, 0, 0, 0, // obsolete
		0,    // reserved
		0x06, // LU_SCOPE, EX_AC_RO
		0, 0,
	}
	if got := f.in(nB, InReadReservation); !bytes.Equal(got, wantRes) {
		t.Errorf("READ RESERVATION\n got % x\nwant % x", got, wantRes)
	}
}

func TestReadReservationAllRegistrantsKeyZero(t *testing.T) {
	// SPC-4 §5.13.10: for types 7 and 8 the reported key is zero.
	for _, typ := range []Type{WriteExclusiveAllRegistrants, ExclusiveAccessAllRegistrants} {
		f := newFix(t, Config{})
		f.register(nA, 0xAA)
		f.reserve(nA, 0xAA, typ)
		key, got, ok := f.resv()
		if !ok || key != 0 || got != typ {
			t.Errorf("%v: key %#x type %v ok %v", typ, key, got, ok)
		}
	}
}

func TestReadFullStatusBytes(t *testing.T) {
	f := newFix(t, Config{})
	f.register(nA, 0xAA)
	f.must(nB2, OutRegister, 0, basic(0, 0xBB, fAllTgPt))
	f.reserve(nA, 0xAA, WriteExclusive)
	want := []byte{0, 0, 0, 2, 0, 0, 0, 96}
	want = append(want,
		0, 0, 0, 0, 0, 0, 0, 0xAA, // key
		0, 0, 0, 0, // reserved
		0x01,       // R_HOLDER
		0x01,       // LU_SCOPE, WR_EX
		0, 0, 0, 0, // reserved
		0, 1, // RELATIVE TARGET PORT IDENTIFIER
		0, 0, 0, 24, // ADDITIONAL DESCRIPTOR LENGTH
	)
	want = append(want, tid(iA)...)
	want = append(want,
		0, 0, 0, 0, 0, 0, 0, 0xBB,
		0, 0, 0, 0,
		0x02, // ALL_TG_PT
		0x00,
		0, 0, 0, 0,
		0, 0, // not defined for ALL_TG_PT: zero
		0, 0, 0, 24,
	)
	want = append(want, tid(iB)...)
	if got := f.in(nC, InReadFullStatus); !bytes.Equal(got, want) {
		t.Errorf("READ FULL STATUS\n got % x\nwant % x", got, want)
	}

	// Under an all-registrants reservation every descriptor has R_HOLDER
	// and the scope and type.
	f = newFix(t, Config{})
	f.register(nA, 0xAA)
	f.register(nB, 0xBB)
	f.reserve(nB, 0xBB, ExclusiveAccessAllRegistrants)
	b := f.in(nA, InReadFullStatus)
	for i, off := range []int{8, 8 + 48} {
		if b[off+12] != 0x01 || b[off+13] != 0x08 {
			t.Errorf("descriptor %d: byte 12 %#x byte 13 %#x, want 01 08", i, b[off+12], b[off+13])
		}
	}
}

func TestPRInAllocationLength(t *testing.T) {
	f := newFix(t, Config{})
	f.register(nA, 0x0102030405060708)
	f.register(nB, 0x1112131415161718)
	full := []byte{0, 0, 0, 2, 0, 0, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
	for _, tc := range []struct {
		alloc  uint16
		bufLen int
		want   int
	}{
		{0, 100, 0},   // zero allocation length: nothing, not an error
		{4, 100, 4},   // inside the header
		{13, 100, 13}, // inside a key: ADDITIONAL LENGTH still 16
		{24, 100, 24},
		{1000, 100, 24}, // more than there is
		{1000, 10, 10},  // caller's buffer is smaller than the allocation length
	} {
		buf := make([]byte, tc.bufLen)
		n, o := f.s.In(nA, inCDB(InReadKeys, tc.alloc), buf)
		if !o.OK() || n != tc.want || !bytes.Equal(buf[:n], full[:n]) {
			t.Errorf("alloc %d buf %d: n=%d %v % x", tc.alloc, tc.bufLen, n, o, buf[:n])
		}
	}
	// REPORT CAPABILITIES truncated to 2 bytes keeps its LENGTH field.
	buf := make([]byte, 8)
	n, o := f.s.In(nA, inCDB(InReportCapabilities, 2), buf)
	if !o.OK() || n != 2 || buf[1] != 8 {
		t.Errorf("REPORT CAPABILITIES alloc 2: n=%d %v % x", n, o, buf)
	}
}

func TestPRInErrors(t *testing.T) {
	f := newFix(t, Config{})
	buf := make([]byte, 64)
	if _, o := f.s.In(nA, inCDB(0x04, 64), buf); o != (Outcome{Reason: InvalidFieldInCDB, Byte: 1, Bit: 4, BitValid: true}) {
		t.Errorf("unknown service action: %v", o)
	}
	if _, o := f.s.In(nA, inCDB(0, 64)[:9], buf); o.Reason != InvalidFieldInCDB {
		t.Errorf("short CDB: %v", o)
	}
	// SPC-2 §5.5.1: PR IN conflicts with any SPC-2 reservation, even from
	// its holder.
	if o := f.s.Reserve(nA, []byte{0x16, 0, 0, 0, 0, 0}); !o.OK() {
		t.Fatal(o)
	}
	for _, n := range []Nexus{nA, nB} {
		if _, o := f.s.In(n, inCDB(InReadKeys, 64), buf); o.Reason != ReservationConflict {
			t.Errorf("PR IN under SPC-2 reservation: %v", o)
		}
	}
}
