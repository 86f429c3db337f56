package target

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// TestLoginAccept checks the SRP_LOGIN_RSP byte by byte against struct
// srp_login_rsp and ib_srpt's values.
func TestLoginAccept(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	want := make([]byte, 52)
	want[0] = 0xc0                           // SRP_LOGIN_RSP
	binary.BigEndian.PutUint32(want[4:], 16) // req_lim_delta = receive ring size
	binary.BigEndian.PutUint64(want[8:], 0x5a5a0001)
	binary.BigEndian.PutUint32(want[16:], 8276) // max_it_iu_len = srp_max_req_size
	binary.BigEndian.PutUint32(want[20:], 8260) // max_ti_iu_len = echo of req_it_iu_len
	binary.BigEndian.PutUint16(want[24:], 0x0006)
	want[26] = 0x80 // IMMED_SUPP, no other channel
	if !bytes.Equal(i.rsp, want) {
		t.Fatalf("LOGIN_RSP\n got % x\nwant % x", i.rsp, want)
	}
	// The channel works: TEST UNIT READY gets GOOD with req_lim_delta 1.
	i.sendIU(&srp.Cmd{Tag: 7, CDB: make([]byte, 16)})
	got := i.next()
	wantRsp := make([]byte, 36)
	wantRsp[0] = 0xc1
	binary.BigEndian.PutUint32(wantRsp[4:], 1)
	binary.BigEndian.PutUint64(wantRsp[8:], 7)
	if !bytes.Equal(got, wantRsp) {
		t.Fatalf("SRP_RSP\n got % x\nwant % x", got, wantRsp)
	}
	if n := e.core.nexus[0]; n.InitiatorPortID != "11223344556677880002c90300001234" || n.TargetPortID != "0002c90300a0b1c20002c90300a0b1c2" {
		t.Errorf("nexus %+v", n)
	}
}

func TestLoginNoImmediate(t *testing.T) {
	e := newEnv(t, nil)
	lr := defaultLogin()
	lr.ImmDataOffset = 40 // below sizeof(struct srp_cmd): no immediate data
	i := e.login(lr)
	if i.rsp[26] != 0 {
		t.Fatalf("rsp_flags %#x, want 0", i.rsp[26])
	}
	lr = defaultLogin()
	lr.ReqFlags &^= srp.LoginImmRequested
	lr.InitiatorPortID[0] ^= 1
	if i := e.login(lr); i.rsp[26] != 0 {
		t.Fatalf("rsp_flags %#x, want 0", i.rsp[26])
	}
}

func TestLoginRejects(t *testing.T) {
	other := defaultLogin()
	other.InitiatorPortID[15] ^= 0xff
	cases := []struct {
		name   string
		cfg    func(*Config)
		mod    func(*srp.LoginRequest)
		before func(e *env)
		reason uint32
	}{
		{name: "iu-too-small", mod: func(l *srp.LoginRequest) { l.ReqITIULen = 63 }, reason: 0x10002},
		{name: "iu-too-large", mod: func(l *srp.LoginRequest) { l.ReqITIULen = 8277 }, reason: 0x10002},
		{name: "disabled", before: func(e *env) { e.port.SetEnabled(false) }, reason: 0x10001},
		{name: "wrong-target-ext", mod: func(l *srp.LoginRequest) { l.TargetPortID[0] ^= 1 }, reason: 0x10003},
		{name: "wrong-target-guid", mod: func(l *srp.LoginRequest) { l.TargetPortID[15] ^= 1 }, reason: 0x10003},
		{name: "buf-fmt", mod: func(l *srp.LoginRequest) { l.ReqBufFmt |= 0x0008 }, reason: 0x10004},
		{name: "multichannel-refused", cfg: func(c *Config) { c.NoMultichannel = true },
			mod: func(l *srp.LoginRequest) { l.ReqFlags |= srp.MultiChanMulti }, reason: 0x10005},
		{name: "multichannel-reserved-action", mod: func(l *srp.LoginRequest) { l.ReqFlags |= 3 }, reason: 0x10005},
		{name: "no-acl", cfg: func(c *Config) {
			c.DemoMode = false
			m, _ := ParseInitiator("0002:c903:0000:9999")
			c.ACLs = []ACL{{Initiator: m}}
		}, reason: 0x10006},
		{name: "channel-limit", cfg: func(c *Config) { c.MaxChannels = 1 },
			before: func(e *env) { e.login(defaultLogin()) },
			mod:    func(l *srp.LoginRequest) { l.ReqFlags |= srp.MultiChanMulti }, reason: 0x10006},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			if tc.before != nil {
				tc.before(e)
			}
			lr := defaultLogin()
			lr.Tag = 0xabcdef
			if tc.mod != nil {
				tc.mod(&lr)
			}
			_, pd, err := e.dial(lr)
			if err == nil {
				t.Fatal("login accepted")
			}
			want := make([]byte, 32)
			want[0] = 0xc2
			binary.BigEndian.PutUint32(want[4:], tc.reason)
			binary.BigEndian.PutUint64(want[8:], 0xabcdef)
			binary.BigEndian.PutUint16(want[24:], 0x0006)
			if !bytes.Equal(pd, want) {
				t.Fatalf("LOGIN_REJ\n got % x\nwant % x", pd, want)
			}
		})
	}
}

func TestLoginShortPrivateData(t *testing.T) {
	e := newEnv(t, nil)
	_, pd, err := e.dialRaw(make([]byte, 40))
	if err == nil {
		t.Fatal("accepted")
	}
	if len(pd) != 32 || pd[0] != 0xc2 || binary.BigEndian.Uint32(pd[4:]) != 0x10000 {
		t.Fatalf("reject % x", pd)
	}
}

func TestACLForms(t *testing.T) {
	id := srp.NewPortID(0x1122334455667788, 0x0002c90300001234)
	for _, tc := range []struct {
		name string
		ok   bool
		str  string
	}{
		{"0002:c903:0000:1234", true, "0002:c903:0000:1234"},
		{"0002:C903:0000:1235", false, "0002:c903:0000:1235"},
		{"0x11223344556677880002c90300001234", true, "0x11223344556677880002c90300001234"},
		{"11223344556677880002c90300001234", true, "0x11223344556677880002c90300001234"},
		{"0x0002c90300001234", false, "0x00000000000000000002c90300001234"},
	} {
		m, err := ParseInitiator(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := m.Matches(id, nil); got != tc.ok {
			t.Errorf("%s matches = %v, want %v", tc.name, got, tc.ok)
		}
		if m.String() != tc.str {
			t.Errorf("%s String = %s, want %s", tc.name, m, tc.str)
		}
	}
	for _, bad := range []string{"", "0x", "123", "zz", "nonsense", "0x" + string(bytes.Repeat([]byte("ab"), 17))} {
		_, err := ParseInitiator(bad)
		if err == nil {
			t.Errorf("%q parsed", bad)
		} else if bad != "" && !strings.Contains(err.Error(), "want a port GUID") {
			t.Errorf("%q: error %q does not say which forms are accepted", bad, err)
		}
	}
}

// TestSingleMulti: a SINGLE login terminates the nexus's channels
// (rsp_flags 1) after an SRP_T_LOGOUT; a MULTI login keeps them (2).
func TestSingleMulti(t *testing.T) {
	e := newEnv(t, nil)
	a := e.login(defaultLogin())
	lr := defaultLogin()
	lr.ReqFlags |= srp.MultiChanMulti
	b := e.login(lr)
	if b.rsp[26] != 0x82 {
		t.Fatalf("MULTI rsp_flags %#x, want 0x82", b.rsp[26])
	}
	c := e.login(defaultLogin())
	if c.rsp[26] != 0x81 {
		t.Fatalf("SINGLE rsp_flags %#x, want 0x81", c.rsp[26])
	}
	for _, old := range []*ini{a, b} {
		ius := old.waitClosed()
		if len(ius) != 1 || ius[0][0] != 0x80 || binary.BigEndian.Uint32(ius[0][4:]) != 4 {
			t.Fatalf("old channel got %x, want one SRP_T_LOGOUT reason 4", ius)
		}
	}
	// The surviving channel still works.
	c.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
	if r := c.rspIU(); r.Status != 0 || r.Tag != 1 {
		t.Fatalf("rsp %+v", r)
	}
	// A different initiator gets no TERMINATED flag.
	lr = defaultLogin()
	lr.InitiatorPortID[3] ^= 0x40
	if d := e.login(lr); d.rsp[26] != 0x80 {
		t.Fatalf("new nexus rsp_flags %#x", d.rsp[26])
	}
}

// TestLoginIBCMForm: a 64-byte SRP_LOGIN_REQ in 92 bytes of private data (an
// InfiniBand CM REQ) is accepted like the RDMA/CM form.
func TestLoginIBCMForm(t *testing.T) {
	e := newEnv(t, nil)
	lr := defaultLogin()
	b, _ := lr.Marshal()
	pd := append(b, make([]byte, 28)...)
	i, rej, err := e.dialRaw(pd)
	if err != nil {
		t.Fatalf("rejected: %v % x", err, rej)
	}
	if len(i.rsp) != 52 || i.rsp[0] != 0xc0 || binary.BigEndian.Uint64(i.rsp[8:]) != lr.Tag {
		t.Fatalf("LOGIN_RSP % x", i.rsp)
	}
}
