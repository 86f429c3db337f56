package scsi

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// Expected bytes below are written from SPC-4 §6.6.2 table 142 and §7.8,
// SBC-3 §6.6, not from the code.

func TestStandardInquiry(t *testing.T) {
	f := newFixture(t, LUConfig{Serial: "0123456789abcdef"})
	got := f.in(cdbInquiry(false, 0, 255), 255)
	want := hx(`00 00 06 12 5b 30 00 02` + // PDT disk; SPC-4; HISUP, RDF 2; len 91; TPGS=11 (implicit and explicit ALUA); CMDQUE
		`47 4f 53 52 50 20 20 20` + // "GOSRP   "
		`44 49 53 4b 20 20 20 20 20 20 20 20 20 20 20 20` + // "DISK"
		`30 30 30 31` + // "0001"
		`00000000000000000000 00000000000000000000 0000` + // 36..57
		`00a0 0940 0460 04c0` + // SAM-5, SRP, SPC-4, SBC-3
		`0000000000000000 0000000000000000 0000000000000000 000000000000`)
	wantBytes(t, "standard INQUIRY", got, want)
	// Allocation length truncates.
	wantBytes(t, "truncated", f.in(cdbInquiry(false, 0, 5), 255), want[:5])
	// EVPD=0 with a page code is INVALID FIELD IN CDB, byte 2.
	wantField(t, f.run(f.s, 0, cdbInquiry(false, 0x80, 255), nil, 255), 0x24, true, 2, -1)
	// CMDDT (obsolete, byte 1 bit 1) is rejected through the usage mask.
	wantField(t, f.run(f.s, 0, []byte{0x12, 0x02, 0, 0, 255, 0}, nil, 255), 0x24, true, 1, 1)
}

func TestVPDPages(t *testing.T) {
	f := newFixture(t, LUConfig{Serial: "0123456789abcdef"})
	cases := []struct {
		page byte
		want string
	}{
		{0x00, `00 00 00 06 00 80 83 86 b0 b1`},
		{0x80, `00 80 00 10 30313233343536373839616263646566`},
		{0x83, `00 83 00 40` +
			`01 03 00 10 60 01 40 50 12 34 56 78 9a bc de f0 00 00 00 00` + // NAA 6, OUI 001405
			`02 01 00 18 474f535250202020 30313233343536373839616263646566` + // T10: vendor + serial
			`41 94 00 04 00 00 00 01` + // relative target port 1 (SRP, PIV)
			`41 95 00 04 00 00 00 00`}, // target port group 0
		{0x86, `00 86 00 3c 00 07` + zeros(58)},
		{0xB0, `00 b0 00 3c 01 ff 00 08 00 00 40 00 00 00 40 00` + zeros(20) + `00 00 00 00 00 40 00 00` + zeros(20)},
		{0xB1, `00 b1 00 3c` + zeros(60)},
	}
	for _, c := range cases {
		got := f.in(cdbInquiry(true, c.page, 512), 512)
		wantBytes(t, "VPD "+string("0123456789abcdef"[c.page>>4])+string("0123456789abcdef"[c.page&15]), got, hx(c.want))
	}
	// B2h only exists with thin provisioning.
	wantField(t, f.run(f.s, 0, cdbInquiry(true, 0xB2, 255), nil, 255), 0x24, true, 2, -1)
}

func zeros(n int) string {
	b := make([]byte, 2*n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

func TestVPDThin(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true, RotationRate: 1})
	wantBytes(t, "VPD 00", f.in(cdbInquiry(true, 0, 255), 255), hx(`00 00 00 07 00 80 83 86 b0 b1 b2`))
	wantBytes(t, "VPD B2", f.in(cdbInquiry(true, 0xB2, 255), 255), hx(`00 b2 00 04 00 e4 02 00`))
	wantBytes(t, "VPD B1", f.in(cdbInquiry(true, 0xB1, 255), 255)[:6], hx(`00 b1 00 3c 00 01`))
	b0 := f.in(cdbInquiry(true, 0xB0, 255), 255)
	// MAXIMUM UNMAP LBA COUNT ffffffff, MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT
	// 256, OPTIMAL UNMAP GRANULARITY 8 blocks = 4 KiB, the page size of
	// file systems and of the RAM backstore (SBC-3 table 200 bytes 20..31).
	wantBytes(t, "B0 unmap", b0[20:32], hx(`ffffffff 00000100 00000008`))
}

func TestReadCapacity(t *testing.T) {
	f := newFixture(t, LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	wantBytes(t, "RC10", f.in([]byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8), hx(`00 00 07 ff 00 00 02 00`))
	// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3: 4 KiB physical blocks.
	wantBytes(t, "RC16", f.in(cdbRC16(32), 32), hx(`00000000000007ff 00000200 00 03 00 00`+zeros(16)))
	h := newFixture(t, LUConfig{Backstore: backstore.NewRAM(1 << 20), PhysicalBlockSize: 512})
	wantBytes(t, "RC16 512 physical", h.in(cdbRC16(16), 16), hx(`00000000000007ff 00000200 00 00 00 00`))
	if _, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20), PhysicalBlockSize: 1000}); err == nil {
		t.Fatal("physical block size 1000 accepted")
	}
	// LBA without PMI is invalid (SBC-3 §5.15.1).
	wantField(t, f.run(f.s, 0, []byte{0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0}, nil, 8), 0x24, true, 2, -1)

	g := newFixture(t, LUConfig{Backstore: backstore.NewRAM(8 << 20), BlockSize: 4096, ThinProvisioning: true, PhysicalBlockSize: 0})
	wantBytes(t, "RC16 4k thin", g.in(cdbRC16(32), 32), hx(`00000000000007ff 00001000 00 00 c0 00`+zeros(16)))
}

func TestRequestSense(t *testing.T) {
	f := newFixture(t, LUConfig{})
	// No pending condition: fixed NO SENSE, 18 bytes.
	wantBytes(t, "NO SENSE", f.in([]byte{0x03, 0, 0, 0, 252, 0}, 252), hx(`70 00 00 00 00 00 00 0a 00 00 00 00 00 00 00 00 00 00`))
	wantBytes(t, "NO SENSE desc", f.in([]byte{0x03, 1, 0, 0, 252, 0}, 252), hx(`72 00 00 00 00 00 00 00`))
	// A pending unit attention is reported by REQUEST SENSE and cleared.
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	r := f.run(s2, 0, []byte{0x03, 0, 0, 0, 252, 0}, nil, 252)
	if r.Status != sense.StatusGood {
		t.Fatalf("status %#x", r.Status)
	}
	// Status GOOD, data = UA sense.
	if r.DataInLen != 18 {
		t.Fatalf("len %d", r.DataInLen)
	}
	r = f.run(s2, 0, cdbTUR(), nil, 0)
	if r.Status != sense.StatusGood {
		t.Fatalf("UA not cleared by REQUEST SENSE: % x", r.Sense)
	}
}

func TestBadLUN(t *testing.T) {
	f := newFixture(t, LUConfig{})
	// INQUIRY to a LUN without a logical unit: peripheral qualifier 011b,
	// type 1Fh (SPC-4 §6.6.2).
	r := f.run(f.s, 5, cdbInquiry(false, 0, 96), nil, 96)
	if r.Status != sense.StatusGood || r.DataInLen != 96 {
		t.Fatalf("%+v", r)
	}
	cmd := &Command{Tag: 900, LUN: EncodeLUN(5), CDB: cdbInquiry(false, 0, 96), DataIn: make([]byte, 96)}
	f.s.Execute(testCtx(t), cmd)
	if cmd.DataIn[0] != 0x7F {
		t.Fatalf("byte 0 %#x, want 7f", cmd.DataIn[0])
	}
	// EVPD: the Supported VPD Pages page, with the same qualifier and
	// type, lists only itself (SPC-4 §6.6.1, §7.8.13); a page describing
	// a logical unit is refused (INVALID FIELD IN CDB, the PAGE CODE).
	cmd = &Command{Tag: 903, LUN: EncodeLUN(5), CDB: cdbInquiry(true, 0x00, 255), DataIn: make([]byte, 255)}
	if r := f.s.Execute(testCtx(t), cmd); r.Status != sense.StatusGood || r.DataInLen != 5 {
		t.Fatalf("VPD 00h of no logical unit: %+v", r)
	}
	wantBytes(t, "VPD 00h of no logical unit", cmd.DataIn[:5], []byte{0x7F, 0x00, 0x00, 0x01, 0x00})
	for _, page := range []byte{0x80, 0x83, 0xB0} {
		wantField(t, f.run(f.s, 5, cdbInquiry(true, page, 255), nil, 255), 0x24, true, 2, -1)
	}
	wantSense(t, f.run(f.s, 5, cdbTUR(), nil, 0), sense.KeyIllegalRequest, 0x25, 0x00)
	wantSense(t, f.run(f.s, 5, cdb16(0x88, 0, 0, 1), nil, 512), sense.KeyIllegalRequest, 0x25, 0x00)
	// REQUEST SENSE: GOOD with LOGICAL UNIT NOT SUPPORTED sense data.
	cmd = &Command{Tag: 901, LUN: EncodeLUN(5), CDB: []byte{0x03, 0, 0, 0, 18, 0}, DataIn: make([]byte, 18)}
	r = f.s.Execute(testCtx(t), cmd)
	if r.Status != sense.StatusGood || cmd.DataIn[2] != 5 || cmd.DataIn[12] != 0x25 {
		t.Fatalf("%+v % x", r, cmd.DataIn)
	}
	// REPORT LUNS works through any LUN.
	r = f.run(f.s, 5, []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, nil, 256)
	if r.Status != sense.StatusGood || r.DataInLen != 16 {
		t.Fatalf("%+v", r)
	}
	// An address method the target does not serve.
	cmd = &Command{Tag: 902, LUN: 0x8000000000000000, CDB: cdbTUR()}
	wantSense(t, f.s.Execute(testCtx(t), cmd), sense.KeyIllegalRequest, 0x25, 0x00)
}

func TestUnknownOpcodeAndServiceAction(t *testing.T) {
	f := newFixture(t, LUConfig{})
	wantSense(t, f.run(f.s, 0, []byte{0xC0, 0, 0, 0, 0, 0}, nil, 0), sense.KeyIllegalRequest, 0x20, 0x00)
	// SERVICE ACTION IN(16) with an unknown service action: byte 1 bit 4.
	wantField(t, f.run(f.s, 0, cdb16(0x9E, 0x1F, 0, 32), nil, 32), 0x24, true, 1, 4)
	// NACA bit in the CONTROL byte.
	c := cdb16(0x88, 0, 0, 1)
	c[15] = 0x04
	wantField(t, f.run(f.s, 0, c, nil, 512), 0x24, true, 15, 2)
	// RDPROTECT is not supported: byte 1, bit pointer at the field's
	// leftmost bit, 7 (SPC-4 §4.5.2.4.2), whichever of its bits is set.
	for _, v := range []byte{0x20, 0x40, 0x60, 0xE0} {
		wantField(t, f.run(f.s, 0, cdb16(0x88, v, 0, 1), nil, 512), 0x24, true, 1, 7)
	}
	// READ(6) byte 1 bits 7:5 are reserved single bits.
	wantField(t, f.run(f.s, 0, []byte{0x08, 0x20, 0, 0, 1, 0}, nil, 512), 0x24, true, 1, 5)
}

func TestReportLUNs(t *testing.T) {
	f := newFixture(t, LUConfig{})
	lu2, _ := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err := f.tg.AddLUN(300, lu2); err != nil {
		t.Fatal(err)
	}
	// The existing nexus is told the inventory changed.
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
	cdb := []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	// LUN 0 peripheral, LUN 300 flat space (0x412c).
	wantBytes(t, "REPORT LUNS", f.in(cdb, 256), hx(`00000010 00000000 0000000000000000 412c000000000000`))
	cdb[2] = 1 // well known only
	wantBytes(t, "REPORT LUNS 1", f.in(cdb, 256), hx(`00000000 00000000`))
	cdb[2] = 3
	wantField(t, f.run(f.s, 0, cdb, nil, 256), 0x24, true, 2, -1)
	if err := f.tg.RemoveLUN(300); err != nil {
		t.Fatal(err)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
	cdb[2] = 0
	wantBytes(t, "REPORT LUNS after remove", f.in(cdb, 256), hx(`00000008 00000000 0000000000000000`))
	if f.tg.AddLUN(0, lu2) != ErrLUNExists || f.tg.RemoveLUN(7) != ErrNoSuchLUN {
		t.Fatal("errors")
	}
}

func TestReportOpcodes(t *testing.T) {
	f := newFixture(t, LUConfig{})
	// One command, READ(16): SUPPORT 011b, CDB SIZE 16, usage data
	// (SPC-4 §6.35.3 table 294).
	one := []byte{0xA3, 0x0C, 0x01, 0x88, 0, 0, 0, 0, 1, 0, 0, 0}
	wantBytes(t, "RSOC READ(16)", f.in(one, 256), hx(`00 03 00 10 88 1e ffffffffffffffff ffffffff 3f 00`))
	one[2] = 0x81 // RCTD: CTDP and the timeouts descriptor
	wantBytes(t, "RSOC READ(16) RCTD", f.in(one, 256), hx(`00 83 00 10 88 1e ffffffffffffffff ffffffff 3f 00 000a 00 00 00000001 0000001e`))
	// Not supported opcode: SUPPORT 001b.
	one[2], one[3] = 0x01, 0xC5
	wantBytes(t, "RSOC unsupported", f.in(one, 256), hx(`00 01 00 00`))
	// Opcode with service actions asked without one.
	one[3] = 0x9E
	wantField(t, f.run(f.s, 0, one, nil, 256), 0x24, true, 2, 2)
	// With service action: READ CAPACITY(16).
	one[2], one[3], one[5] = 0x02, 0x9E, 0x10
	// The SERVICE ACTION field position of the usage data carries the
	// service action itself (SPC-4 §6.35.3), 10h.
	wantBytes(t, "RSOC RC16", f.in(one, 256), hx(`00 03 00 10 9e 10 ffffffffffffffff ffffffff 01 00`))
	// MAINTENANCE IN / REPORT TARGET PORT GROUPS: PARAMETER DATA FORMAT
	// bits 7:5 and SA 0Ah.
	one[3], one[5] = 0xA3, 0x0A
	wantBytes(t, "RSOC RTPG", f.in(one, 256), hx(`00 03 00 0c a3 ea 00000000 ffffffff 00 00`))

	// All commands: every table row once, 8-byte descriptors.
	all := []byte{0xA3, 0x0C, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}
	b := f.in(all, 4096)
	n := int(be32(b))
	if n != len(b)-4 || n%8 != 0 || n/8 != len(f.tg.ops.all) {
		t.Fatalf("length %d, %d bytes, %d rows", n, len(b), len(f.tg.ops.all))
	}
	seen := map[[3]byte]bool{}
	for p := 4; p < len(b); p += 8 {
		d := b[p : p+8]
		seen[[3]byte{d[0], d[2], d[3]}] = true
		e, lf := f.tg.ops.lookup(append([]byte{d[0], d[3]}, make([]byte, 14)...))
		if lf.failed() || int(be16(d[6:])) != e.cdbLen() || (d[5]&1 == 1) != e.hasSA {
			t.Fatalf("descriptor % x", d)
		}
		// The CDB usage data must accept a CDB of its own mask.
		if e.validate(e.usage).failed() {
			t.Fatalf("%s: usage mask rejects itself", e.name)
		}
	}
	for _, want := range [][3]byte{{0x28, 0, 0}, {0x2A, 0, 0}, {0x9E, 0, 0x10}, {0xA3, 0, 0x0C}, {0x5F, 0, 0x07}, {0x89, 0, 0}} {
		if !seen[want] {
			t.Fatalf("missing % x", want)
		}
	}
	all[2] = 0x80
	b = f.in(all, 8192)
	if int(be32(b)) != 20*len(f.tg.ops.all) || b[4+5] != 0x02 {
		t.Fatalf("RCTD all: % x", b[:24])
	}
}

func TestReportTMFsAndTPG(t *testing.T) {
	f := newFixture(t, LUConfig{})
	wantBytes(t, "RSTMF", f.in([]byte{0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0}, 4), hx(`d8 00 00 00`))
	wantBytes(t, "RSTMF REPD", f.in([]byte{0xA3, 0x0D, 0x80, 0, 0, 0, 0, 0, 0, 16, 0, 0}, 16), hx(`d8 00 00 0c`+zeros(12)))
	// One group, active/optimized, preferred; T_SUP U_SUP S_SUP AN_SUP
	// AO_SUP; port 1 (SPC-4 §6.37 tables 307, 308).
	wantBytes(t, "RTPG", f.in([]byte{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256),
		hx(`0000000c 80 8f 0000 00 00 00 01 0000 0001`))
	wantBytes(t, "RTPG ext", f.in([]byte{0xA3, 0x2A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256),
		hx(`00000010 10 00 0000 80 8f 0000 00 00 00 01 0000 0001`))
}

func TestSenseFormats(t *testing.T) {
	cases := []struct {
		name string
		f    failure
		desc bool
		want string
	}{
		{"field fixed", badCDB(2, 5), false, `70 00 05 00000000 0a 00000000 24 00 00 cd 0002`},
		{"field desc", badCDB(2, 5), true, `72 05 24 00 000000 08 02 06 0000 cd 0002 00`},
		{"param byte", badParam(8, -1), false, `70 00 05 00000000 0a 00000000 26 00 00 80 0008`},
		{"miscompare fixed", failure{reason: ReasonMiscompare, infoValid: true, info: 5}, false, `f0 00 0e 00000005 0a 00000000 1d 00 00 000000`},
		{"miscompare desc", failure{reason: ReasonMiscompare, infoValid: true, info: 5}, true, `72 0e 1d 00 000000 0c 00 0a 80 00 0000000000000005`},
		{"lba range", fail(ReasonLBAOutOfRange), false, `70 00 05 00000000 0a 00000000 21 00 00 000000`},
		{"space alloc", fail(ReasonSpaceAllocFailed), false, `70 00 07 00000000 0a 00000000 27 07 00 000000`},
	}
	for _, c := range cases {
		wantBytes(t, c.name, buildSense(c.f, c.desc), hx(c.want))
	}
	for r := ReasonNone + 1; r < numReasons; r++ {
		e := reasonTable[r]
		if e.status == 0 || (e.status == sense.StatusCheckCondition && e.asc == 0) {
			t.Fatalf("reason %d has no table row", r)
		}
	}
}

func TestEncodeDecodeLUN(t *testing.T) {
	for _, c := range []struct {
		n     uint64
		field uint64
	}{{0, 0}, {1, 0x0001000000000000}, {255, 0x00FF000000000000}, {256, 0x4100000000000000}, {16383, 0x7FFF000000000000}} {
		if got := EncodeLUN(c.n); got != c.field {
			t.Fatalf("EncodeLUN(%d) = %#x", c.n, got)
		}
		if n, ok := DecodeLUN(c.field); !ok || n != c.n {
			t.Fatalf("DecodeLUN(%#x) = %d %v", c.field, n, ok)
		}
	}
	for _, bad := range []uint64{0x0101000000000000, 0x0001000000000001, 0x8000000000000000} {
		if _, ok := DecodeLUN(bad); ok {
			t.Fatalf("DecodeLUN(%#x) accepted", bad)
		}
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

func TestReportTimestamp(t *testing.T) {
	lu, _ := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	// 2026-01-02T03:04:05.006Z = 1767323045006 ms = 0x019b7ca98c8e.
	tg := NewTarget(TargetConfig{Clock: fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC))})
	tg.AddLUN(0, lu)
	s := tg.NewSession(nexusA)
	defer s.Close()
	s.Execute(testCtx(t), &Command{CDB: cdbTUR()})
	cmd := &Command{Tag: 1, CDB: []byte{0xA3, 0x0F, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0}, DataIn: make([]byte, 12)}
	if r := s.Execute(testCtx(t), cmd); r.Status != sense.StatusGood || r.DataInLen != 12 {
		t.Fatalf("%+v", r)
	}
	wantBytes(t, "REPORT TIMESTAMP", cmd.DataIn, hx(`000a 03 00 019b7ca98c8e 0000`))
}

// TestVPD83SCSIName: with a target port name the page adds two SCSI name
// string designators (SPC-4 §7.8.6.11, table 602): code set 3 (UTF-8) with
// protocol identifier 4 (SRP) and PIV=1, type 8; association 01b (target
// port: "<name>,t,0x<relative port>") then 10b (target device: "<name>"),
// each NUL-terminated and NUL-padded to a multiple of 4 bytes, as LIO's
// spc_emulate_evpd_83 reports ib_srpt ports.
func TestVPD83SCSIName(t *testing.T) {
	f := newFixture(t, LUConfig{Serial: "0123456789abcdef"})
	n := nexusB
	n.TargetPortName = "0xfe800000000000000002c903000e8acd" // 34 characters
	s := f.tg.NewSession(n)
	defer s.Close()
	cmd := &Command{Tag: 1, LUN: EncodeLUN(0), CDB: cdbInquiry(true, 0x83, 512), DataIn: make([]byte, 512)}
	r := s.Execute(testCtx(t), cmd)
	if r.Status != sense.StatusGood {
		t.Fatalf("status %#x", r.Status)
	}
	want := hx(`00 83 00 98` +
		`01 03 00 10 60 01 40 50 12 34 56 78 9a bc de f0 00 00 00 00` +
		`02 01 00 18 474f535250202020 30313233343536373839616263646566` +
		`41 94 00 04 00 00 00 01` +
		`41 95 00 04 00 00 00 00` +
		`43 98 00 2c`)
	want = append(want, "0xfe800000000000000002c903000e8acd,t,0x0001"...) // 43 + NUL = 44
	want = append(want, 0)
	want = append(want, hx(`43 a8 00 24`)...)
	want = append(want, "0xfe800000000000000002c903000e8acd"...) // 34 + NUL + pad = 36
	want = append(want, 0, 0)
	wantBytes(t, "VPD 83 with SCSI names", cmd.DataIn[:r.DataInLen], want)
}
