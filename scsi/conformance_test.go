package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// The tests in this file replay what libiscsi's iscsi-test-cu families
// send, with the outcome that suite (or SBC-3/SPC-4 where the suite is
// silent) requires. The RAM logical unit has 2048 blocks of 512 bytes.

// unmapParam builds an UNMAP parameter list (SBC-3 §5.28.2) with one block
// descriptor per (lba, count) pair.
func unmapParam(pairs ...uint64) []byte {
	n := len(pairs) / 2
	p := make([]byte, 8+16*n)
	binary.BigEndian.PutUint16(p[0:], uint16(6+16*n))
	binary.BigEndian.PutUint16(p[2:], uint16(16*n))
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(p[8+16*i:], pairs[2*i])
		binary.BigEndian.PutUint32(p[8+16*i+8:], uint32(pairs[2*i+1]))
	}
	return p
}

func cdbUnmap(plen int) []byte {
	return []byte{0x42, 0, 0, 0, 0, 0, 0, byte(plen >> 8), byte(plen), 0}
}

// libiscsi test_prefetch10_simple / test_prefetch16_simple /
// test_prefetch*_flags / test_prefetch*_0blocks / test_prefetch*_beyond_eol:
// PRE-FETCH of 1..256 blocks at both ends of the LUN completes with GOOD
// (check_result accepts nothing else for EXPECT_STATUS_GOOD). SBC-3 §5.7
// allows GOOD when the blocks are not held in a cache, which is the case:
// the core keeps no cache of its own.
func TestConformancePreFetch(t *testing.T) {
	f := newFixture(t, LUConfig{})
	const nb = 2048
	for i := uint32(1); i <= 256; i++ {
		for _, cdb := range [][]byte{
			cdb10(0x34, 0, 0, uint16(i)), cdb10(0x34, 0, nb-i, uint16(i)),
			cdb16(0x90, 0, 0, i), cdb16(0x90, 0, uint64(nb-i), i),
			cdb10(0x34, 0x02, 0, uint16(i)), cdb16(0x90, 0x02, uint64(nb-i), i), // IMMED
		} {
			if r := f.run(f.s, 0, cdb, nil, 0); r.Status != sense.StatusGood {
				t.Fatalf("CDB % x: status %#x sense % x", cdb, r.Status, r.Sense)
			}
		}
	}
	f.good(cdb10(0x34, 0, 0, 0), nil)
	f.good(cdb16(0x90, 0, 0, 0), nil)
	for _, cdb := range [][]byte{
		cdb10(0x34, 0, nb+1, 0), cdb10(0x34, 0, 0x80000000, 0), cdb10(0x34, 0, 0xFFFFFFFF, 0),
		cdb10(0x34, 0, nb-1, 2), cdb16(0x90, 0, ^uint64(0), 1), cdb16(0x90, 0, 1<<63, 1),
	} {
		wantSense(t, f.run(f.s, 0, cdb, nil, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	}
}

// libiscsi test_unmap_0blocks / test_unmap_simple.
func TestConformanceUnmap(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	for i := uint64(0); i < 256; i++ {
		p := unmapParam(i, 0)
		f.good(cdbUnmap(len(p)), p)
	}
	p := unmapParam(2048, 0) // 0 blocks at end-of-LUN
	f.good(cdbUnmap(len(p)), p)
	p = unmapParam() // no descriptors
	f.good(cdbUnmap(len(p)), p)
	// 256 descriptors, some overlapping, 0 blocks each.
	var pairs []uint64
	for i := uint64(0); i < 256; i++ {
		pairs = append(pairs, i/2, 0)
	}
	p = unmapParam(pairs...)
	f.good(cdbUnmap(len(p)), p)
	// One past the end, and a range wrapping 2^64.
	p = unmapParam(2048, 1)
	wantSense(t, f.run(f.s, 0, cdbUnmap(len(p)), p, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	p = unmapParam(^uint64(0), 2)
	wantSense(t, f.run(f.s, 0, cdbUnmap(len(p)), p, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	// 1..256 blocks at the start and at the end read back as zeros.
	for i := uint64(1); i <= 256; i += 51 {
		data := pattern(int(i)*512, byte(i))
		f.good(cdb16(0x8A, 0, 2048-i, uint32(i)), data)
		p = unmapParam(2048-i, i)
		f.good(cdbUnmap(len(p)), p)
		got := f.in(cdb16(0x88, 0, 2048-i, uint32(i)), int(i)*512)
		if !allZero(got) {
			t.Fatalf("%d blocks unmapped at the end read back non-zero", i)
		}
	}
	// More descriptors than the Block Limits page allows: INVALID FIELD
	// IN PARAMETER LIST (SBC-3 §5.28.1). The parameter list length field is
	// 16 bits, so 4095 descriptors is the most a CDB can carry.
	pairs = pairs[:0]
	for i := uint64(0); i < 4095; i++ {
		pairs = append(pairs, i%2048, 0)
	}
	p = unmapParam(pairs...)
	wantSense(t, f.run(f.s, 0, cdbUnmap(len(p)), p, 0), sense.KeyIllegalRequest, 0x26, 0x00)
	// A parameter list shorter than its header claims: the block
	// descriptor data length is clipped to what was sent.
	p = unmapParam(0, 1, 1, 1)
	binary.BigEndian.PutUint16(p[2:], 16*50)
	f.good(cdbUnmap(len(p)), p)
	// Parameter list length 1..7: too short for the header.
	for n := 1; n < 8; n++ {
		wantSense(t, f.run(f.s, 0, cdbUnmap(n), make([]byte, n), 0), sense.KeyIllegalRequest, 0x1A, 0x00)
	}
}

// libiscsi test_writesame10_0blocks / test_writesame16_0blocks: with WSNZ=1
// in the Block Limits page, NUMBER OF LOGICAL BLOCKS 0 is INVALID FIELD IN
// CDB; test_writesame*_beyond_eol; test_writesame16_unmap (NDOB).
func TestConformanceWriteSame(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	bl := f.in(cdbInquiry(true, 0xB0, 64), 64)
	if bl[4]&0x01 == 0 {
		t.Fatal("WSNZ clear")
	}
	blk := make([]byte, 512)
	wantSense(t, f.run(f.s, 0, cdb10(0x41, 0, 0, 0), blk, 0), sense.KeyIllegalRequest, 0x24, 0x00)
	wantSense(t, f.run(f.s, 0, cdb16(0x93, 0, 0, 0), blk, 0), sense.KeyIllegalRequest, 0x24, 0x00)
	wantSense(t, f.run(f.s, 0, cdb16(0x93, 0x08, 2000, 0), blk, 0), sense.KeyIllegalRequest, 0x24, 0x00)
	for _, cdb := range [][]byte{
		cdb10(0x41, 0, 2048, 1), cdb10(0x41, 0, 2047, 2), cdb16(0x93, 0, ^uint64(0), 1),
		cdb16(0x93, 0, 1<<63, 1), cdb10(0x41, 0, 0xFFFFFFFF, 1),
	} {
		wantSense(t, f.run(f.s, 0, cdb, blk, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	}
	// WRITE SAME(16) UNMAP + NDOB: no data-out; the range reads as zeros.
	f.good(cdb16(0x8A, 0, 2040, 8), pattern(8*512, 3))
	f.good(cdb16(0x93, 0x09, 2040, 8), nil)
	if got := f.in(cdb16(0x88, 0, 2040, 8), 8*512); !allZero(got) {
		t.Fatal("NDOB range not zero")
	}
	// WRPROTECT (byte 1 bits 7:5) without protection information.
	wantField(t, f.run(f.s, 0, cdb16(0x93, 0x20, 0, 1), blk, 0), 0x24, true, 1, 7)
	// ANCHOR (byte 1 bit 4) is not supported (ANC_SUP=0).
	wantField(t, f.run(f.s, 0, cdb16(0x93, 0x18, 0, 1), blk, 0), 0x24, true, 1, 4)
}

// libiscsi test_get_lba_status_beyond_eol and _simple.
func TestConformanceGetLBAStatus(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	for _, lba := range []uint64{2048, 2049, 1 << 63, ^uint64(0)} {
		wantSense(t, f.run(f.s, 0, cdb16(0x9E, 0x12, lba, 24), nil, 24), sense.KeyIllegalRequest, 0x21, 0x00)
	}
	f.good(cdb16(0x8A, 0, 2047, 1), pattern(512, 1))
	b := f.in(cdb16(0x9E, 0x12, 2047, 24), 24)
	// One descriptor: LBA 2047, 1 block, mapped.
	wantBytes(t, "last LBA", b, hx(`00000014 00000000 00000000000007ff 00000001 00 000000`))
	// Allocation length 0..7: no data, GOOD.
	for al := uint32(0); al < 8; al++ {
		r := f.run(f.s, 0, cdb16(0x9E, 0x12, 0, al), nil, 64)
		if r.Status != sense.StatusGood || r.DataInLen != int(al) {
			t.Fatalf("alloc %d: %+v", al, r)
		}
	}
}

// libiscsi test_compareandwrite_miscompare: the INFORMATION field holds
// the offset of the first differing byte in the verify data (SBC-3 §5.2),
// and the medium is not written.
func TestConformanceCompareAndWriteMiscompare(t *testing.T) {
	f := newFixture(t, LUConfig{})
	old := pattern(2*512, 9)
	f.good(cdb16(0x8A, 0, 10, 2), old)
	out := append(append([]byte(nil), old...), pattern(2*512, 77)...)
	out[512+37] ^= 0xFF
	cdb := cdb16(0x89, 0, 10, 0)
	cdb[13] = 2
	s := wantSense(t, f.run(f.s, 0, cdb, out, 0), sense.KeyMiscompare, 0x1D, 0x00)
	if !s.InfoValid || s.Info != 512+37 {
		t.Fatalf("INFORMATION %v %d, want 549", s.InfoValid, s.Info)
	}
	wantBytes(t, "medium", f.in(cdb16(0x88, 0, 10, 2), 1024), old)
}

// SBC-3 §5.27: VERIFY with BYTCHK=0 does not transfer data and is not bound
// by MAXIMUM TRANSFER LENGTH; a range ending past the capacity is LBA OUT
// OF RANGE (libiscsi test_verify16_beyond_eol); VRPROTECT without
// protection is INVALID FIELD IN CDB (test_verify16_vrprotect).
func TestConformanceVerify(t *testing.T) {
	f := newFixture(t, LUConfig{})
	f.good(cdb16(0x8F, 0, 0, 2048), nil)
	for _, cdb := range [][]byte{
		cdb16(0x8F, 0, 1, 2048), cdb16(0x8F, 0, ^uint64(0), 1), cdb10(0x2F, 0, 2048, 1),
		{0xAF, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0},
	} {
		wantSense(t, f.run(f.s, 0, cdb, nil, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	}
	for v := byte(1); v < 8; v++ {
		wantField(t, f.run(f.s, 0, cdb10(0x2F, v<<5, 0, 1), nil, 0), 0x24, true, 1, 7)
	}
}

// Every opcode of the table with a CDB one byte short, with every reserved
// bit set in turn, and with allocation/transfer fields at their maximum:
// no panic, a valid status, and a field pointer inside the CDB.
func TestConformanceMalformedCDBs(t *testing.T) {
	f := newFixture(t, LUConfig{Backstore: backstore.NewRAM(1 << 20), ThinProvisioning: true})
	for _, e := range f.tg.ops.all {
		full := append([]byte(nil), e.usage...)
		for n := 1; n < len(full); n++ {
			r := f.run(f.s, 0, full[:n], nil, 64)
			s := wantSense(t, r, sense.KeyIllegalRequest, 0x24, 0x00)
			if s.SKSValid && int(s.SKS[1])<<8|int(s.SKS[2]) >= n {
				t.Fatalf("%s: truncated to %d: pointer past the CDB % x", e.name, n, s.SKS)
			}
		}
		for i := 1; i < len(e.usage); i++ {
			for bit := 0; bit < 8; bit++ {
				if e.usage[i]&(1<<bit) != 0 || e.hasSA && i == 1 && bit < 5 {
					continue // a used bit, or another service action
				}
				cdb := make([]byte, len(e.usage))
				cdb[0] = e.op
				if e.hasSA {
					cdb[1] = byte(e.sa)
				}
				cdb[i] |= 1 << bit
				r := f.run(f.s, 0, cdb, nil, 64)
				want := bit
				if e.protect && i == 1 && bit >= 5 {
					want = 7 // leftmost bit of the PROTECT field
				}
				wantField(t, r, 0x24, true, i, want)
			}
		}
	}
}

// libiscsi test_prout_reserve_access_{we,ea,wero,earo,wear,eaar} and
// test_prin_report_caps_simple: the access each reservation type gives a
// second I_T nexus, registered or not (SPC-4 §5.13.1, table 45 — reads and
// writes), READ RESERVATION reporting key 0 for the all-registrants types
// (SPC-4 §6.15.3), and RELEASE by the holder.
func TestConformancePRAccess(t *testing.T) {
	type access struct{ readUnreg, writeUnreg, readReg, writeReg bool }
	for _, tc := range []struct {
		typ byte
		acc access
	}{
		{0x1, access{true, false, true, false}},   // WRITE EXCLUSIVE
		{0x3, access{false, false, false, false}}, // EXCLUSIVE ACCESS
		{0x5, access{true, false, true, true}},    // WRITE EXCLUSIVE – REGISTRANTS ONLY
		{0x6, access{false, false, true, true}},   // EXCLUSIVE ACCESS – REGISTRANTS ONLY
		{0x7, access{true, false, true, true}},    // WRITE EXCLUSIVE – ALL REGISTRANTS
		{0x8, access{false, false, true, true}},   // EXCLUSIVE ACCESS – ALL REGISTRANTS
	} {
		f := newFixture(t, LUConfig{})
		s2 := f.tg.NewSession(nexusB)
		f.run(s2, 0, cdbTUR(), nil, 0)
		cdb, p := prOut(0x06, 0, 0, 0xA1) // REGISTER AND IGNORE EXISTING KEY
		f.good(cdb, p)
		caps := f.in([]byte{0x5E, 0x02, 0, 0, 0, 0, 0, 0, 8, 0}, 8)
		if be16(caps) != 8 || caps[3]>>4&0x07 > 5 {
			t.Fatalf("REPORT CAPABILITIES % x", caps)
		}
		if mask := be16(caps[4:]); mask&0xEB00 != 0xEA00 || mask&^0xEB01 != 0 {
			t.Fatalf("type mask %04x", mask)
		}
		cdb, p = prOut(0x01, tc.typ, 0xA1, 0)
		f.good(cdb, p)
		rr := f.in([]byte{0x5E, 0x01, 0, 0, 0, 0, 0, 0, 24, 0}, 24)
		wantKey := uint64(0xA1)
		if tc.typ >= 7 {
			wantKey = 0
		}
		if be32(rr[4:]) != 16 || be64(rr[8:]) != wantKey || rr[21] != tc.typ {
			t.Fatalf("type %d: READ RESERVATION % x", tc.typ, rr)
		}
		check := func(what string, r Result, allowed bool) {
			t.Helper()
			if allowed && r.Status != sense.StatusGood || !allowed && r.Status != sense.StatusReservationConflict {
				t.Fatalf("type %d: %s: status %#x, allowed %v", tc.typ, what, r.Status, allowed)
			}
		}
		check("TUR unregistered", f.run(s2, 0, cdbTUR(), nil, 0), true)
		check("read unregistered", f.run(s2, 0, cdb10(0x28, 0, 0, 1), nil, 512), tc.acc.readUnreg)
		check("write unregistered", f.run(s2, 0, cdb10(0x2A, 0, 0, 1), make([]byte, 512), 0), tc.acc.writeUnreg)
		cdb, p = prOut(0x06, 0, 0, 0xB2)
		check("register", f.run(s2, 0, cdb, p, 0), true)
		check("read registered", f.run(s2, 0, cdb10(0x28, 0, 0, 1), nil, 512), tc.acc.readReg)
		check("write registered", f.run(s2, 0, cdb10(0x2A, 0, 0, 1), make([]byte, 512), 0), tc.acc.writeReg)
		// The holder releases; B then has full access.
		cdb, p = prOut(0x02, tc.typ, 0xA1, 0)
		f.good(cdb, p)
		if tc.typ >= 5 {
			// Registrants-only and all-registrants types: the other
			// registrants get RESERVATIONS RELEASED (SPC-4 §5.13.11.2).
			wantSense(t, f.run(s2, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x04)
		}
		check("write after release", f.run(s2, 0, cdb10(0x2A, 0, 0, 1), make([]byte, 512), 0), true)
		s2.Close()
	}
}

// libiscsi test_prin_serviceaction_range: PERSISTENT RESERVE IN service
// actions 04h..1Fh are INVALID FIELD IN CDB; test_prin_read_keys_truncate:
// a short allocation length truncates without error.
func TestConformancePRIn(t *testing.T) {
	f := newFixture(t, LUConfig{})
	for sa := byte(4); sa < 0x20; sa++ {
		wantSense(t, f.run(f.s, 0, []byte{0x5E, sa, 0, 0, 0, 0, 0, 0, 64, 0}, nil, 64), sense.KeyIllegalRequest, 0x24, 0x00)
	}
	for i := uint64(1); i <= 3; i++ {
		s := f.tg.NewSession(Nexus{InitiatorPortID: fmt32(i), TargetPortID: nexusA.TargetPortID, RelativeTargetPort: 1})
		f.run(s, 0, cdbTUR(), nil, 0)
		cdb, p := prOut(0x00, 0, 0, 0x100+i)
		if r := f.run(s, 0, cdb, p, 0); r.Status != sense.StatusGood {
			t.Fatalf("%+v", r)
		}
		defer s.Close()
	}
	for al := 0; al <= 32; al++ {
		r := f.run(f.s, 0, []byte{0x5E, 0, 0, 0, 0, 0, 0, 0, byte(al), 0}, nil, 64)
		if r.Status != sense.StatusGood || r.DataInLen != min(al, 8+24) {
			t.Fatalf("alloc %d: %+v", al, r)
		}
	}
}

func fmt32(i uint64) string {
	const hexd = "0123456789abcdef"
	b := []byte("00000000000000000000000000000000")
	for j := 31; i > 0; j-- {
		b[j] = hexd[i&15]
		i >>= 4
	}
	return string(b)
}

// libiscsi test_report_supported_opcodes_one_command: for every descriptor
// of the all-commands list, reporting options 001b works for opcodes without
// service actions and is INVALID FIELD IN CDB for those with; 010b the
// reverse; the usage data starts with the opcode and, for service action
// commands, carries the service action in the SERVICE ACTION field
// (SPC-4 §6.35.3).
func TestConformanceRSOCOneCommand(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	all := f.in([]byte{0xA3, 0x0C, 0x00, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0}, 65535)
	if len(all) < 12 {
		t.Fatal("empty list")
	}
	rsoc := func(opt, op byte, sa uint16) []byte {
		return []byte{0xA3, 0x0C, opt, op, byte(sa >> 8), byte(sa), 0, 0, 0xFF, 0xFF, 0, 0}
	}
	for p := 4; p+8 <= len(all); p += 8 {
		d := all[p : p+8]
		op, sa, servactv := d[0], be16(d[2:]), d[5]&0x01 != 0
		good, bad := byte(1), byte(2)
		if servactv {
			good, bad = 2, 1
		}
		wantSense(t, f.run(f.s, 0, rsoc(bad, op, sa), nil, 65535), sense.KeyIllegalRequest, 0x24, 0x00)
		one := f.in(rsoc(good, op, sa), 65535)
		if one[1]&0x07 != 3 || int(be16(one[2:])) != int(be16(d[6:])) || len(one) != 4+int(be16(d[6:])) || one[4] != op {
			t.Fatalf("op %02x sa %02x: % x", op, sa, one)
		}
		if servactv && uint16(one[5]&0x1F) != sa {
			t.Fatalf("op %02x sa %02x: usage byte 1 %02x", op, sa, one[5])
		}
	}
}

// SPC-4 §6.33: REPORT LUNS neither reports a unit attention nor leaves
// REPORTED LUNS DATA HAS CHANGED pending for its nexus, on any logical
// unit; other nexuses keep theirs, and other conditions stay.
func TestConformanceReportLUNsClearsLUNsChanged(t *testing.T) {
	f := newFixture(t, LUConfig{})
	lu1, _ := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err := f.tg.AddLUN(1, lu1); err != nil {
		t.Fatal(err)
	}
	f.run(f.s, 1, cdbTUR(), nil, 0) // POWER ON on LUN 1, consumed
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)
	lu2, _ := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err := f.tg.AddLUN(2, lu2); err != nil {
		t.Fatal(err)
	}
	f.lu.uaAllExisting(ReasonUAModeChanged, "")
	r := f.run(f.s, 0, []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, nil, 256)
	if r.Status != sense.StatusGood || r.DataInLen != 32 {
		t.Fatalf("REPORT LUNS: %+v", r)
	}
	// LUN 0: the MODE PARAMETERS CHANGED condition remains, the LUN
	// inventory one is gone; LUN 1: nothing pending.
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x01)
	f.good(cdbTUR(), nil)
	if r := f.run(f.s, 1, cdbTUR(), nil, 0); r.Status != sense.StatusGood {
		t.Fatalf("LUN 1: %+v % x", r, r.Sense)
	}
	// The other nexus still has its own.
	wantSense(t, f.run(s2, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
}

// PERSISTENT RESERVE OUT error cases, SPC-4 §5.13 and §6.16.
func TestConformancePROutErrors(t *testing.T) {
	f := newFixture(t, LUConfig{})
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)
	conflict := func(r Result) {
		t.Helper()
		if r.Status != sense.StatusReservationConflict {
			t.Fatalf("status %#x sense % x, want RESERVATION CONFLICT", r.Status, r.Sense)
		}
	}
	// REGISTER from an unregistered nexus with a non-zero RESERVATION
	// KEY: RESERVATION CONFLICT (§5.13.7.2).
	cdb, p := prOut(0x00, 0, 0x99, 0xA1)
	conflict(f.run(f.s, 0, cdb, p, 0))
	cdb, p = prOut(0x00, 0, 0, 0xA1)
	f.good(cdb, p)
	// Registered, wrong key: RESERVATION CONFLICT.
	cdb, p = prOut(0x00, 0, 0x98, 0xA2)
	conflict(f.run(f.s, 0, cdb, p, 0))
	// RESERVE with a key that is not the nexus's.
	cdb, p = prOut(0x01, 0x01, 0x98, 0)
	conflict(f.run(f.s, 0, cdb, p, 0))
	// Scope other than LU_SCOPE: INVALID FIELD IN CDB.
	cdb, p = prOut(0x01, 0x11, 0xA1, 0)
	wantSense(t, f.run(f.s, 0, cdb, p, 0), sense.KeyIllegalRequest, 0x24, 0x00)
	// Type 0 / 2 / 4 (obsolete or reserved): INVALID FIELD IN CDB.
	for _, typ := range []byte{0x0, 0x2, 0x4, 0x9, 0xF} {
		cdb, p = prOut(0x01, typ, 0xA1, 0)
		wantSense(t, f.run(f.s, 0, cdb, p, 0), sense.KeyIllegalRequest, 0x24, 0x00)
	}
	cdb, p = prOut(0x01, 0x03, 0xA1, 0)
	f.good(cdb, p)
	// The holder reserving again with another type: RESERVATION CONFLICT
	// (§5.13.9); with the same type: GOOD.
	cdb, p = prOut(0x01, 0x01, 0xA1, 0)
	conflict(f.run(f.s, 0, cdb, p, 0))
	cdb, p = prOut(0x01, 0x03, 0xA1, 0)
	f.good(cdb, p)
	// RELEASE with the wrong type: INVALID RELEASE OF PERSISTENT
	// RESERVATION (§5.13.11.2).
	cdb, p = prOut(0x02, 0x01, 0xA1, 0)
	wantSense(t, f.run(f.s, 0, cdb, p, 0), sense.KeyIllegalRequest, 0x26, 0x04)
	// PARAMETER LIST LENGTH other than 24 without SPEC_I_PT: PARAMETER
	// LIST LENGTH ERROR (§6.16.3).
	cdb, _ = prOut(0x00, 0, 0xA1, 0xA1)
	for _, n := range []byte{0, 8, 23, 25, 32} {
		c := append([]byte(nil), cdb...)
		c[8] = n
		wantSense(t, f.run(f.s, 0, c, make([]byte, n), 0), sense.KeyIllegalRequest, 0x1A, 0x00)
	}
	// Another nexus, registered, PREEMPT with SERVICE ACTION RESERVATION
	// KEY 0 while a non all-registrants reservation exists: INVALID FIELD
	// IN PARAMETER LIST (§5.13.11.2.4... §6.16.2).
	cdb, p = prOut(0x00, 0, 0, 0xB2)
	if r := f.run(s2, 0, cdb, p, 0); r.Status != sense.StatusGood {
		t.Fatalf("%+v", r)
	}
	cdb, p = prOut(0x04, 0x03, 0xB2, 0)
	wantSense(t, f.run(s2, 0, cdb, p, 0), sense.KeyIllegalRequest, 0x26, 0x00)
	// PREEMPT naming a key nobody holds: RESERVATION CONFLICT.
	cdb, p = prOut(0x04, 0x03, 0xB2, 0x77)
	conflict(f.run(s2, 0, cdb, p, 0))
	// READ FULL STATUS: two descriptors, the holder's with R_HOLDER and
	// the type.
	b := f.in([]byte{0x5E, 0x03, 0, 0, 0, 0, 0, 0x10, 0, 0}, 4096)
	if int(be32(b[4:])) != len(b)-8 {
		t.Fatalf("ADDITIONAL LENGTH %d, %d bytes", be32(b[4:]), len(b))
	}
	holders := 0
	for q := 8; q < len(b); {
		if q+24 > len(b) {
			t.Fatalf("truncated descriptor at %d", q)
		}
		if b[q+12]&0x01 != 0 {
			holders++
			if be64(b[q:]) != 0xA1 || b[q+13] != 0x03 {
				t.Fatalf("holder descriptor % x", b[q:q+24])
			}
		}
		q += 24 + int(be32(b[q+20:]))
	}
	if holders != 1 {
		t.Fatalf("%d holders", holders)
	}
}
