package sense

import (
	"bytes"
	"testing"
)

// TestFixedGolden: INVALID FIELD IN CDB pointing at CDB byte 2 bit 5, as
// fixed format (SPC-4 §4.5.3 table 51; §4.5.2.4.2 field pointer).
func TestFixedGolden(t *testing.T) {
	d := Data{Key: KeyIllegalRequest, ASC: 0x24, SKSValid: true, SKS: FieldPointer(true, 2, 5)}
	want := []byte{0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0xCD, 0, 2}
	got := d.AppendTo(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("fixed sense\n got % x\nwant % x", got, want)
	}
	back, err := Parse(got)
	if err != nil || back != d {
		t.Fatalf("Parse: %+v, %v; want %+v", back, err, d)
	}
}

// TestDescriptorGolden: MISCOMPARE with the offset of the first mismatch in
// an information descriptor and a parameter-list field pointer (SPC-4
// §4.5.2 table 35, §4.5.2.2, §4.5.2.3).
func TestDescriptorGolden(t *testing.T) {
	d := Data{Key: KeyMiscompare, ASC: 0x1D, Descriptor: true, InfoValid: true, Info: 0x0102030405,
		SKSValid: true, SKS: FieldPointer(false, 0x0310, -1)}
	want := []byte{0x72, 0x0E, 0x1D, 0, 0, 0, 0, 20,
		0x00, 0x0A, 0x80, 0, 0, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x05,
		0x02, 0x06, 0, 0, 0x80, 0x03, 0x10, 0}
	got := d.AppendTo(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("descriptor sense\n got % x\nwant % x", got, want)
	}
	back, err := Parse(got)
	if err != nil || back != d {
		t.Fatalf("Parse: %+v, %v; want %+v", back, err, d)
	}
}

// TestFixedInfoOver32Bits: fixed format has a 4-byte INFORMATION field, so
// a larger value goes out with VALID 0.
func TestFixedInfoOver32Bits(t *testing.T) {
	d := Data{Key: KeyMediumError, ASC: 0x11, InfoValid: true, Info: 1 << 32}
	b := d.AppendTo(nil)
	if b[0] != 0x70 || !bytes.Equal(b[3:7], []byte{0, 0, 0, 0}) {
		t.Fatalf("% x", b)
	}
	d.Info = 0x12345678
	b = d.AppendTo(nil)
	if b[0] != 0xF0 || !bytes.Equal(b[3:7], []byte{0x12, 0x34, 0x56, 0x78}) {
		t.Fatalf("% x", b)
	}
}

func TestDeferred(t *testing.T) {
	for _, desc := range []bool{false, true} {
		d := Data{Key: KeyHardwareError, ASC: 0x44, Deferred: true, Descriptor: desc}
		b := d.AppendTo(nil)
		if want := map[bool]byte{false: 0x71, true: 0x73}[desc]; b[0] != want {
			t.Fatalf("response code %#x, want %#x", b[0], want)
		}
		if back, err := Parse(b); err != nil || !back.Deferred {
			t.Fatalf("%+v %v", back, err)
		}
	}
}

// TestParseTruncated: sense data cut to an allocation length keeps what it
// holds and says it is truncated; bytes that are not sense data fail.
func TestParseTruncated(t *testing.T) {
	full := (&Data{Key: KeyUnitAttention, ASC: 0x29, ASCQ: 0x03}).AppendTo(nil)
	for _, tc := range []struct {
		b                 []byte
		err               bool
		truncated         bool
		key, asc, ascq    uint8
		descriptor, valid bool
	}{
		{b: nil, err: true},
		{b: []byte{0x70, 0}, err: true},
		{b: []byte{0x7F, 0, 6, 0, 0, 0, 0, 10}, err: true},
		{b: []byte{0x72, 6, 0x29}, err: true},
		{b: full[:3], truncated: true, key: KeyUnitAttention},
		{b: full[:14], truncated: true, key: KeyUnitAttention, asc: 0x29, ascq: 0x03},
		{b: full, key: KeyUnitAttention, asc: 0x29, ascq: 0x03},
		{b: []byte{0x72, 6, 0x29, 3}, truncated: true, key: KeyUnitAttention, asc: 0x29, ascq: 3, descriptor: true},
		// A descriptor whose additional length runs past the end.
		{b: []byte{0x72, 5, 0x24, 0, 0, 0, 0, 8, 0x02, 0x06, 0, 0, 0x80}, truncated: true, key: KeyIllegalRequest, asc: 0x24, descriptor: true},
	} {
		d, err := Parse(tc.b)
		if (err != nil) != tc.err {
			t.Fatalf("% x: err %v", tc.b, err)
		}
		if tc.err {
			continue
		}
		if d.Truncated != tc.truncated || d.Key != tc.key || d.ASC != tc.asc || d.ASCQ != tc.ascq || d.Descriptor != tc.descriptor {
			t.Fatalf("% x: %+v", tc.b, d)
		}
	}
}

func TestNames(t *testing.T) {
	if StatusName(StatusReservationConflict) != "RESERVATION CONFLICT" || StatusName(0x22) != "status 0x22" {
		t.Fatal(StatusName(0x22))
	}
	if KeyName(KeyAbortedCommand) != "ABORTED COMMAND" || ASCName(0x24, 0) != "INVALID FIELD IN CDB" || ASCName(0xFF, 0xFF) != "" {
		t.Fatal("names")
	}
	d := Data{Key: KeyIllegalRequest, ASC: 0x24, InfoValid: true, Info: 0x10, Deferred: true}
	if got, want := d.String(), "ILLEGAL REQUEST (key 0x5), asc/ascq 24h/00h INVALID FIELD IN CDB, information 0x10 (deferred)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestASCName checks names against SPC-4 annex D table D.1.
func TestASCName(t *testing.T) {
	for _, c := range []struct {
		asc, ascq uint8
		want      string
	}{
		{0x0e, 0x03, "INVALID FIELD IN COMMAND INFORMATION UNIT"},
		{0x21, 0x00, "LOGICAL BLOCK ADDRESS OUT OF RANGE"},
		{0x44, 0x00, "INTERNAL TARGET FAILURE"},
		{0x2f, 0x00, "COMMANDS CLEARED BY ANOTHER INITIATOR"},
		{0x27, 0x07, "SPACE ALLOCATION FAILED WRITE PROTECT"},
		{0x7f, 0x7f, ""},
	} {
		if got := ASCName(c.asc, c.ascq); got != c.want {
			t.Errorf("ASCName(%02xh/%02xh) = %q, want %q", c.asc, c.ascq, got, c.want)
		}
	}
}

// FuzzParse: the decoder never panics, and whatever the encoder writes
// decodes back to the same Data.
func FuzzParse(f *testing.F) {
	f.Add([]byte{0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0xCD, 0, 2})
	f.Add([]byte{0x72, 5, 0x24, 0, 0, 0, 0, 8, 2, 6, 0, 0, 0xCD, 0, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		Parse(b)
		if len(b) < 8 {
			return
		}
		d := Data{Key: b[0] & 0xF, ASC: b[1], ASCQ: b[2], Descriptor: b[3]&1 != 0, Deferred: b[3]&2 != 0,
			InfoValid: b[3]&4 != 0, SKSValid: b[3]&8 != 0, SKS: [3]byte{b[4] | 0x80, b[5], b[6]}}
		if d.InfoValid {
			d.Info = uint64(b[7]) << 24
		}
		if !d.SKSValid {
			d.SKS = [3]byte{}
		}
		back, err := Parse(d.AppendTo(nil))
		if err != nil || back != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, back, err)
		}
	})
}
