package srp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestMADGolden(t *testing.T) {
	// GetResp for IOUnitInfo as ib_srpt sends it: base 1, class 6, class
	// version 1, method 0x81, status 0, TID echoed, attr 0x0010.
	hdr := `01 06 01 81 | 0000 | 0000 | 0102030405060708 | 0010 | 0000 | 00000000`
	iou := `0001 | 10 | 00 | 10` + strings.Repeat("00", 127)
	want := hx(t, hdr+strings.Repeat("00", 40)+iou+strings.Repeat("00", 192-132))
	if len(want) != MADSize {
		t.Fatalf("golden MAD is %d bytes", len(want))
	}
	m := DMMAD{MADHeader: MADHeader{BaseVersion: 1, MgmtClass: MgmtClassDM, ClassVersion: 1, Method: MethodGet,
		TID: 0x0102030405060708, AttrID: AttrIOUnitInfo}}
	m.MADHeader = m.MADHeader.Response(MADStatusOK)
	u := SRPTIOUnitInfo()
	m.SetAttr(&u)
	if got := m.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("IOUnitInfo MAD:\n got %x\nwant %x", got, want)
	}
	back, err := UnmarshalDMMAD(want)
	if err != nil || !reflect.DeepEqual(*back, m) {
		t.Fatalf("decode: %v %+v", err, back)
	}
	var u2 IOUnitInfo
	if err := u2.Unmarshal(back.Data[:]); err != nil || u2 != u {
		t.Fatal(err, u2)
	}
	if u.Controller(1) != IOCPresent || u.Controller(2) != IOCNotInstalled || u.Controller(0) != IOCNoSlot {
		t.Fatal("controller states")
	}
	u.SetController(2, IOCNoSlot)
	if u.ControllerList[0] != 0x1f {
		t.Fatalf("slot 2 nibble: %#x", u.ControllerList[0])
	}

	// ClassPortInfo: 01 01, capability mask 0, RespTimeValue 20 in the low
	// 5 bits of the word at 4.
	cpi := SRPTClassPortInfo()
	wantCPI := hx(t, "01 01 0000 | 00000014"+strings.Repeat("00", 64))
	if got := cpi.AppendTo(nil); !bytes.Equal(got, wantCPI) {
		t.Fatalf("ClassPortInfo:\n got %x\nwant %x", got, wantCPI)
	}
	full := hx(t, "01 01 8001 | 00000035 | fe800000000000000002c90300001235 | 12345678 | 0007 | ffff | 00000001 | 80010000 |"+
		"00000000000000000000000000000000 | 00000000 | 0001 | 7fff | 40000002 | 00000000")
	var c ClassPortInfo
	if err := c.Unmarshal(full); err != nil {
		t.Fatal(err)
	}
	if c.CapabilityMask != 0x8001 || c.CapabilityMask2 != 1 || c.RespTimeValue != 0x15 || c.RedirectLID != 7 ||
		c.RedirectPKey != 0xffff || c.RedirectQP != 1 || c.RedirectQKey != 0x80010000 || c.TrapLID != 1 ||
		c.TrapPKey != 0x7fff || c.TrapHLQP != 0x40000002 || c.RedirectTCSLFL != 0x12345678 || c.RedirectGID[15] != 0x35 {
		t.Fatalf("%+v", c)
	}
	if !bytes.Equal(c.AppendTo(nil), full) {
		t.Fatal("ClassPortInfo re-encode")
	}

	// IOControllerProfile as ib_srpt fills it, for a device with vendor
	// 0x02c9, part 0x1003, hw 0xa0, queue depth 128, send size 8276,
	// rdma size 64 KiB.
	p := SRPTIOControllerProfile(0x000000fffe000001)
	p.VendorID, p.DeviceID, p.DeviceVersion, p.SubsysVendorID = 0x02c9, 0x1003, 0xa0, 0x02c9
	p.SendQueueDepth, p.SendSize, p.RDMASize = 128, 8276, 65536
	wantP := hx(t, "000000fffe000001 | 000002c9 | 00001003 | 00a0 | 0000 | 000002c9 | 00000000 |"+
		"0100 | 609e | 0108 | 0001 | 0000 | 0000 | 0080 | 00 | 04 | 00002054 | 00010000 |"+
		"2b | 00 | 01 | 000000000000000000 |"+
		"4c696e75782053525020746172676574"+strings.Repeat("00", 48))
	if len(wantP) != IOControllerProfileSize {
		t.Fatalf("golden profile %d bytes", len(wantP))
	}
	if got := p.AppendTo(nil); !bytes.Equal(got, wantP) {
		t.Fatalf("IOControllerProfile:\n got %x\nwant %x", got, wantP)
	}
	var p2 IOControllerProfile
	if err := p2.Unmarshal(wantP); err != nil || p2 != p {
		t.Fatalf("%v %+v", err, p2)
	}

	// ServiceEntries: "SRP.T10:000000fffe000001" NUL padded to 40, id.
	se := SRPTServiceEntries(0x000000fffe000001)
	wantSE := hx(t, "5352502e5431303a30303030303066666665303030303031"+strings.Repeat("00", 16)+"000000fffe000001"+strings.Repeat("00", 144))
	if got := se.AppendTo(nil); !bytes.Equal(got, wantSE) {
		t.Fatalf("ServiceEntries:\n got %x\nwant %x", got, wantSE)
	}
	var se2 ServiceEntries
	if err := se2.Unmarshal(wantSE); err != nil || se2 != se {
		t.Fatal(err, se2)
	}
	slot, hi, lo := ServiceEntriesMod(0x00010300)
	if slot != 1 || hi != 3 || lo != 0 {
		t.Fatal(slot, hi, lo)
	}
}

func TestMADStrict(t *testing.T) {
	m := DMMAD{MADHeader: MADHeader{BaseVersion: 1, MgmtClass: MgmtClassDM, ClassVersion: 1, Method: MethodGet}}
	b := m.Marshal()
	for n := range MADSize {
		if _, err := UnmarshalDMMAD(b[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix %d: %v", n, err)
		}
	}
	b[1] = 0x03
	if _, err := UnmarshalDMMAD(b); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	for _, f := range []func([]byte) error{
		new(ClassPortInfo).Unmarshal, new(IOUnitInfo).Unmarshal, new(IOControllerProfile).Unmarshal, new(ServiceEntries).Unmarshal,
	} {
		if err := f(make([]byte, 71)); !errors.Is(err, ErrTruncated) {
			t.Fatal(err)
		}
	}
}

// Short MADs and attributes name the first member (ib_mad.h, ib_dm_mad.h)
// the buffer cuts.
func TestMADTruncationNamesMember(t *testing.T) {
	cases := []struct {
		f     func([]byte) error
		n     int
		field string
	}{
		{new(DMMAD).Unmarshal, 0, "base_version"},
		{new(DMMAD).Unmarshal, 9, "tid"},
		{new(DMMAD).Unmarshal, 17, "attr_id"},
		{new(DMMAD).Unmarshal, 22, "attr_mod"},
		{new(DMMAD).Unmarshal, 100, "data"},
		{new(ClassPortInfo).Unmarshal, 5, "cap_mask2_resp_time"},
		{new(ClassPortInfo).Unmarshal, 71, "trap_qkey"},
		{new(IOUnitInfo).Unmarshal, 2, "max_controllers"},
		{new(IOUnitInfo).Unmarshal, 131, "controller_list"},
		{new(IOControllerProfile).Unmarshal, 19, "subsys_vendor_id"},
		{new(IOControllerProfile).Unmarshal, 45, "send_size"},
		{new(IOControllerProfile).Unmarshal, 100, "id_string"},
		{new(ServiceEntries).Unmarshal, 30, "service_entries[0].name"},
		{new(ServiceEntries).Unmarshal, 90, "service_entries[1].id"},
		{new(ServiceEntries).Unmarshal, 191, "service_entries[3].id"},
	}
	for _, tc := range cases {
		err := tc.f(make([]byte, tc.n))
		var de *DecodeError
		if !errors.As(err, &de) || de.Field != tc.field || !errors.Is(err, ErrTruncated) {
			t.Errorf("%d bytes: %v, want field %s", tc.n, err, tc.field)
		}
	}
}

func TestMADRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		m := DMMAD{MADHeader: MADHeader{BaseVersion: uint8(r.Uint32()), MgmtClass: MgmtClassDM, ClassVersion: uint8(r.Uint32()),
			Method: uint8(r.Uint32()), Status: uint16(r.Uint32()), ClassSpecific: uint16(r.Uint32()), TID: r.Uint64(),
			AttrID: uint16(r.Uint32()), AttrMod: r.Uint32()}}
		copy(m.Data[:], randBytes(r, DMDataSize))
		got, err := UnmarshalDMMAD(m.Marshal())
		if err != nil || *got != m {
			t.Fatalf("%v %+v", err, got)
		}
		p := IOControllerProfile{GUID: r.Uint64(), VendorID: r.Uint32(), DeviceID: r.Uint32(), DeviceVersion: uint16(r.Uint32()),
			SubsysVendorID: r.Uint32(), SubsysDeviceID: r.Uint32(), IOClass: uint16(r.Uint32()), IOSubclass: uint16(r.Uint32()),
			Protocol: uint16(r.Uint32()), ProtocolVersion: uint16(r.Uint32()), ServiceConn: uint16(r.Uint32()),
			InitiatorsSupported: uint16(r.Uint32()), SendQueueDepth: uint16(r.Uint32()), RDMAReadDepth: uint8(r.Uint32()),
			SendSize: r.Uint32(), RDMASize: r.Uint32(), OpCapMask: uint8(r.Uint32()), SvcCapMask: uint8(r.Uint32()),
			NumSvcEntries: uint8(r.Uint32()), IDString: strings.Repeat("x", r.IntN(65))}
		var p2 IOControllerProfile
		if err := p2.Unmarshal(p.AppendTo(nil)); err != nil || p2 != p {
			t.Fatalf("%v %+v", err, p2)
		}
		c := ClassPortInfo{BaseVersion: uint8(r.Uint32()), CapabilityMask2: r.Uint32() >> 5, RespTimeValue: uint8(r.IntN(32)),
			RedirectQP: r.Uint32(), TrapHLQP: r.Uint32(), TrapGID: randPortID(r)}
		var c2 ClassPortInfo
		if err := c2.Unmarshal(c.AppendTo(nil)); err != nil || c2 != c {
			t.Fatalf("%v %+v", err, c2)
		}
	}
}
