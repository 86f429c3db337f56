package srp

import (
	"bytes"
	"strings"
	"testing"
)

func TestDMResponder(t *testing.T) {
	p := SRPTIOControllerProfile(0x000000fffe000001)
	p.SendSize = 8276
	r := DMResponder{Profile: p, ServiceID: 0x000000fffe000001}
	get := func(attr uint16, mod uint32) DMMAD {
		return r.Answer(&DMMAD{MADHeader: MADHeader{BaseVersion: 1, MgmtClass: MgmtClassDM, ClassVersion: 1,
			Method: MethodGet, TID: 0xabc, AttrID: attr, AttrMod: mod}})
	}
	cases := []struct {
		attr   uint16
		mod    uint32
		status uint16
	}{
		{AttrClassPortInfo, 0, 0},
		{AttrIOUnitInfo, 0, 0},
		{AttrIOControllerProfile, 0, 0x001c},
		{AttrIOControllerProfile, 1, 0},
		{AttrIOControllerProfile, 2, 0},
		{AttrIOControllerProfile, 3, 0x0100},
		{AttrIOControllerProfile, 16, 0x0100},
		{AttrIOControllerProfile, 17, 0x001c},
		{AttrServiceEntries, 0x00010000, 0},
		{AttrServiceEntries, 0x00010100, 0},
		{AttrServiceEntries, 0x00010200, 0x0100},
		{AttrServiceEntries, 0x00010001, 0x0100},
		{AttrServiceEntries, 0x00030000, 0x0100},
		{AttrServiceEntries, 0x00000000, 0x001c},
		{AttrServiceEntries, 0x00110000, 0x001c},
		{0x0099, 0, 0x000c},
	}
	for _, tc := range cases {
		m := get(tc.attr, tc.mod)
		if m.Status != tc.status || m.Method != MethodGetResp || m.TID != 0xabc || m.AttrID != tc.attr || m.AttrMod != tc.mod {
			t.Errorf("attr %#x mod %#x: %+v", tc.attr, tc.mod, m.MADHeader)
		}
	}
	// Data written from the golden layouts of mad_test.go.
	if m := get(AttrIOUnitInfo, 0); !bytes.Equal(m.Data[:12], hx(t, "0001 10 00 10 00000000000000")) {
		t.Fatalf("IOUnitInfo %x", m.Data[:12])
	}
	if m := get(AttrClassPortInfo, 0); !bytes.Equal(m.Data[:8], hx(t, "0101 0000 00000014")) {
		t.Fatalf("ClassPortInfo %x", m.Data[:8])
	}
	m := get(AttrIOControllerProfile, 1)
	if !bytes.Equal(m.Data[28:36], hx(t, "0100 609e 0108 0001")) || m.Data[43] != 4 || m.Data[52] != 0x2b || m.Data[54] != 1 ||
		!bytes.Equal(m.Data[44:48], hx(t, "00002054")) || !strings.HasPrefix(string(m.Data[64:]), "Linux SRP target\x00") {
		t.Fatalf("profile %x", m.Data[:128])
	}
	m = get(AttrServiceEntries, 0x00010000)
	if string(m.Data[:24]) != "SRP.T10:000000fffe000001" || m.Data[24] != 0 || !bytes.Equal(m.Data[40:48], hx(t, "000000fffe000001")) {
		t.Fatalf("service entries %x", m.Data[:48])
	}
	set := r.Answer(&DMMAD{MADHeader: MADHeader{MgmtClass: MgmtClassDM, Method: MethodSet, AttrID: AttrIOUnitInfo}})
	other := r.Answer(&DMMAD{MADHeader: MADHeader{MgmtClass: MgmtClassDM, Method: 0x03, AttrID: AttrIOUnitInfo}})
	if set.Status != 0x000c || other.Status != 0x0008 || set.Method != MethodGetResp {
		t.Fatalf("set %#x other %#x", set.Status, other.Status)
	}
}
