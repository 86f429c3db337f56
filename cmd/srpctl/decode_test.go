package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden IUs written from the include/scsi/srp.h layouts.
const (
	// SRP_LOGIN_REQ of ib_srp over siw: req_it_iu_len 8260, buf_fmt 6,
	// flags 0x80, imm_data_offset 68.
	loginReqHex = `00000000 00000000 0000000000000000 00002044 00000000 0006 80 00 0044 0000
		02000000000200000000000000000000 000000fffe000001000000fffe000001`
	// The same request as RDMA/CM private data (srp_login_req_rdma).
	loginReqRDMAHex = `0000000000000000 0006 80 00 00002044 02000000000200000000000000000000
		000000fffe000001000000fffe000001 0044 000000000000`
	// SRP_CMD, WRITE(10) with an indirect DATA-OUT descriptor of two.
	cmdIndirectHex = `02 00 000000 20 02 00 0000000000000004 00000000 0001000000000000 00 00 00 00
		2a000000000000000800000000000000
		00000000aaaa0000 00000022 00000020 00003000
		0000000000010000 00000033 00001000 0000000000020000 00000044 00002000`
	// SRP_RSP, CHECK CONDITION with 18 bytes of sense.
	rspHex = `c1 00 0000 00000001 0000000000000009 0000 02 02 00000000 00000000 00000012 00000000
		700005000000000a0000000024000000 0000`
)

func runCmd(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := newDecodeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(bytes.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	return m
}

func TestDecodeLoginReqText(t *testing.T) {
	out, err := runCmd(t, nil, strings.Fields(loginReqHex)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SRP_LOGIN_REQ (64 bytes)", "req_it_iu_len      8260", "0x0006 (DIRECT|INDIRECT)",
		"0x80 (SINGLE, IMMED_REQUESTED)", "imm_data_offset    68", "02000000000200000000000000000000",
		"000000fffe000001000000fffe000001 (ext 000000fffe000001, GUID 0000:00ff:fe00:0001)"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestDecodeJSONKeys(t *testing.T) {
	// Colon-separated hex on stdin.
	b := unhex(t, loginReqHex)
	var colons []string
	for _, x := range b {
		colons = append(colons, hex.EncodeToString([]byte{x}))
	}
	out, err := runCmd(t, []byte(strings.Join(colons, ":")+"\n"), "--json")
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJSON(t, out)
	want := map[string]any{"iu": "SRP_LOGIN_REQ", "opcode": 0.0, "tag": 0.0, "req_it_iu_len": 8260.0, "req_buf_fmt": 6.0,
		"req_flags": 128.0, "imm_data_offset": 68.0, "initiator_port_id": "02000000000200000000000000000000",
		"target_port_id": "000000fffe000001000000fffe000001"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("extra keys: %v", m)
	}
}

func TestDecodeRDMACM(t *testing.T) {
	// Raw binary on stdin.
	out, err := runCmd(t, unhex(t, loginReqRDMAHex), "--rdma-cm", "--json")
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJSON(t, out)
	if m["iu"] != "SRP_LOGIN_REQ" || m["form"] != "srp_login_req_rdma" || m["req_it_iu_len"] != 8260.0 ||
		m["target_port_id"] != "000000fffe000001000000fffe000001" {
		t.Fatalf("%v", m)
	}
	// Without --rdma-cm the 56 bytes are not a valid SRP_LOGIN_REQ.
	if _, err := runCmd(t, unhex(t, loginReqRDMAHex)); err == nil || !strings.Contains(err.Error(), "use --rdma-cm") {
		t.Fatalf("56-byte form without --rdma-cm: %v", err)
	}
}

func TestDecodeCmdFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cmd.bin")
	if err := os.WriteFile(path, unhex(t, cmdIndirectHex), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(t, nil, "--file", path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJSON(t, out)
	if m["iu"] != "SRP_CMD" || m["buf_fmt"] != 32.0 || m["data_out_desc_cnt"] != 2.0 || m["data_in_desc_cnt"] != 0.0 ||
		m["lun"] != "0001000000000000" || m["cdb"] != "2a000000000000000800000000000000" || m["add_cdb_len"] != 0.0 ||
		m["task_attr"] != 0.0 {
		t.Fatalf("%v", m)
	}
	do := m["data_out"].(map[string]any)
	list := do["desc_list"].([]any)
	if do["format"] != "INDIRECT" || do["len"] != 12288.0 || len(list) != 2 {
		t.Fatalf("data_out %v", do)
	}
	d1 := list[1].(map[string]any)
	if d1["va"] != float64(0x20000) || d1["key"] != float64(0x44) || d1["len"] != float64(0x2000) {
		t.Fatalf("desc %v", d1)
	}
	td := do["table_desc"].(map[string]any)
	if td["va"] != float64(0xaaaa0000) || td["len"] != 32.0 {
		t.Fatalf("table_desc %v", td)
	}
	out, err = runCmd(t, nil, "--file", path)
	if err != nil || !strings.Contains(out, "SRP_CMD (100 bytes)") || !strings.Contains(out, "va 0x20000 key 0x44 len 8192") {
		t.Fatalf("%v\n%s", err, out)
	}
	// A file of hex text (xxd -p output) is hex, not a binary IU.
	hexPath := filepath.Join(t.TempDir(), "cmd.hex")
	if err := os.WriteFile(hexPath, []byte(hex.EncodeToString(unhex(t, cmdIndirectHex))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out2, err := runCmd(t, nil, "--file", hexPath)
	if err != nil || out2 != out {
		t.Fatalf("hex file: %v\n%s", err, out2)
	}
}

func TestDecodeRsp(t *testing.T) {
	out, err := runCmd(t, []byte(rspHex), "--json")
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJSON(t, out)
	if m["iu"] != "SRP_RSP" || m["flags"] != 2.0 || m["status"] != 2.0 || m["sense_data_len"] != 18.0 ||
		m["sense_data"] != "700005000000000a00000000240000000000" || m["resp_data_len"] != 0.0 {
		t.Fatalf("%v", m)
	}
	out, err = runCmd(t, []byte(rspHex))
	if err != nil || !strings.Contains(out, "0x02 (SNSVALID)") || !strings.Contains(out, "0x02 (CHECK CONDITION)") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestDecodeBadInput(t *testing.T) {
	cases := []struct {
		name  string
		stdin []byte
		args  []string
		want  string
	}{
		{"truncated indirect", nil, []string{cmdIndirectHex[:len(cmdIndirectHex)-8]}, "desc_list"},
		{"truncated sense", []byte(rspHex[:len(rspHex)-4]), nil, "sense_data_len"},
		{"unknown opcode", nil, []string{"04000000"}, "unknown IU type"},
		{"not hex", nil, []string{"xyz"}, "not hex"},
		{"odd digits", nil, []string{"c10"}, "not hex"},
		{"empty stdin", nil, nil, "empty input"},
		{"short rdma", []byte("00000000"), []string{"--rdma-cm"}, "need 56 bytes"},
		{"missing file", nil, []string{"--file", "/nonexistent/iu.bin"}, "no such file"},
		{"file and args", nil, []string{"--file", "x", "00"}, "not both"},
		// Text on stdin that is not valid hex is reported as such, not
		// decoded as binary (where 'c' would be opcode 0x63).
		{"typo on stdin", []byte("c1000000 0000000g\n"), nil, `not hex: "0000000g"`},
		{"odd digits on stdin", []byte("c10\n"), nil, "odd number of hex digits"},
		{"blank stdin", []byte(" \n\n"), nil, "empty input"},
		{"xxd dump on stdin", []byte("00000000: 4100 0000 0000 0000 0000 0000 0000 0005  A...............\n"), nil, "not hex"},
		{"bad argument named", nil, []string{"c1", "00zz"}, `not hex: "00zz"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCmd(t, tc.stdin, tc.args...)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine") {
				t.Fatalf("error %q, want one line containing %q", msg, tc.want)
			}
		})
	}
}

func TestDecodeHelpExample(t *testing.T) {
	// The first example of the help runs as shown.
	line := strings.TrimSpace(strings.SplitN(newDecodeCmd().Example, "\n", 2)[0])
	args, ok := strings.CutPrefix(line, "srpctl decode ")
	if !ok {
		t.Fatalf("example %q", line)
	}
	out, err := runCmd(t, nil, strings.Fields(args)...)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if !strings.Contains(out, "SRP_RSP (40 bytes)") || !strings.Contains(out, "resp_data          00000005") {
		t.Fatalf("%s:\n%s", line, out)
	}
}

// endless is an input that never ends, like /dev/zero.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestDecodeEndlessInput(t *testing.T) {
	defer func(n int) { maxDecodeInput = n }(maxDecodeInput)
	maxDecodeInput = 64 << 10
	cmd := newDecodeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(endless{})
	cmd.SetArgs(nil)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "input exceeds") {
		t.Fatalf("endless stdin: %v", err)
	}
	if _, err := runCmd(t, nil, "--file", "/dev/zero"); err == nil || !strings.Contains(err.Error(), "input exceeds") {
		t.Fatalf("--file /dev/zero: %v", err)
	}
}

func TestDecodeEveryGoldenIU(t *testing.T) {
	// One of each remaining IU type, hand-written.
	for name, h := range map[string]string{
		"SRP_LOGIN_RSP": "c0000000 00000080 0000000000000000 00002054 00002044 0006 80" + strings.Repeat("00", 25),
		"SRP_LOGIN_REJ": "c2000000 00010004 0000000000000001 0000000000000000 0006 000000000000",
		"SRP_I_LOGOUT":  "03000000 00000000 0000000000000002",
		"SRP_T_LOGOUT":  "80000000 00000001 0000000000000003",
		"SRP_TSK_MGMT":  "01000000 00000000 0000000000000004 00000000 0000000000000000 0000 08 00 0000000000000000 0000000000000000",
		"SRP_CRED_REQ":  "81000000 00000002 0000000000000005",
		"SRP_CRED_RSP":  "41000000 00000000 0000000000000005",
		"SRP_AER_REQ":   "82000000 00000001 0000000000000006 00000000 0000000000000000 00000002 00000000 7000",
		"SRP_AER_RSP":   "42000000 00000000 0000000000000006",
	} {
		out, err := runCmd(t, nil, "--json", h)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := decodeJSON(t, out)
		if m["iu"] != name {
			t.Fatalf("%s: %v", name, m)
		}
		if _, err := runCmd(t, nil, h); err != nil {
			t.Fatalf("%s text: %v", name, err)
		}
	}
}
