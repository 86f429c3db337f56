package scsi_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi"
)

// wantWP is fixed-format sense DATA PROTECT (7), WRITE PROTECTED (27h/00h):
// response code 70h, sense key in byte 2, additional sense length 10 in
// byte 7, ASC/ASCQ in bytes 12/13 (SPC-4 §4.5.3, table 27).
var wantWP = []byte{0x70, 0, 0x07, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x27, 0x00, 0, 0, 0, 0}

// TestViewReadOnly maps a LUN read-only in a nexus's view: every
// medium write to the protected LUN gets 07/27/00 with nothing written,
// SYNCHRONIZE CACHE and reads succeed, MODE SENSE(6)/(10) report WP, and
// the other LUN is untouched.
func TestViewReadOnly(t *testing.T) {
	st := scsi.NewTarget(scsi.TargetConfig{})
	for n := range uint64(2) {
		lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(1 << 20), BlockSize: 512, ThinProvisioning: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AddLUN(n, lu); err != nil {
			t.Fatal(err)
		}
	}
	sess := st.OpenSession(scsi.Nexus{InitiatorPortID: "i", TargetPortID: "t", RelativeTargetPort: 1}, scsi.View{ReadOnly: map[uint64]bool{1: true, 0: false}})
	defer sess.Close()
	ctx := context.Background()
	tag := uint64(0)
	run := func(lun uint64, cdb []byte, out []byte, in int) (scsi.Result, []byte) {
		tag++
		c := &scsi.Command{Tag: tag, LUN: scsi.EncodeLUN(lun), CDB: cdb, DataOut: out, DataIn: make([]byte, in)}
		r := sess.Execute(ctx, c)
		return r, c.DataIn
	}
	for lun := range uint64(2) { // clear the power-on unit attention
		for k := 0; k < 3; k++ {
			if r, _ := run(lun, make([]byte, 6), nil, 0); r.Status == 0 {
				break
			}
		}
	}
	block := bytes.Repeat([]byte{0xa5}, 512)
	c16 := func(b ...byte) []byte { c := make([]byte, 16); copy(c, b); return c }
	c10 := func(b ...byte) []byte { c := make([]byte, 10); copy(c, b); return c }
	writes := []struct {
		name string
		cdb  []byte
		out  []byte
	}{
		{"WRITE(6)", []byte{0x0a, 0, 0, 1, 1, 0}, block},
		{"WRITE(10)", c10(0x2a, 0, 0, 0, 0, 1, 0, 0, 1), block},
		{"WRITE(12)", []byte{0xaa, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, block},
		{"WRITE(16)", c16(0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1), block},
		{"WRITE AND VERIFY(10)", c10(0x2e, 0, 0, 0, 0, 1, 0, 0, 1), block},
		{"WRITE SAME(10)", c10(0x41, 0, 0, 0, 0, 1, 0, 0, 1), block},
		{"WRITE SAME(16) NDOB", c16(0x93, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1), nil},
		{"UNMAP", c10(0x42, 0, 0, 0, 0, 0, 0, 0, 24), append([]byte{0, 22, 0, 16, 0, 0, 0, 0}, c16(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1)...)},
		{"COMPARE AND WRITE", c16(0x89, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1), append(bytes.Clone(block), block...)},
		{"FORMAT UNIT", []byte{0x04, 0, 0, 0, 0, 0}, nil},
		{"WRITE(32)", append(c16(0x7f, 0, 0, 0, 0, 0, 0, 0x18, 0, 0x0b), make([]byte, 16)...), block},
	}
	for _, w := range writes {
		r, _ := run(1, w.cdb, w.out, 0)
		if r.Status != 0x02 || !bytes.Equal(r.Sense, wantWP) {
			t.Errorf("%s to the read-only LUN: status %#x sense % x; want 02h and % x", w.name, r.Status, r.Sense, wantWP)
		}
	}
	// Nothing reached the medium: block 1 still reads zeros.
	if r, data := run(1, c10(0x28, 0, 0, 0, 0, 1, 0, 0, 1), nil, 512); r.Status != 0 || !bytes.Equal(data, make([]byte, 512)) {
		t.Fatalf("READ(10) of the read-only LUN: %+v", r)
	}
	if r, _ := run(1, c10(0x35), nil, 0); r.Status != 0 {
		t.Fatalf("SYNCHRONIZE CACHE(10) on the read-only LUN: %+v", r)
	}
	// MODE SENSE(6): device-specific parameter is header byte 2; (10): byte 3.
	if r, data := run(1, []byte{0x1a, 0, 0x3f, 0, 255, 0}, nil, 255); r.Status != 0 || data[2]&0x80 == 0 {
		t.Fatalf("MODE SENSE(6) of the read-only LUN: %+v % x", r, data[:4])
	}
	if r, data := run(1, c10(0x5a, 0, 0x3f, 0, 0, 0, 0, 1, 0), nil, 256); r.Status != 0 || data[3]&0x80 == 0 {
		t.Fatalf("MODE SENSE(10) of the read-only LUN: %+v % x", r, data[:8])
	}
	if r, data := run(0, []byte{0x1a, 0, 0x3f, 0, 255, 0}, nil, 255); r.Status != 0 || data[2]&0x80 != 0 {
		t.Fatalf("MODE SENSE(6) of the writable LUN: %+v % x", r, data[:4])
	}
	if r, _ := run(0, c10(0x2a, 0, 0, 0, 0, 1, 0, 0, 1), block, 0); r.Status != 0 {
		t.Fatalf("WRITE(10) to the writable LUN: %+v", r)
	}
}

// TestWritesMedium checks the opcode classification against SBC-3/SBC-4
// operation codes, including the service-action forms.
func TestWritesMedium(t *testing.T) {
	v32 := func(sa uint16) []byte {
		c := make([]byte, 32)
		c[0] = 0x7f
		c[7] = 0x18
		c[8], c[9] = byte(sa>>8), byte(sa)
		return c
	}
	for _, tc := range []struct {
		cdb  []byte
		want bool
	}{
		{[]byte{0x0a}, true}, {[]byte{0x2a}, true}, {[]byte{0xaa}, true}, {[]byte{0x8a}, true},
		{[]byte{0x2e}, true}, {[]byte{0xae}, true}, {[]byte{0x8e}, true},
		{[]byte{0x41}, true}, {[]byte{0x93}, true}, {[]byte{0x42}, true}, {[]byte{0x89}, true},
		{[]byte{0x04}, true}, {[]byte{0x48}, true}, {[]byte{0x8b}, true}, {[]byte{0x9c}, true},
		{[]byte{0x9f, 0x11}, true}, {[]byte{0x9f, 0x12}, true}, {[]byte{0x9f, 0x10}, false},
		{v32(0x000b), true}, {v32(0x000d), true}, {v32(0x0009), false}, {[]byte{0x7f, 0, 0}, false},
		{[]byte{0x28}, false}, {[]byte{0x35}, false}, {[]byte{0x91}, false}, {[]byte{0x15}, false},
		{[]byte{0x55}, false}, {[]byte{0x5f}, false}, {[]byte{0x1a}, false}, {[]byte{0x00}, false}, {nil, false},
	} {
		if got := scsi.WritesMedium(tc.cdb); got != tc.want {
			t.Errorf("WritesMedium(% x) = %v, want %v", tc.cdb, got, tc.want)
		}
	}
}
