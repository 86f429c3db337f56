package srp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// hx decodes hex written with spaces, newlines and | separators.
func hx(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "\n", "", "\t", "", "|", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex literal: %v", err)
	}
	return b
}

// The golden IUs below are written byte by byte from the struct layouts of
// include/scsi/srp.h (offsets in the comments), not produced by the encoder.
type golden struct {
	name string
	hex  string
	iu   IU
}

var goldens = []golden{
	{
		// ib_srp over siw (lab capture): tag 0, req_it_iu_len 8260,
		// req_buf_fmt DIRECT|INDIRECT, req_flags IMMED_REQUESTED, imm 68.
		name: "login_req_siw",
		hex: `00 000000 00000000 | 0000000000000000 | 00002044 | 00000000 |
			0006 | 80 | 00 | 0044 | 0000 |
			02000000000200000000000000000000 |
			000000fffe000001000000fffe000001`,
		iu: &LoginRequest{Tag: 0, ReqITIULen: 8260, ReqBufFmt: BufFmtDirect | BufFmtIndirect,
			ReqFlags: LoginImmRequested, ImmDataOffset: 68,
			InitiatorPortID: PortID{0x02, 0, 0, 0, 0, 0x02},
			TargetPortID:    PortID{0, 0, 0, 0xff, 0xfe, 0, 0, 1, 0, 0, 0, 0xff, 0xfe, 0, 0, 1}},
	},
	{
		name: "login_req_multi",
		hex: `00 000000 00000000 | 0102030405060708 | 00000044 | 00000000 |
			0002 | 71 | 00 | 0000 | 0000 |
			fe800000000000000002c90300001234 |
			00112233445566778899aabbccddeeff`,
		iu: &LoginRequest{Tag: 0x0102030405060708, ReqITIULen: 68, ReqBufFmt: BufFmtDirect,
			ReqFlags:        MultiChanMulti | LoginLOSOLNT | LoginCRSOLNT | LoginAESOLNT,
			InitiatorPortID: NewPortID(0xfe80000000000000, 0x0002c90300001234),
			TargetPortID:    NewPortID(0x0011223344556677, 0x8899aabbccddeeff)},
	},
	{
		// LIO ib_srpt's answer in the lab capture: req_lim_delta 128,
		// max_it_iu_len 8276, max_ti_iu_len 8260, buf_fmt 6, IMMED_SUPP.
		name: "login_rsp_siw",
		hex: `c0 000000 | 00000080 | 0000000000000000 | 00002054 | 00002044 |
			0006 | 80 | 00000000000000000000000000000000000000000000000000`,
		iu: &LoginResponse{ReqLimDelta: 128, MaxITIULen: 8276, MaxTIIULen: 8260,
			BufFmt: BufFmtDirect | BufFmtIndirect, RspFlags: LoginRspImmSupp},
	},
	{
		name: "login_rsp_2nd_channel",
		hex: `c0 000000 | 00000040 | deadbeefcafef00d | 00002054 | 00000400 |
			0004 | 82 | 00000000000000000000000000000000000000000000000000`,
		iu: &LoginResponse{ReqLimDelta: 64, Tag: 0xdeadbeefcafef00d, MaxITIULen: 8276, MaxTIIULen: 1024,
			BufFmt: BufFmtIndirect, RspFlags: LoginRspMaintained | LoginRspImmSupp},
	},
	{
		name: "login_rej",
		hex:  `c2 000000 | 00010002 | 1122334455667788 | 0000000000000000 | 0006 | 000000000000`,
		iu:   &LoginReject{Reason: RejReqITIULenTooLarge, Tag: 0x1122334455667788, BufFmt: 6},
	},
	{
		name: "i_logout",
		hex:  `03 00000000000000 | 0000000000000007`,
		iu:   &ILogout{Tag: 7},
	},
	{
		name: "t_logout",
		hex:  `80 01 0000 | 00000004 | 00000000000000ff`,
		iu:   &TLogout{SolNot: 1, Reason: TLogoutMultiChannelAction, Tag: 0xff},
	},
	{
		name: "tsk_mgmt_abort",
		hex: `01 00 000000000000 | 0000000000000010 | 00000000 | 0001000000000000 |
			0000 | 01 | 00 | 000000000000000f | 0000000000000000`,
		iu: &TaskMgmt{Tag: 0x10, LUN: 0x0001000000000000, Func: TMFAbortTask, TaskTag: 0xf},
	},
	{
		name: "tsk_mgmt_lun_reset",
		hex: `01 02 000000000000 | 0000000000000011 | 00000000 | 4003000000000000 |
			0000 | 08 | 00 | 0000000000000000 | 0000000000000000`,
		iu: &TaskMgmt{SolNot: 2, Tag: 0x11, LUN: 0x4003000000000000, Func: TMFLUNReset},
	},
	{
		// TEST UNIT READY: no descriptors.
		name: "cmd_none",
		hex: `02 00 000000 | 00 | 00 | 00 | 0000000000000001 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 00000000000000000000000000000000`,
		iu: &Cmd{Tag: 1, CDB: make([]byte, 16)},
	},
	{
		// READ(10), direct DATA-IN, count 0 as ib_srp sends it.
		name: "cmd_direct_in",
		hex: `02 00 000000 | 01 | 00 | 00 | 0000000000000002 | 00000000 | 0000000000000000 |
			00 | 02 | 00 | 00 | 28000000001000000800000000000000 |
			00007f0012340000 | 00abcdef | 00001000`,
		iu: &Cmd{Tag: 2, TaskAttr: TaskAttrOrdered, CDB: hxs("28000000001000000800000000000000"),
			DataIn: DataBuf{Format: DescDirect, Desc: []DirectBuf{{VA: 0x7f0012340000, Key: 0xabcdef, Len: 4096}}}},
	},
	{
		// WRITE(10), direct DATA-OUT with count 1 (T10 style).
		name: "cmd_direct_out_count1",
		hex: `02 00 000000 | 10 | 01 | 00 | 0000000000000003 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 2a000000002000000100000000000000 |
			0000000000001000 | 00000011 | 00000200`,
		iu: &Cmd{Tag: 3, CDB: hxs("2a000000002000000100000000000000"),
			DataOut: DataBuf{Format: DescDirect, Count: 1, Desc: []DirectBuf{{VA: 0x1000, Key: 0x11, Len: 512}}}},
	},
	{
		// Indirect DATA-OUT, whole table inline: 2 descriptors, table 32
		// bytes, total 0x3000.
		name: "cmd_indirect_out",
		hex: `02 00 000000 | 20 | 02 | 00 | 0000000000000004 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 8a000000000000000000000000180000 |
			00000000aaaa0000 | 00000022 | 00000020 | 00003000 |
			0000000000010000 | 00000033 | 00001000 |
			0000000000020000 | 00000044 | 00002000`,
		iu: &Cmd{Tag: 4, CDB: hxs("8a000000000000000000000000180000"),
			DataOut: DataBuf{Format: DescIndirect, Count: 2, Table: DirectBuf{VA: 0xaaaa0000, Key: 0x22, Len: 32}, Len: 0x3000,
				Desc: []DirectBuf{{VA: 0x10000, Key: 0x33, Len: 0x1000}, {VA: 0x20000, Key: 0x44, Len: 0x2000}}}},
	},
	{
		// Indirect DATA-IN with an external table: 1 inline of 3.
		name: "cmd_indirect_in_external",
		hex: `02 00 000000 | 02 | 00 | 01 | 0000000000000005 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 88000000000000000000000000000030 |
			00000000bbbb0000 | 00000055 | 00000030 | 00006000 |
			0000000000030000 | 00000066 | 00002000`,
		iu: &Cmd{Tag: 5, CDB: hxs("88000000000000000000000000000030"),
			DataIn: DataBuf{Format: DescIndirect, Count: 1, Table: DirectBuf{VA: 0xbbbb0000, Key: 0x55, Len: 48}, Len: 0x6000,
				Desc: []DirectBuf{{VA: 0x30000, Key: 0x66, Len: 0x2000}}}},
	},
	{
		// SRP-2 immediate DATA-OUT: srp_imm_buf at 48, data at 68.
		name: "cmd_imm",
		hex: `02 00 000000 | 30 | 00 | 00 | 0000000000000006 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 2a000000000000000100000000000000 |
			00000008 | 00000000000000000000000000000000 |
			0102030405060708`,
		iu: &Cmd{Tag: 6, CDB: hxs("2a000000000000000100000000000000"),
			DataOut: DataBuf{Format: DescImm, Len: 8}, ImmDataOffset: 68, ImmData: hxs("0102030405060708")},
	},
	{
		// Additional CDB bytes (add_cdb_len 4), then a direct DATA-IN
		// descriptor at 52.
		name: "cmd_add_cdb",
		hex: `02 00 000000 | 01 | 00 | 00 | 0000000000000007 | 00000000 | 0000000000000000 |
			00 | 01 | 00 | 04 | 7f000000000000000000000000000000 | 00000200 |
			0000000000004000 | 00000077 | 00000200`,
		iu: &Cmd{Tag: 7, TaskAttr: TaskAttrHeadOfQueue, CDB: hxs("7f00000000000000000000000000000000000200"),
			DataIn: DataBuf{Format: DescDirect, Desc: []DirectBuf{{VA: 0x4000, Key: 0x77, Len: 0x200}}}},
	},
	{
		// Bidirectional: direct DATA-OUT then indirect DATA-IN.
		name: "cmd_bidi",
		hex: `02 04 000000 | 12 | 00 | 01 | 0000000000000008 | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 53000000000000000100000000000000 |
			0000000000005000 | 00000088 | 00000200 |
			0000000000006000 | 00000099 | 00000010 | 00000400 |
			0000000000007000 | 000000aa | 00000400`,
		iu: &Cmd{SolNot: 4, Tag: 8, CDB: hxs("53000000000000000100000000000000"),
			DataOut: DataBuf{Format: DescDirect, Desc: []DirectBuf{{VA: 0x5000, Key: 0x88, Len: 0x200}}},
			DataIn: DataBuf{Format: DescIndirect, Count: 1, Table: DirectBuf{VA: 0x6000, Key: 0x99, Len: 16}, Len: 0x400,
				Desc: []DirectBuf{{VA: 0x7000, Key: 0xaa, Len: 0x400}}}},
	},
	{
		// ib_srp's largest immediate-data layout: 16 additional CDB bytes
		// (add_cdb_len 0x10), srp_imm_buf at 64, data at 68 = 48 + 16 + 4.
		name: "cmd_imm_add_cdb",
		hex: `02 00 000000 | 30 | 00 | 00 | 0000000000000009 | 00000000 | 0003000000000000 |
			00 | 00 | 00 | 10 | 7f000000000000180009000000000000 | 00000000000000100000000000000001 |
			00000004 | cafef00d`,
		iu: &Cmd{Tag: 9, LUN: 0x0003000000000000,
			CDB:     hxs("7f00000000000018000900000000000000000000000000100000000000000001"),
			DataOut: DataBuf{Format: DescImm, Len: 4}, ImmDataOffset: 68, ImmData: hxs("cafef00d")},
	},
	{
		// Indirect DATA-OUT with an external table: 1 of 3 descriptors
		// inline (table_desc.len 48), data_out_desc_cnt 1.
		name: "cmd_indirect_out_external",
		hex: `02 00 000000 | 20 | 01 | 00 | 000000000000000a | 00000000 | 0000000000000000 |
			00 | 00 | 00 | 00 | 2a000000000000001800000000000000 |
			00000000cccc0000 | 000000bb | 00000030 | 00003000 |
			0000000000040000 | 000000dd | 00001000`,
		iu: &Cmd{Tag: 10, CDB: hxs("2a000000000000001800000000000000"),
			DataOut: DataBuf{Format: DescIndirect, Count: 1, Table: DirectBuf{VA: 0xcccc0000, Key: 0xbb, Len: 48}, Len: 0x3000,
				Desc: []DirectBuf{{VA: 0x40000, Key: 0xdd, Len: 0x1000}}}},
	},
	{
		// CHECK CONDITION with 18 bytes of fixed-format sense (ILLEGAL
		// REQUEST, 24h/00h).
		name: "rsp_sense",
		hex: `c1 00 0000 | 00000001 | 0000000000000009 | 0000 | 02 | 02 | 00000000 | 00000000 |
			00000012 | 00000000 | 700005000000000a0000000024000000 0000`,
		iu: &Rsp{ReqLimDelta: 1, Tag: 9, Flags: SnsValid, Status: 2,
			Sense: hxs("700005000000000a00000000240000000000")},
	},
	{
		// TMF response: RSPVALID, 4 bytes, TASK MANAGEMENT FUNCTION FAILED.
		name: "rsp_tmf",
		hex: `c1 00 0000 | 00000002 | 0000000000000010 | 0000 | 01 | 00 | 00000000 | 00000000 |
			00000000 | 00000004 | 00000005`,
		iu: &Rsp{ReqLimDelta: 2, Tag: 0x10, Flags: RspValid, RespData: []byte{0, 0, 0, 5}},
	},
	{
		// Underflow on data-in and overflow on data-out, with response and
		// sense data: response data comes first.
		name: "rsp_residuals",
		hex: `c1 02 0000 | 00000000 | 000000000000000a | 0000 | 27 | 02 | 00000100 | 00000200 |
			00000002 | 00000004 | 00000000 | 7000`,
		iu: &Rsp{SolNot: 2, Tag: 0xa, Flags: RspValid | SnsValid | DataOutOver | DataInUnder, Status: 2,
			DataOutResCnt: 0x100, DataInResCnt: 0x200, RespData: []byte{0, 0, 0, 0}, Sense: []byte{0x70, 0}},
	},
	{
		name: "cred_req",
		hex:  `81 01 0000 | 00000005 | 000000000000000b`,
		iu:   &CredReq{SolNot: 1, ReqLimDelta: 5, Tag: 0xb},
	},
	{
		name: "cred_rsp",
		hex:  `41 00000000000000 | 000000000000000b`,
		iu:   &CredRsp{Tag: 0xb},
	},
	{
		name: "aer_req",
		hex: `82 00 0000 | 00000003 | 000000000000000c | 00000000 | 0002000000000000 |
			00000012 | 00000000 | 700006000000000a0000000029000000 0000`,
		iu: &AerReq{ReqLimDelta: 3, Tag: 0xc, LUN: 0x0002000000000000,
			Sense: hxs("700006000000000a00000000290000000000")},
	},
	{
		name: "aer_rsp",
		hex:  `42 00000000000000 | 000000000000000c`,
		iu:   &AerRsp{Tag: 0xc},
	},
}

func hxs(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestGoldenDecode(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			b := hx(t, g.hex)
			if len(b) != g.iu.Size() {
				t.Fatalf("golden is %d bytes, Size() says %d", len(b), g.iu.Size())
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, g.iu) {
				t.Fatalf("Decode:\n got %+v\nwant %+v", got, g.iu)
			}
		})
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			want := hx(t, g.hex)
			got, err := g.iu.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Marshal:\n got %x\nwant %x", got, want)
			}
			// AppendTo after a prefix keeps the prefix.
			got2, _ := g.iu.AppendTo([]byte{0xee})
			if got2[0] != 0xee || !bytes.Equal(got2[1:], want) {
				t.Fatalf("AppendTo did not append")
			}
			// AppendTo into reused memory full of old bytes writes every
			// byte of the IU: reserved fields and padding read zero.
			dirty := bytes.Repeat([]byte{0xa5}, len(want)+64)
			got3, _ := g.iu.AppendTo(dirty[:0])
			if !bytes.Equal(got3, want) {
				t.Fatalf("AppendTo into used memory:\n got %x\nwant %x", got3, want)
			}
		})
	}
}

// The MPA v2 Request of an ib_srp login over siw, from the lab capture:
// key, 10 02 00 3c, IRD/ORD 00 04 00 00, then srp_login_req_rdma.
const siwMPARequest = `4d504120494420526571204672616d65 | 10 02 003c | 0004 0000 |
	0000000000000000 | 0006 | 80 | 00 | 00002044 |
	02000000000200000000000000000000 |
	000000fffe000001000000fffe000001 |
	0044 | 000000000000`

func TestLoginRequestRDMAGolden(t *testing.T) {
	mpa := hx(t, siwMPARequest)
	if len(mpa) != 80 {
		t.Fatalf("MPA request is %d bytes", len(mpa))
	}
	pd := mpa[24:]
	if len(pd) != LoginReqRDMASize {
		t.Fatalf("private data is %d bytes", len(pd))
	}
	lr, err := UnmarshalLoginRequestRDMA(pd)
	if err != nil {
		t.Fatal(err)
	}
	want := goldens[0].iu.(*LoginRequest)
	if *lr != *want {
		t.Fatalf("got %+v\nwant %+v", lr, want)
	}
	if lr.InitiatorPortID.String() != "02000000000200000000000000000000" ||
		lr.TargetPortID.String() != "000000fffe000001000000fffe000001" {
		t.Fatalf("port ids %v %v", lr.InitiatorPortID, lr.TargetPortID)
	}
	r := LoginRequestRDMA(*want)
	got, _ := r.Marshal()
	if !bytes.Equal(got, pd) {
		t.Fatalf("MarshalRDMA:\n got %x\nwant %x", got, pd)
	}
	// The 64-byte form of the same request is golden login_req_siw.
	full, _ := lr.Marshal()
	if !bytes.Equal(full, hx(t, goldens[0].hex)) {
		t.Fatalf("64-byte form differs: %x", full)
	}
	// Wrong opcode at byte 11.
	bad := bytes.Clone(pd)
	bad[11] = 0xc0
	var de *DecodeError
	if _, err := UnmarshalLoginRequestRDMA(bad); !errors.As(err, &de) || de.Field != "opcode" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad opcode: %v", err)
	}
	for n := range LoginReqRDMASize {
		if _, err := UnmarshalLoginRequestRDMA(pd[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix %d: %v", n, err)
		}
	}
	// IB CM carries the 64-byte form padded to 92 bytes: extra bytes are
	// ignored.
	padded := append(hx(t, goldens[0].hex), make([]byte, 28)...)
	if _, err := UnmarshalLoginRequest(padded); err != nil {
		t.Fatal(err)
	}
}

func TestSiwLoginResponseFields(t *testing.T) {
	// MPA Reply: key, 10 02 00 38, IRD/ORD 00 04 00 04, SRP_LOGIN_RSP.
	rep := append(hx(t, "4d504120494420526570204672616d65 10020038 00040004"), hx(t, goldens[2].hex)...)
	if len(rep) != 76 {
		t.Fatalf("reply is %d bytes", len(rep))
	}
	r, err := UnmarshalLoginResponse(rep[24:])
	if err != nil {
		t.Fatal(err)
	}
	if r.ReqLimDelta != 128 || r.MaxITIULen != 8276 || r.MaxTIIULen != 8260 || r.BufFmt != 6 || r.RspFlags != 0x80 {
		t.Fatalf("%+v", r)
	}
}

func TestCmdData(t *testing.T) {
	byName := func(n string) *Cmd {
		for _, g := range goldens {
			if g.name == n {
				c, err := UnmarshalCmd(hx(t, g.hex))
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
		t.Fatalf("no golden %s", n)
		return nil
	}
	out, in, ol, il := byName("cmd_bidi").Data()
	if len(out) != 1 || out[0].VA != 0x5000 || ol != 0x200 || len(in) != 1 || in[0].Key != 0xaa || il != 0x400 {
		t.Fatalf("bidi: %v %v %d %d", out, in, ol, il)
	}
	c := byName("cmd_indirect_in_external")
	if !c.DataIn.External() || c.DataIn.TotalLen() != 0x6000 {
		t.Fatalf("external: %v %d", c.DataIn.External(), c.DataIn.TotalLen())
	}
	c = byName("cmd_indirect_out")
	if c.DataOut.External() || c.DataOut.TotalLen() != 0x3000 {
		t.Fatal("inline table reported external")
	}
	c = byName("cmd_imm")
	out, in, ol, il = c.Data()
	if out != nil || in != nil || ol != 8 || il != 0 || !bytes.Equal(c.ImmData, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("imm: %v %v %d %d", out, in, ol, il)
	}
	if len(byName("cmd_add_cdb").CDB) != 20 {
		t.Fatal("add_cdb CDB length")
	}
}

func TestOpcodeStrings(t *testing.T) {
	want := map[Opcode]string{
		0x00: "SRP_LOGIN_REQ", 0x01: "SRP_TSK_MGMT", 0x02: "SRP_CMD", 0x03: "SRP_I_LOGOUT",
		0x80: "SRP_T_LOGOUT", 0x81: "SRP_CRED_REQ", 0x82: "SRP_AER_REQ", 0x41: "SRP_CRED_RSP",
		0x42: "SRP_AER_RSP", 0xc0: "SRP_LOGIN_RSP", 0xc1: "SRP_RSP", 0xc2: "SRP_LOGIN_REJ",
		0x55: "SRP_IU(0x55)",
	}
	for op, s := range want {
		if op.String() != s {
			t.Errorf("%#x: %q want %q", uint8(op), op.String(), s)
		}
	}
	rej := map[RejectReason]string{
		0x10000: "SRP_LOGIN_REJ_UNABLE_ESTABLISH_CHANNEL",
		0x10001: "SRP_LOGIN_REJ_INSUFFICIENT_RESOURCES",
		0x10002: "SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE",
		0x10003: "SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL",
		0x10004: "SRP_LOGIN_REJ_UNSUPPORTED_DESCRIPTOR_FMT",
		0x10005: "SRP_LOGIN_REJ_MULTI_CHANNEL_UNSUPPORTED",
		0x10006: "SRP_LOGIN_REJ_CHANNEL_LIMIT_REACHED",
	}
	for r, s := range rej {
		if r.String() != s {
			t.Errorf("%#x: %q want %q", uint32(r), r.String(), s)
		}
	}
	if TMF(0x08).String() != "SRP_TSK_LUN_RESET" || TMF(0x40).String() != "SRP_TSK_CLEAR_ACA" {
		t.Error("TMF names")
	}
	if TLogoutReason(5).String() != "reserved (0x00000005)" || TLogoutReason(9).String() != "invalid data-in buffer descriptor count" {
		t.Errorf("T_LOGOUT reason names: %q %q", TLogoutReason(5), TLogoutReason(9))
	}
}
