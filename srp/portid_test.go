package srp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParsePortID(t *testing.T) {
	good := []struct {
		in        string
		ext, guid uint64
	}{
		{"0x02000000000200000000000000000000", 0x0200000000020000, 0},
		{"0X02000000000200000000000000000000", 0x0200000000020000, 0},
		{"000000fffe000001000000FFFE000001", 0x000000fffe000001, 0x000000fffe000001},
		{"0000:00ff:fe00:0001", 0, 0x000000fffe000001},
		{"0:ff:fe00:1", 0, 0x000000fffe000001},
		{"fe80:0000:0000:0000:0002:c903:0003:1234", 0xfe80000000000000, 0x0002c90300031234},
	}
	for _, g := range good {
		p, err := ParsePortID(g.in)
		if err != nil {
			t.Errorf("%q: %v", g.in, err)
			continue
		}
		if p.Ext() != g.ext || p.GUID() != g.guid {
			t.Errorf("%q: ext %#x guid %#x", g.in, p.Ext(), p.GUID())
		}
	}
	for _, in := range []string{"", "0x", "0200000000020000000000000000000", "02000000000200000000000000000000a",
		"0x0200000000020000000000000000000g", "0000:00ff:fe00", "0000:00ff:fe00:0001:0002", "0000::fe00:0001",
		"00000:00ff:fe00:0001", "000g:00ff:fe00:0001", "0x0000:00ff:fe00:0001", "+000:00ff:fe00:0001"} {
		if _, err := ParsePortID(in); err == nil {
			t.Errorf("%q parsed", in)
		} else if _, ok := err.(*DecodeError); !ok {
			t.Errorf("%q: %T", in, err)
		}
	}
	// The length error counts what was given, not hex digits.
	if _, err := ParsePortID("0002c903000102030002c90300010203 "); err == nil ||
		!strings.Contains(err.Error(), "got 33 characters") {
		t.Errorf("trailing space: %v", err)
	}
	p := NewPortID(0x0011223344556677, 0x8899aabbccddeeff)
	if p.String() != "00112233445566778899aabbccddeeff" {
		t.Fatal(p.String())
	}
	if FormatGUID(0x000000fffe000001) != "0000:00ff:fe00:0001" {
		t.Fatal(FormatGUID(0x000000fffe000001))
	}
	if TargetName(0x000000fffe000001) != "SRP.T10:000000FFFE000001" {
		t.Fatal(TargetName(1))
	}
	j, _ := json.Marshal(struct{ P PortID }{p})
	if string(j) != `{"P":"00112233445566778899aabbccddeeff"}` {
		t.Fatal(string(j))
	}
	var back struct{ P PortID }
	if err := json.Unmarshal(j, &back); err != nil || back.P != p {
		t.Fatal(err, back.P)
	}
}
