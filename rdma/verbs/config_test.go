package verbs

import "testing"

// The names ib_srpt gives a port, from its GID index 0 (srpt_refresh_port):
// expected strings written by hand from the format ("%04x:%04x:%04x:%04x"
// of the interface ID's big-endian 16-bit words; "0x%016llx%016llx" of
// subnet prefix and interface ID).
func TestPortNames(t *testing.T) {
	p := PortInfo{Port: 1, GID0: [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x0e, 0x8a, 0xcd}}
	if got, want := p.GUIDName(), "0002:c903:000e:8acd"; got != want {
		t.Errorf("GUIDName = %q, want %q", got, want)
	}
	if got, want := p.GIDName(), "0xfe800000000000000002c903000e8acd"; got != want {
		t.Errorf("GIDName = %q, want %q", got, want)
	}
	// rxe: interface ID from the MAC 52:54:00:12:34:56 (EUI-64, U/L bit flipped)
	r := PortInfo{GID0: [16]byte{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}}
	if got, want := r.GUIDName(), "5054:00ff:fe12:3456"; got != want {
		t.Errorf("GUIDName = %q, want %q", got, want)
	}
	if got, want := r.GIDName(), "0xfe80000000000000505400fffe123456"; got != want {
		t.Errorf("GIDName = %q, want %q", got, want)
	}
	r.Port = 2
	d := DeviceInfo{Ports: []PortInfo{p, r}}
	if got, ok := d.Port(2); !ok || got.GID0 != r.GID0 {
		t.Errorf("Port(2) = %+v, %v; want the second port", got, ok)
	}
	if _, ok := d.Port(3); ok {
		t.Error("Port(3) found on a device with ports 1 and 2")
	}
}
