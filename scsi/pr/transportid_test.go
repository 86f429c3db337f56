package pr

import (
	"bytes"
	"testing"
)

func TestSRPTransportID(t *testing.T) {
	var id [16]byte
	for i := range id {
		id[i] = byte(0xF0 + i)
	}
	want := []byte{0x04, 0, 0, 0, 0, 0, 0, 0,
		0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF}
	if got := SRPTransportID(id); !bytes.Equal(got, want) {
		t.Errorf("SRPTransportID % x", got)
	}
	if s, ok := ParseSRPTransportID(want); !ok || s != "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff" {
		t.Errorf("ParseSRPTransportID %q %v", s, ok)
	}
	for _, bad := range [][]byte{want[:23], append([]byte{0x05}, want[1:]...), append([]byte{0x44}, want[1:]...)} {
		if _, ok := ParseSRPTransportID(bad); ok {
			t.Errorf("accepted % x", bad)
		}
	}
}

func TestTransportIDLen(t *testing.T) {
	iscsi := func(format byte, add int, total int) []byte {
		b := make([]byte, total)
		b[0] = format<<6 | 0x05
		b[2], b[3] = byte(add>>8), byte(add)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want int
	}{
		{"SRP", tid(iA), 24},
		{"SRP with more after it", append(tid(iA), tid(iB)...), 24},
		{"Fibre Channel", make([]byte, 24), 24},
		{"short", tid(iA)[:23], 0},
		{"reserved format code", append([]byte{0x84}, tid(iA)[1:]...), 0},
		{"iSCSI, 20 bytes of name", iscsi(0, 20, 24), 24},
		{"iSCSI port format, 36", iscsi(1, 36, 48), 40},
		{"iSCSI, length not a multiple of 4", iscsi(0, 22, 48), 0},
		{"iSCSI, length past the buffer", iscsi(0, 60, 48), 0},
		{"iSCSI, length below 20", iscsi(0, 16, 24), 0},
	} {
		if got := transportIDLen(tc.b); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
