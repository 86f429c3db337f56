package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
	"github.com/spf13/cobra"
)

// decodeOpts are the flags of "srpctl decode".
type decodeOpts struct {
	file      string // --file: read a binary IU from this file
	json      bool   // --json: print JSON instead of text
	rdmaCM    bool   // --rdma-cm: the input is the 56-byte srp_login_req_rdma
	immOffset int    // --imm-offset: imm_data_offset for SRP_CMD with immediate data
}

func newDecodeCmd() *cobra.Command {
	var o decodeOpts
	cmd := &cobra.Command{
		Use:   "decode [HEX...]",
		Short: "decode one SRP information unit",
		Long: `Decode one SRP information unit (IU) and print its fields.

The IU comes from the arguments as hex (spaces and colons allowed, an
optional 0x prefix), from --file, or else from standard input. A file or
standard input holding printable text is read as hex, anything else as the
raw binary IU (at most 32 MiB).

Field names are the member names of the Linux structs in
include/scsi/srp.h. --json prints one JSON object with those keys, port IDs
and byte strings as lowercase hex, descriptors as lists of {va, key, len},
and "iu" naming the IU type. --rdma-cm decodes the 56-byte login request
Linux sends as RDMA/CM private data (struct srp_login_req_rdma).

Malformed input is reported in one line naming the offending field, with
exit status 1.`,
		Example: `  srpctl decode c1000000 00000002 0000000000000010 00000100 00000000 00000000 00000000 00000004 00000005
  srpctl decode --rdma-cm --json < login.bin
  xxd -p iu.bin | srpctl decode`,
		RunE: func(c *cobra.Command, args []string) error {
			in, err := decodeInput(args, o.file, c.InOrStdin())
			if err != nil {
				return fmt.Errorf("decode: %w", err)
			}
			return runDecode(c.OutOrStdout(), in, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.file, "file", "", "read the IU from `FILE` (raw binary, or hex text)")
	f.BoolVar(&o.json, "json", false, "print JSON keyed by the Linux struct member names")
	f.BoolVar(&o.rdmaCM, "rdma-cm", false, "decode the 56-byte RDMA/CM login request (srp_login_req_rdma)")
	f.IntVar(&o.immOffset, "imm-offset", srp.DefaultImmDataOffset, "imm_data_offset of SRP_CMD immediate data, in `BYTES`")
	return cmd
}

// decodeInput returns the IU bytes from the arguments, the file or stdin.
// A file or standard input that is all printable text is parsed as hex (and
// its errors reported); anything else is taken as the raw IU. A raw IU always
// holds reserved zero bytes, so it is never mistaken for text.
func decodeInput(args []string, file string, stdin io.Reader) ([]byte, error) {
	switch {
	case len(args) > 0 && file != "":
		return nil, errors.New("give hex arguments or --file, not both")
	case len(args) > 0:
		return parseHex(strings.Join(args, " "))
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return hexOrBinary(readLimited(f, file))
	}
	return hexOrBinary(readLimited(stdin, "standard input"))
}

// hexOrBinary parses raw as hex if it is printable text, else returns it.
func hexOrBinary(raw []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if len(raw) > 0 && isText(raw) {
		return parseHex(string(raw))
	}
	return raw, nil
}

// maxDecodeInput bounds the bytes decode reads from a file or standard
// input, so that /dev/zero or an endless pipe fails instead of exhausting
// memory. It is far above any IU size Linux negotiates. A variable so that
// tests can lower it.
var maxDecodeInput = 32 << 20

// readLimited reads r to the end, failing beyond maxDecodeInput bytes.
func readLimited(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(maxDecodeInput)+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxDecodeInput {
		return nil, fmt.Errorf("%s: input exceeds %d bytes", name, maxDecodeInput)
	}
	return b, nil
}

// isText reports whether b is printable ASCII and line breaks only.
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// parseHex decodes hex text with optional 0x prefixes, whitespace and
// colons between digits. The error names the first token that is not hex,
// or reports an odd number of digits or no digits at all.
func parseHex(s string) ([]byte, error) {
	var digits strings.Builder
	for _, f := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == ':'
	}) {
		h := strings.TrimPrefix(strings.TrimPrefix(f, "0x"), "0X")
		if h == "" || strings.IndexFunc(h, func(r rune) bool {
			return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F')
		}) >= 0 {
			return nil, fmt.Errorf("not hex: %q (give hex digits, spaces and colons allowed)", f)
		}
		digits.WriteString(h)
	}
	d := digits.String()
	if d == "" {
		return nil, errors.New("empty input")
	}
	if len(d)%2 != 0 {
		return nil, fmt.Errorf("not hex: odd number of hex digits (%d)", len(d))
	}
	return hex.DecodeString(d)
}

// runDecode decodes in and prints it to w.
func runDecode(w io.Writer, in []byte, o decodeOpts) error {
	if len(in) == 0 {
		return errors.New("decode: empty input")
	}
	var (
		iu   srp.IU
		used int
		err  error
	)
	switch {
	case o.rdmaCM:
		var lr *srp.LoginRequest
		lr, err = srp.UnmarshalLoginRequestRDMA(in)
		if err == nil {
			r := srp.LoginRequestRDMA(*lr)
			iu, used = &r, srp.LoginReqRDMASize
		}
	case in[0] == byte(srp.OpCmd):
		c := new(srp.Cmd)
		err = c.UnmarshalImm(in, o.immOffset)
		iu, used = c, c.Size()
	default:
		iu, err = srp.Decode(in)
		if err == nil {
			used = iu.Size()
		}
	}
	if err != nil {
		if !o.rdmaCM && len(in) == srp.LoginReqRDMASize && in[0] == byte(srp.OpLoginReq) {
			return fmt.Errorf("decode: %w (for the 56-byte RDMA/CM form use --rdma-cm)", err)
		}
		return fmt.Errorf("decode: %w", err)
	}
	fields := iuFields(iu)
	trailing := len(in) - used
	if o.json {
		return writeJSON(w, iu, fields, trailing, o.rdmaCM)
	}
	return writeText(w, iu, fields, len(in), trailing, o.rdmaCM)
}

// field is one decoded member: its Linux name, its JSON value, and its text
// rendering (with an annotation after the value where useful).
type field struct {
	key  string
	json any
	text string
	sub  []field // nested members (descriptors)
}

func num[T ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int](key string, v T, text string) field {
	if text == "" {
		text = fmt.Sprint(uint64(v))
	}
	return field{key: key, json: uint64(v), text: text}
}

func hexField(key string, b []byte) field {
	h := hex.EncodeToString(b)
	t := h
	if len(b) == 0 {
		t = "(none)"
	}
	return field{key: key, json: h, text: t}
}

func tagField(tag uint64) field { return num("tag", tag, fmt.Sprintf("%#016x", tag)) }

func lunField(lun uint64) field {
	var b [8]byte
	for i := range b {
		b[i] = byte(lun >> (56 - 8*i))
	}
	return hexField("lun", b[:])
}

func opField(op srp.Opcode) field { return num("opcode", op, fmt.Sprintf("%#02x (%v)", uint8(op), op)) }

func bufFormats(f srp.BufFormats) string {
	var s []string
	if f&srp.BufFmtDirect != 0 {
		s = append(s, "DIRECT")
	}
	if f&srp.BufFmtIndirect != 0 {
		s = append(s, "INDIRECT")
	}
	if rest := f &^ (srp.BufFmtDirect | srp.BufFmtIndirect); rest != 0 {
		s = append(s, fmt.Sprintf("%#x", uint16(rest)))
	}
	if len(s) == 0 {
		return fmt.Sprintf("0x%04x (none)", uint16(f))
	}
	return fmt.Sprintf("0x%04x (%s)", uint16(f), strings.Join(s, "|"))
}

func flagNames(v uint8, names map[uint8]string) []string {
	var s []string
	for bit := uint8(1); bit != 0; bit <<= 1 {
		if v&bit == 0 {
			continue
		}
		if n, ok := names[bit]; ok {
			s = append(s, n)
		} else {
			s = append(s, fmt.Sprintf("%#02x", bit))
		}
	}
	return s
}

func loginReqFlags(f srp.LoginReqFlags) string {
	mc := []string{"SINGLE", "MULTI", "MULTICHAN(2)", "MULTICHAN(3)"}[f&srp.MultiChanMask]
	s := append([]string{mc}, flagNames(uint8(f&^srp.MultiChanMask), map[uint8]string{
		0x10: "LOSOLNT", 0x20: "CRSOLNT", 0x40: "AESOLNT", 0x80: "IMMED_REQUESTED"})...)
	return fmt.Sprintf("%#02x (%s)", uint8(f), strings.Join(s, ", "))
}

func loginRspFlags(f srp.LoginRspFlags) string {
	mc := []string{"NO_CHAN", "TERMINATED", "MAINTAINED", "MULTICHAN(3)"}[f&3]
	s := append([]string{mc}, flagNames(uint8(f&^3), map[uint8]string{0x80: "IMMED_SUPP"})...)
	return fmt.Sprintf("%#02x (%s)", uint8(f), strings.Join(s, ", "))
}

func rspFlags(f srp.RspFlags) string {
	s := flagNames(uint8(f), map[uint8]string{1: "RSPVALID", 2: "SNSVALID", 4: "DOOVER", 8: "DOUNDER", 0x10: "DIOVER", 0x20: "DIUNDER"})
	if len(s) == 0 {
		return "0x00"
	}
	return fmt.Sprintf("%#02x (%s)", uint8(f), strings.Join(s, "|"))
}

func descList(ds []srp.DirectBuf) field {
	list := make([]any, 0, len(ds))
	f := field{key: "desc_list", text: fmt.Sprintf("%d descriptor(s)", len(ds))}
	for i, d := range ds {
		list = append(list, directJSON(d))
		f.sub = append(f.sub, field{key: fmt.Sprintf("[%d]", i), text: fmt.Sprintf("va %#x key %#x len %d", d.VA, d.Key, d.Len)})
	}
	f.json = list
	return f
}

type directJSONObj struct {
	VA  uint64 `json:"va"`
	Key uint32 `json:"key"`
	Len uint32 `json:"len"`
}

func directJSON(d srp.DirectBuf) directJSONObj { return directJSONObj{d.VA, d.Key, d.Len} }

func dataBufField(key string, d *srp.DataBuf, c *srp.Cmd) field {
	f := field{key: key, text: d.Format.String()}
	sub := []field{{key: "format", json: d.Format.String(), text: d.Format.String()}}
	switch d.Format {
	case srp.DescDirect:
		sub = append(sub, descList(d.Desc))
	case srp.DescIndirect:
		t := field{key: "table_desc", text: fmt.Sprintf("va %#x key %#x len %d", d.Table.VA, d.Table.Key, d.Table.Len),
			json: directJSON(d.Table)}
		sub = append(sub, t, num("len", d.Len, ""), descList(d.Desc))
		if d.External() {
			f.text += fmt.Sprintf(", %d of %d descriptors inline (external table)", len(d.Desc), d.Table.Len/16)
		}
	case srp.DescImm:
		sub = append(sub, num("len", d.Len, ""), num("imm_data_offset", c.ImmDataOffset, ""), hexField("imm_data", c.ImmData))
	}
	f.sub = sub[1:]
	f.json = orderedObject(sub)
	return f
}

// iuFields lists the members of iu in wire order.
func iuFields(iu srp.IU) []field {
	switch v := iu.(type) {
	case *srp.LoginRequest:
		return loginReqFields((*srp.LoginRequestRDMA)(v))
	case *srp.LoginRequestRDMA:
		return loginReqFields(v)
	case *srp.LoginResponse:
		return []field{opField(v.Opcode()), num("req_lim_delta", v.ReqLimDelta, ""), tagField(v.Tag),
			num("max_it_iu_len", v.MaxITIULen, ""), num("max_ti_iu_len", v.MaxTIIULen, ""),
			num("buf_fmt", v.BufFmt, bufFormats(v.BufFmt)), num("rsp_flags", v.RspFlags, loginRspFlags(v.RspFlags))}
	case *srp.LoginReject:
		return []field{opField(v.Opcode()), num("reason", v.Reason, fmt.Sprintf("%#08x (%v)", uint32(v.Reason), v.Reason)),
			tagField(v.Tag), num("buf_fmt", v.BufFmt, bufFormats(v.BufFmt))}
	case *srp.ILogout:
		return []field{opField(v.Opcode()), tagField(v.Tag)}
	case *srp.TLogout:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""),
			num("reason", v.Reason, fmt.Sprintf("%#x (%v)", uint32(v.Reason), v.Reason)), tagField(v.Tag)}
	case *srp.TaskMgmt:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""), tagField(v.Tag), lunField(v.LUN),
			num("tsk_mgmt_func", v.Func, fmt.Sprintf("%#02x (%v)", uint8(v.Func), v.Func)),
			num("task_tag", v.TaskTag, fmt.Sprintf("%#016x", v.TaskTag))}
	case *srp.Cmd:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""),
			num("buf_fmt", uint8(v.DataOut.Format)<<4|uint8(v.DataIn.Format),
				fmt.Sprintf("%#02x (out %v, in %v)", uint8(v.DataOut.Format)<<4|uint8(v.DataIn.Format), v.DataOut.Format, v.DataIn.Format)),
			num("data_out_desc_cnt", descCnt(&v.DataOut), ""), num("data_in_desc_cnt", descCnt(&v.DataIn), ""),
			tagField(v.Tag), lunField(v.LUN), num("task_attr", v.TaskAttr, taskAttr(v.TaskAttr)),
			num("add_cdb_len", len(v.CDB)-16, ""), hexField("cdb", v.CDB),
			dataBufField("data_out", &v.DataOut, v), dataBufField("data_in", &v.DataIn, v)}
	case *srp.Rsp:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""), num("req_lim_delta", v.ReqLimDelta, ""),
			tagField(v.Tag), num("flags", v.Flags, rspFlags(v.Flags)), num("status", v.Status, scsiStatus(v.Status)),
			num("data_out_res_cnt", v.DataOutResCnt, ""), num("data_in_res_cnt", v.DataInResCnt, ""),
			num("sense_data_len", len(v.Sense), ""), num("resp_data_len", len(v.RespData), ""),
			hexField("resp_data", v.RespData), hexField("sense_data", v.Sense)}
	case *srp.CredReq:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""), num("req_lim_delta", v.ReqLimDelta, ""), tagField(v.Tag)}
	case *srp.CredRsp:
		return []field{opField(v.Opcode()), tagField(v.Tag)}
	case *srp.AerReq:
		return []field{opField(v.Opcode()), num("sol_not", v.SolNot, ""), num("req_lim_delta", v.ReqLimDelta, ""),
			tagField(v.Tag), lunField(v.LUN), num("sense_data_len", len(v.Sense), ""), hexField("sense_data", v.Sense)}
	case *srp.AerRsp:
		return []field{opField(v.Opcode()), tagField(v.Tag)}
	}
	return nil
}

func loginReqFields(v *srp.LoginRequestRDMA) []field {
	return []field{opField(srp.OpLoginReq), tagField(v.Tag), num("req_it_iu_len", v.ReqITIULen, ""),
		num("req_buf_fmt", v.ReqBufFmt, bufFormats(v.ReqBufFmt)), num("req_flags", v.ReqFlags, loginReqFlags(v.ReqFlags)),
		num("imm_data_offset", v.ImmDataOffset, ""),
		portField("initiator_port_id", v.InitiatorPortID), portField("target_port_id", v.TargetPortID)}
}

func portField(key string, p srp.PortID) field {
	return field{key: key, json: p.String(), text: fmt.Sprintf("%v (ext %016x, GUID %s)", p, p.Ext(), srp.FormatGUID(p.GUID()))}
}

// descCnt is the count byte as it was on the wire.
func descCnt(d *srp.DataBuf) uint8 {
	if d.Format == srp.DescIndirect {
		return uint8(len(d.Desc))
	}
	return d.Count
}

func taskAttr(a srp.TaskAttr) string {
	switch a {
	case srp.TaskAttrSimple, srp.TaskAttrHeadOfQueue, srp.TaskAttrOrdered, srp.TaskAttrACA:
		return fmt.Sprintf("%d (%v)", uint8(a), a)
	}
	return fmt.Sprint(uint8(a))
}

func scsiStatus(s uint8) string {
	if n := sense.StatusName(s); !strings.HasPrefix(n, "status ") {
		return fmt.Sprintf("%#02x (%s)", s, n)
	}
	return fmt.Sprintf("%#02x", s)
}

// orderedObject is a JSON object that keeps its members in order.
type orderedObject []field

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		v, err := json.Marshal(f.json)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSON(w io.Writer, iu srp.IU, fields []field, trailing int, rdmaCM bool) error {
	obj := orderedObject{{key: "iu", json: iu.Opcode().String()}}
	if rdmaCM {
		obj = append(obj, field{key: "form", json: "srp_login_req_rdma"})
	}
	obj = append(obj, fields...)
	if trailing > 0 {
		obj = append(obj, field{key: "trailing_bytes", json: trailing})
	}
	out, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

func writeText(w io.Writer, iu srp.IU, fields []field, n, trailing int, rdmaCM bool) error {
	var b strings.Builder
	form := ""
	if rdmaCM {
		form = ", RDMA/CM form srp_login_req_rdma"
	}
	fmt.Fprintf(&b, "%v (%d bytes%s)\n", iu.Opcode(), iu.Size(), form)
	var put func(fs []field, indent string)
	put = func(fs []field, indent string) {
		for _, f := range fs {
			fmt.Fprintf(&b, "%s%-*s %s\n", indent, 20-len(indent), f.key, f.text)
			if f.sub != nil {
				put(f.sub, indent+"  ")
			}
		}
	}
	put(fields, "  ")
	if trailing > 0 {
		fmt.Fprintf(&b, "  (%d trailing bytes of %d ignored)\n", trailing, n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
