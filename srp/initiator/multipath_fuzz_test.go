package initiator

import (
	"testing"
)

// FuzzParseDeviceID: any VPD page decodes or fails without panicking, and a
// page that decodes yields designators from inside it.
func FuzzParseDeviceID(f *testing.F) {
	f.Add([]byte{0x00, 0x83, 0x00, 0x10, 0x01, 0x03, 0x00, 0x04, 1, 2, 3, 4, 0x01, 0x95, 0x00, 0x04, 0, 0, 0, 2})
	f.Add([]byte{0x00, 0x83, 0x00, 0x08, 0x61, 0x94, 0x00, 0x04, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDeviceID(b)
		if err != nil {
			return
		}
		if len(d.LU) > len(b) {
			t.Fatalf("LU designator of %d bytes from a %d-byte page", len(d.LU), len(b))
		}
	})
}

// FuzzParseRTPG: any REPORT TARGET PORT GROUPS data decodes or fails
// without panicking; decoded groups hold no more ports than the data has room
// for.
func FuzzParseRTPG(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0x0c, 0x80, 0x8f, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0x10, 0x10, 0, 0, 0, 0x80, 0x8f, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		groups, err := ParseRTPG(b)
		if err != nil {
			return
		}
		n := 0
		for _, g := range groups {
			n += 8 + 4*len(g.Ports)
		}
		if n > len(b) {
			t.Fatalf("%d bytes of descriptors decoded from %d bytes", n, len(b))
		}
	})
}

// TestParseRTPGFormats: the length-only and extended header formats
// (SPC-4 §6.37 tables 305, 306) decode to the same group, and every strict
// prefix of the data fails.
func TestParseRTPGFormats(t *testing.T) {
	plain := []byte{0, 0, 0, 0x10, 0x82, 0x8f, 0, 2, 0, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4}
	ext := append([]byte{0, 0, 0, 0x14, 0x10, 0, 0, 0}, plain[4:]...)
	for name, b := range map[string][]byte{"length only": plain, "extended": ext} {
		g, err := ParseRTPG(b)
		if err != nil || len(g) != 1 || g[0].Group != 2 || g[0].State != ALUAStandby || !g[0].Preferred || len(g[0].Ports) != 2 || g[0].Ports[1] != 4 {
			t.Fatalf("%s: %+v, %v", name, g, err)
		}
		for i := 1; i < len(b)-1; i++ {
			if g, err := ParseRTPG(b[:i]); err == nil && len(g) > 0 {
				t.Fatalf("%s: %d-byte prefix decoded to %+v", name, i, g)
			}
		}
	}
}
