package target

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/internal/transcript"
	"github.com/gosrp/gosrp/srp"
)

// TestTranscripts replays testdata/*.txt: each line is an action of a fake
// initiator or an expectation on the next IU the target sends. Values are
// those of T10 SRP r16a / include/scsi/srp.h, written by hand.
//
//	config rq_size=N max_rsp_size=N      (first line only)
//	login [flags=0xNN] [iu_len=N] [imm_offset=N] [port=ID]  → accepted, [rsp_flags=0xNN] [req_lim=N]
//	reject reason=0xNNNNN [same keys as login]
//	cmd tag=N op=read|write|tur [lba=N] [blocks=N] [desc=direct|indirect:K|external:K|imm] [len=N] [lun=N]
//	tmf tag=N fn=0xNN [task=N] [lun=N]
//	raw HEX                               (an IU as bytes)
//	rsp tag=N [status=0xNN] [flags=0xNN] [delta=N] [dout=N] [din=N] [sense=K/ASC/ASCQ] [code=N] [len=N]
//	credreq delta=N                       (answered with SRP_CRED_RSP)
//	tlogout reason=N
//	closed                                (the connection goes down)
func TestTranscripts(t *testing.T) {
	transcript.Run(t, "testdata/*.txt", func(t *testing.T, steps []transcript.Step) {
		t.Run("rq", func(t *testing.T) { runTranscript(t, steps, false) })
		// The same transcript with receive buffers from the port's shared
		// receive queue.
		t.Run("srq", func(t *testing.T) { runTranscript(t, steps, true) })
	})
}

func kv(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return n
}

func runTranscript(t *testing.T, steps []transcript.Step, srq bool) {
	cfg := func(c *Config) { c.UseSRQ, c.SRQSize = srq, 64 }
	if len(steps) > 0 && steps[0].Fields[0] == "config" {
		m := kv(steps[0].Fields[1:])
		cfg = func(c *Config) {
			c.UseSRQ, c.SRQSize = srq, 64
			if v, ok := m["rq_size"]; ok {
				c.RQSize = int(num(t, v))
			}
			if v, ok := m["max_rsp_size"]; ok {
				c.MaxRspSize = int(num(t, v))
			}
		}
		steps = steps[1:]
	}
	e := newEnv(t, cfg)
	var i *ini
	for _, st := range steps {
		f := st.Fields
		where := st.String()
		m := kv(f[1:])
		switch f[0] {
		case "login", "reject":
			lr := defaultLogin()
			if v, ok := m["flags"]; ok {
				lr.ReqFlags = srp.LoginReqFlags(num(t, v))
			}
			if v, ok := m["iu_len"]; ok {
				lr.ReqITIULen = uint32(num(t, v))
			}
			if v, ok := m["imm_offset"]; ok {
				lr.ImmDataOffset = uint16(num(t, v))
			}
			if v, ok := m["port"]; ok {
				lr.InitiatorPortID[15] = byte(num(t, v))
			}
			in, pd, err := e.dial(lr)
			if f[0] == "reject" {
				if err == nil || binary.BigEndian.Uint32(pd[4:]) != uint32(num(t, m["reason"])) {
					t.Fatalf("%s: got % x, %v", where, pd, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v % x", where, err, pd)
			}
			if v, ok := m["rsp_flags"]; ok && uint64(in.rsp[26]) != num(t, v) {
				t.Fatalf("%s: rsp_flags %#x", where, in.rsp[26])
			}
			if v, ok := m["req_lim"]; ok && uint64(binary.BigEndian.Uint32(in.rsp[4:])) != num(t, v) {
				t.Fatalf("%s: req_lim_delta % x", where, in.rsp[4:8])
			}
			i = in
		case "cmd":
			c := srp.Cmd{Tag: num(t, m["tag"]), CDB: make([]byte, 16)}
			if v, ok := m["lun"]; ok {
				c.LUN = num(t, v) << 48
			}
			lba, blocks := uint32(0), uint16(0)
			if v, ok := m["lba"]; ok {
				lba = uint32(num(t, v))
			}
			if v, ok := m["blocks"]; ok {
				blocks = uint16(num(t, v))
			}
			length := int(blocks) * 512
			if v, ok := m["len"]; ok {
				length = int(num(t, v))
			}
			var db srp.DataBuf
			switch d := m["desc"]; {
			case d == "direct":
				_, x := i.buf(0, length)
				db = direct(x)
			case strings.HasPrefix(d, "indirect:"), strings.HasPrefix(d, "external:"):
				k := int(num(t, d[9:]))
				ds := i.split(0, length, k)
				if d[0] == 'i' {
					db = indirect(ds, k, srp.DirectBuf{Len: uint32(16 * k)})
				} else {
					db = indirect(ds, 1, i.tableAt(3<<20, ds))
				}
			case d == "imm":
				db = srp.DataBuf{Format: srp.DescImm}
				c.ImmData = make([]byte, length)
			}
			switch m["op"] {
			case "read":
				c.CDB = cdb10(0x28, lba, blocks)
				c.DataIn = db
			case "write":
				c.CDB = cdb10(0x2a, lba, blocks)
				c.DataOut = db
			case "tur":
			default:
				t.Fatalf("%s: op?", where)
			}
			i.sendIU(&c)
		case "tmf":
			tm := srp.TaskMgmt{Tag: num(t, m["tag"]), Func: srp.TMF(num(t, m["fn"]))}
			if v, ok := m["task"]; ok {
				tm.TaskTag = num(t, v)
			}
			if v, ok := m["lun"]; ok {
				tm.LUN = num(t, v) << 48
			}
			i.sendIU(&tm)
		case "raw":
			b, err := hex.DecodeString(strings.Join(f[1:], ""))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			i.send(b)
		case "rsp":
			b := i.next()
			r, err := srp.UnmarshalRsp(b)
			if err != nil {
				t.Fatalf("%s: got % x: %v", where, b, err)
			}
			check := func(key string, got uint64) {
				if v, ok := m[key]; ok && num(t, v) != got {
					t.Fatalf("%s: %s = %#x in % x", where, key, got, b)
				}
			}
			check("tag", r.Tag)
			check("status", uint64(r.Status))
			check("flags", uint64(r.Flags))
			check("delta", uint64(r.ReqLimDelta))
			check("dout", uint64(r.DataOutResCnt))
			check("din", uint64(r.DataInResCnt))
			check("len", uint64(len(b)))
			if _, ok := m["status"]; !ok && m["code"] == "" && m["sense"] == "" && r.Status != 0 {
				t.Fatalf("%s: status %#x", where, r.Status)
			}
			if v, ok := m["code"]; ok {
				code, okc := r.TMFCode()
				if !okc || uint64(code) != num(t, v) {
					t.Fatalf("%s: TMF code in % x", where, b)
				}
			}
			if v, ok := m["sense"]; ok {
				p := strings.Split(v, "/")
				if len(r.Sense) < 14 || uint64(r.Sense[2]&15) != num(t, "0x"+p[0]) || uint64(r.Sense[12]) != num(t, "0x"+p[1]) || uint64(r.Sense[13]) != num(t, "0x"+p[2]) {
					t.Fatalf("%s: sense % x", where, r.Sense)
				}
			}
		case "credreq":
			// An SRP_CRED_REQ (16 bytes, opcode 0x81, req_lim_delta at byte
			// 4); the initiator answers with an SRP_CRED_RSP of its tag.
			b := i.next()
			if len(b) != 16 || b[0] != 0x81 || uint64(binary.BigEndian.Uint32(b[4:])) != num(t, m["delta"]) {
				t.Fatalf("%s: got % x", where, b)
			}
			i.sendIU(&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])})
		case "tlogout":
			b := i.next()
			if len(b) != 16 || b[0] != 0x80 || uint64(binary.BigEndian.Uint32(b[4:])) != num(t, m["reason"]) {
				t.Fatalf("%s: got % x", where, b)
			}
		case "closed":
			if ius := i.waitClosed(); len(ius) != 0 {
				t.Fatalf("%s: IUs before close: % x", where, ius)
			}
		default:
			t.Fatalf("%s: unknown directive", where)
		}
	}
}
