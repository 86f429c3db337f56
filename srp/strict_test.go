package srp

import (
	"bytes"
	"errors"
	"testing"
)

func goldenBytes(t testing.TB, name string) []byte {
	t.Helper()
	for _, g := range goldens {
		if g.name == name {
			return hx(t, g.hex)
		}
	}
	t.Fatalf("no golden %q", name)
	return nil
}

// wantErr checks err is a *DecodeError naming field and matching kind.
func wantErr(t *testing.T, err error, field string, kind error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a *DecodeError on %s", err, field)
	}
	if de.Field != field || !errors.Is(err, kind) {
		t.Fatalf("got %v (field %q), want field %q, %v", err, de.Field, field, kind)
	}
}

func mutate(b []byte, f func([]byte)) []byte {
	c := bytes.Clone(b)
	f(c)
	return c
}

func TestCmdStrict(t *testing.T) {
	none := goldenBytes(t, "cmd_none")
	direct := goldenBytes(t, "cmd_direct_in")
	ind := goldenBytes(t, "cmd_indirect_out")
	ext := goldenBytes(t, "cmd_indirect_in_external")
	imm := goldenBytes(t, "cmd_imm")
	cases := []struct {
		name  string
		b     []byte
		field string
		kind  error
	}{
		{"none with data-out count", mutate(none, func(b []byte) { b[6] = 1 }), "data_out_desc_cnt", ErrInvalid},
		{"none with data-in count", mutate(none, func(b []byte) { b[7] = 2 }), "data_in_desc_cnt", ErrInvalid},
		{"direct count 2", mutate(direct, func(b []byte) { b[7] = 2 }), "data_in_desc_cnt", ErrInvalid},
		{"direct short", direct[:63], "data_in srp_direct_buf", ErrTruncated},
		{"format 4 out", mutate(none, func(b []byte) { b[5] = 0x40 }), "buf_fmt", ErrInvalid},
		{"format 15 in", mutate(none, func(b []byte) { b[5] = 0x0f }), "buf_fmt", ErrInvalid},
		{"imm in data-in", mutate(none, func(b []byte) { b[5] = 0x03 }), "buf_fmt", ErrInvalid},
		{"indirect count above table", mutate(ind, func(b []byte) { b[6] = 3 }), "data_out_desc_cnt", ErrInvalid},
		{"indirect table len not multiple of 16", mutate(ind, func(b []byte) { b[48+15] = 0x21 }), "table_desc.len", ErrInvalid},
		{"indirect total mismatch", mutate(ind, func(b []byte) { b[48+19] = 1 }), "len", ErrInvalid},
		{"indirect list short", ind[:len(ind)-1], "desc_list", ErrTruncated},
		{"indirect header short", ind[:48+19], "data_out srp_indirect_buf", ErrTruncated},
		{"external list short", ext[:len(ext)-16], "desc_list", ErrTruncated},
		{"imm count 2", mutate(imm, func(b []byte) { b[6] = 2 }), "data_out_desc_cnt", ErrInvalid},
		{"imm data short", imm[:len(imm)-1], "imm_buf.len", ErrTruncated},
		{"imm len huge", mutate(imm, func(b []byte) { copy(b[48:], []byte{0xff, 0xff, 0xff, 0xff}) }), "imm_buf.len", ErrTruncated},
		{"imm buf short", imm[:50], "imm_buf", ErrTruncated},
		{"add cdb short", mutate(none, func(b []byte) { b[31] = 8 }), "add_cdb_len", ErrTruncated},
		{"wrong opcode", mutate(none, func(b []byte) { b[0] = 0xc1 }), "opcode", ErrInvalid},
		{"short fixed", none[:47], "cdb", ErrTruncated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := UnmarshalCmd(tc.b)
			wantErr(t, err, tc.field, tc.kind)
		})
	}
	// Immediate data at an offset inside the descriptors.
	var c Cmd
	wantErr(t, c.UnmarshalImm(imm, 50), "imm_data_offset", ErrInvalid)
	// At a larger offset than the data present.
	wantErr(t, c.UnmarshalImm(imm, 200), "imm_buf.len", ErrTruncated)
	// Negative offsets are inside the descriptors too.
	wantErr(t, c.UnmarshalImm(imm, -1), "imm_data_offset", ErrInvalid)
	// imm_data_offset is a 16-bit login field: a larger one is invalid even
	// when the buffer reaches that far (it could not be encoded back).
	wantErr(t, c.UnmarshalImm(imm, 0x10000), "imm_data_offset", ErrInvalid)
	far := append(bytes.Clone(imm[:52]), make([]byte, 0x10000-52+8)...)
	wantErr(t, c.UnmarshalImm(far, 0x10000), "imm_data_offset", ErrInvalid)
	// The low two bits of add_cdb_len are reserved and ignored.
	if _, err := UnmarshalCmd(mutate(none, func(b []byte) { b[31] = 3 })); err != nil {
		t.Fatalf("reserved add_cdb_len bits: %v", err)
	}
}

// A buffer that ends inside the fixed part of an IU names the first
// member (include/scsi/srp.h) it cuts, skipping reserved bytes unless only
// reserved bytes are missing.
func TestFixedPartTruncationNamesMember(t *testing.T) {
	cases := []struct {
		op    Opcode
		n     int
		field string
		off   int
	}{
		{OpCmd, 1, "sol_not", 1},
		{OpCmd, 3, "buf_fmt", 5},
		{OpCmd, 10, "tag", 8},
		{OpCmd, 31, "add_cdb_len", 31},
		{OpCmd, 47, "cdb", 32},
		{OpRsp, 17, "flags", 18},
		{OpRsp, 30, "sense_data_len", 28},
		{OpRsp, 35, "resp_data_len", 32},
		{OpLoginReq, 40, "initiator_port_id", 32},
		{OpLoginReq, 63, "target_port_id", 48},
		{OpLoginRsp, 30, "reserved2", 27},
		{OpLoginRej, 25, "buf_fmt", 24},
		{OpLoginRej, 30, "reserved3", 26},
		{OpTskMgmt, 29, "tsk_mgmt_func", 30},
		{OpTskMgmt, 45, "reserved5", 40},
		{OpTLogout, 6, "reason", 4},
		{OpCredReq, 7, "req_lim_delta", 4},
		{OpAerReq, 30, "sense_data_len", 28},
		{OpAerReq, 33, "reserved3", 32},
		{OpILogout, 9, "tag", 8},
		{OpCredRsp, 15, "tag", 8},
		{OpAerRsp, 2, "tag", 8},
	}
	for _, tc := range cases {
		b := make([]byte, tc.n)
		b[0] = byte(tc.op)
		_, err := Decode(b)
		wantErr(t, err, tc.field, ErrTruncated)
		var de *DecodeError
		errors.As(err, &de)
		if de.Offset != tc.off || de.IU != tc.op.String() {
			t.Errorf("%v/%d: %v at offset %d, want %d", tc.op, tc.n, err, de.Offset, tc.off)
		}
	}
	for n, field := range map[int]string{5: "tag", 10: "req_flags", 49: "imm_data_offset", 55: "reserved"} {
		_, err := UnmarshalLoginRequestRDMA(make([]byte, n))
		wantErr(t, err, field, ErrTruncated)
	}
}

func TestRspStrict(t *testing.T) {
	sense := goldenBytes(t, "rsp_sense")
	both := goldenBytes(t, "rsp_residuals")
	wantErr(t, func() error { _, err := UnmarshalRsp(sense[:len(sense)-1]); return err }(), "sense_data_len", ErrTruncated)
	wantErr(t, func() error { _, err := UnmarshalRsp(both[:38]); return err }(), "resp_data_len", ErrTruncated)
	// Lengths whose sum overflows 32 bits.
	huge := mutate(both, func(b []byte) {
		copy(b[28:], []byte{0xff, 0xff, 0xff, 0xff})
		copy(b[32:], []byte{0xff, 0xff, 0xff, 0xfe})
	})
	wantErr(t, func() error { _, err := UnmarshalRsp(huge); return err }(), "resp_data_len", ErrTruncated)
	huge2 := mutate(both, func(b []byte) { copy(b[28:], []byte{0xff, 0xff, 0xff, 0xfd}) })
	wantErr(t, func() error { _, err := UnmarshalRsp(huge2); return err }(), "sense_data_len", ErrTruncated)
	aer := goldenBytes(t, "aer_req")
	wantErr(t, func() error { _, err := UnmarshalAerReq(aer[:40]); return err }(), "sense_data_len", ErrTruncated)
	r, _ := UnmarshalRsp(goldenBytes(t, "rsp_tmf"))
	if code, ok := r.TMFCode(); !ok || code != TMFRspFailed {
		t.Fatalf("TMFCode %v %v", code, ok)
	}
}

func TestDecodeUnknownAndEmpty(t *testing.T) {
	_, err := Decode(nil)
	wantErr(t, err, "opcode", ErrTruncated)
	_, err = Decode([]byte{0x04, 0, 0, 0})
	wantErr(t, err, "opcode", ErrInvalid)
	for _, op := range allOpcodes {
		_, err := Decode([]byte{byte(op)})
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("%v: one byte: %v", op, err)
		}
	}
}

func TestCmdEncodeErrors(t *testing.T) {
	bad := []*Cmd{
		{CDB: make([]byte, 269)},
		{DataOut: DataBuf{Format: DescDirect}},
		{DataOut: DataBuf{Format: DescDirect, Count: 2, Desc: []DirectBuf{{}}}},
		{DataIn: DataBuf{Format: DescImm}},
		{DataOut: DataBuf{Format: 7}},
		{DataOut: DataBuf{Format: DescNone, Count: 1}},
		{DataOut: DataBuf{Format: DescIndirect, Desc: []DirectBuf{{}}, Table: DirectBuf{Len: 8}}},
		{DataOut: DataBuf{Format: DescImm}, DataIn: DataBuf{Format: DescDirect, Desc: []DirectBuf{{}}}, CDB: make([]byte, 20)},
		// Whole table inline (32 bytes = 2 descriptors) but len 0x1000
		// instead of the sum 0x3000: the decoder rejects such an IU.
		{DataOut: DataBuf{Format: DescIndirect, Table: DirectBuf{Len: 32}, Len: 0x1000,
			Desc: []DirectBuf{{Len: 0x1000}, {Len: 0x2000}}}},
		// imm_data_offset is a 16-bit login field.
		{DataOut: DataBuf{Format: DescImm}, ImmDataOffset: 0x10000, ImmData: []byte{1}},
		{DataOut: DataBuf{Format: DescImm}, ImmDataOffset: 1 << 62, ImmData: []byte{1}},
	}
	for i, c := range bad {
		if _, err := c.Marshal(); err == nil {
			t.Errorf("#%d: encoded %+v", i, c)
		} else if _, ok := err.(*EncodeError); !ok {
			t.Errorf("#%d: %T", i, err)
		}
	}
	// A short CDB is padded to 16 bytes, a 17-byte one to 20.
	b, err := (&Cmd{CDB: []byte{0x12, 0, 0, 0, 0x24, 0}}).Marshal()
	if err != nil || len(b) != 48 || b[32] != 0x12 || b[36] != 0x24 || b[31] != 0 {
		t.Fatalf("6-byte CDB: %v %x", err, b)
	}
	b, err = (&Cmd{CDB: make([]byte, 17)}).Marshal()
	if err != nil || len(b) != 52 || b[31] != 4 {
		t.Fatalf("17-byte CDB: %v %x", err, b)
	}
}

func TestNewTMFRsp(t *testing.T) {
	b, err := NewTMFRsp(0x10, 2, TMFRspFailed).Marshal()
	if err != nil || !bytes.Equal(b, goldenBytes(t, "rsp_tmf")) {
		t.Fatalf("%v %x", err, b)
	}
}
