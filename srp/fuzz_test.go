package srp

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func addGoldenSeeds(f *testing.F) {
	for _, g := range goldens {
		f.Add(hx(f, g.hex))
	}
}

func checkDecodeErr(t *testing.T, err error) {
	var de *DecodeError
	if !errors.As(err, &de) || de.Field == "" && de.IU != "add_target" {
		t.Fatalf("error %v is not a *DecodeError naming a field", err)
	}
}

// FuzzDecode: Decode never panics; what decodes re-encodes to something that
// decodes to the same value.
func FuzzDecode(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		iu, err := Decode(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		enc, err := iu.Marshal()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", iu, err)
		}
		if len(enc) > len(b) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(b), len(enc))
		}
		iu2, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(iu, iu2) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, iu, iu2)
		}
	})
}

// FuzzCmd decodes SRP_CMD with arbitrary immediate-data offsets, reusing
// one Cmd as a target does.
func FuzzCmd(f *testing.F) {
	for _, g := range goldens {
		if g.iu.Opcode() == OpCmd {
			f.Add(hx(f, g.hex), 68)
			f.Add(hx(f, g.hex), 52)
		}
	}
	var c Cmd
	f.Fuzz(func(t *testing.T, b []byte, off int) {
		if err := c.UnmarshalImm(b, off); err != nil {
			checkDecodeErr(t, err)
			return
		}
		out, in, ol, il := c.Data()
		_, _, _, _ = out, in, ol, il
		enc, err := c.Marshal()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		// The encoder writes every field back where the decoder read it:
		// the input up to the IU's end, reserved bytes and the gap before
		// immediate data aside.
		if len(enc) > len(b) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(b), len(enc))
		}
		want := bytes.Clone(b[:len(enc)])
		clear(want[2:5])
		clear(want[16:20])
		want[28], want[30] = 0, 0
		want[31] &^= 3
		if c.DataOut.Format == DescImm {
			clear(want[c.descEnd():c.immOff()])
		}
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encode:\n got %x\nwant %x", enc, want)
		}
		var c2 Cmd
		if err := c2.UnmarshalImm(enc, c.immOff()); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(c.CDB, c2.CDB) || !bytes.Equal(c.ImmData, c2.ImmData) || c.DataOut.Format != c2.DataOut.Format ||
			len(c.DataIn.Desc) != len(c2.DataIn.Desc) || c.Tag != c2.Tag {
			t.Fatalf("re-decode differs:\n%+v\n%+v", c, c2)
		}
	})
}

// FuzzLoginReqRDMA: the 56-byte RDMA/CM form decodes, converts and
// re-encodes to the same bytes (reserved bytes aside).
func FuzzLoginReqRDMA(f *testing.F) {
	f.Add(hx(f, siwMPARequest)[24:])
	f.Add(make([]byte, 56))
	f.Fuzz(func(t *testing.T, b []byte) {
		lr, err := UnmarshalLoginRequestRDMA(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		r := LoginRequestRDMA(*lr)
		enc, _ := r.Marshal()
		want := bytes.Clone(b[:LoginReqRDMASize])
		clear(want[50:56])
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encode:\n got %x\nwant %x", enc, want)
		}
		full, _ := lr.Marshal()
		if back, err := UnmarshalLoginRequest(full); err != nil || *back != *lr {
			t.Fatalf("64-byte form: %v", err)
		}
	})
}

// FuzzTargetOptions: parsing never panics; a parsed string renders to one
// that parses to the same options.
func FuzzTargetOptions(f *testing.F) {
	f.Add("id_ext=000000fffe000001,ioc_guid=000000fffe000001,initiator_ext=fe80000000000000,dest=192.0.2.1:5555")
	f.Add("id_ext=1,ioc_guid=2,dgid=fe800000000000000002c90300001235,pkey=ffff,service_id=3,io_class=ff00,max_it_iu_size=8276")
	f.Add("id_ext=1,ioc_guid=2,dest=[fe80::1%eth0]:5,src=[::1],queue_size=0x40,max_sect=010,transport=iwarp,allow_ext_sg=1")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseTargetOptions(s)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.IU != "add_target" {
				t.Fatalf("error %v", err)
			}
			return
		}
		r := o.String()
		o2, err := ParseTargetOptions(r)
		if err != nil || !reflect.DeepEqual(o, o2) {
			t.Fatalf("%q rendered as %q: %v\n%+v\n%+v", s, r, err, o, o2)
		}
	})
}

// FuzzPortID: parsing never panics; String parses back to the same ID.
func FuzzPortID(f *testing.F) {
	f.Add("0x02000000000200000000000000000000")
	f.Add("0000:00ff:fe00:0001")
	f.Add("fe80:0000:0000:0000:0002:c903:0003:1234")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePortID(s)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if q, err := ParsePortID(p.String()); err != nil || q != p {
			t.Fatalf("%q -> %v -> %v %v", s, p, q, err)
		}
	})
}

// FuzzMAD: DM MADs and their attributes decode without panics and
// re-encode to equal values.
func FuzzMAD(f *testing.F) {
	m := DMMAD{MADHeader: MADHeader{BaseVersion: 1, MgmtClass: MgmtClassDM, ClassVersion: 1, Method: MethodGetResp, AttrID: AttrIOControllerProfile}}
	p := SRPTIOControllerProfile(0x1234)
	m.SetAttr(&p)
	f.Add(m.Marshal())
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := UnmarshalDMMAD(b); err != nil {
			checkDecodeErr(t, err)
		} else {
			want := bytes.Clone(b[:MADSize])
			clear(want[18:20]) // reserved in the common header
			clear(want[MADHeaderSize:DMDataOffset])
			if got := m.Marshal(); !bytes.Equal(got, want) {
				t.Fatalf("MAD re-encode:\n got %x\nwant %x", got, want)
			}
		}
		var cpi, cpi2 ClassPortInfo
		if cpi.Unmarshal(b) == nil {
			if err := cpi2.Unmarshal(cpi.AppendTo(nil)); err != nil || cpi != cpi2 {
				t.Fatal("ClassPortInfo")
			}
		}
		var u, u2 IOUnitInfo
		if u.Unmarshal(b) == nil {
			if err := u2.Unmarshal(u.AppendTo(nil)); err != nil || u != u2 {
				t.Fatal("IOUnitInfo")
			}
		}
		var p, p2 IOControllerProfile
		if p.Unmarshal(b) == nil {
			if err := p2.Unmarshal(p.AppendTo(nil)); err != nil || p != p2 {
				t.Fatal("IOControllerProfile")
			}
		}
		var s, s2 ServiceEntries
		if s.Unmarshal(b) == nil {
			if err := s2.Unmarshal(s.AppendTo(nil)); err != nil || s != s2 {
				t.Fatal("ServiceEntries")
			}
		}
	})
}
