package hostile

import (
	"encoding/binary"
	"testing"

	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/target"
)

// TestMultiChannelLimit: MULTI logins of one I_T nexus beyond MaxChannels
// get LOGIN_REJ 0x10006 (RDMA channel limit reached for this initiator,
// T10 SRP r16a §6.4 table 11).
func TestMultiChannelLimit(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: target.Config{RQSize: 16, MaxChannels: 2}})
	id := srp.NewPortID(0x3333, 0x4444)
	multi := func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = id; l.ReqFlags = srp.MultiChanMulti }
	for i := 0; i < 2; i++ {
		p := dialRaw(t, tg.addr)
		if rej, pd := p.login(loginPD(multi), false); rej {
			t.Fatalf("MULTI login %d rejected: % x", i, pd)
		}
	}
	p := dialRaw(t, tg.addr)
	rej, pd := p.login(loginPD(multi), false)
	if !rej {
		t.Fatal("third MULTI login accepted with MaxChannels 2")
	}
	if got := srp.RejectReason(binary.BigEndian.Uint32(pd[4:])); got != srp.RejChannelLimitReached {
		t.Fatalf("reason %v, want %v", got, srp.RejChannelLimitReached)
	}
}

// TestLUNNotSupported: a command to a LUN the target does not have gets
// CHECK CONDITION, ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED (05/25/00;
// SPC-4 §4.5.6), whatever the LUN field holds.
func TestLUNNotSupported(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	for i, lun := range []uint64{0x0001000000000000, 0x4fff000000000000, 0xffffffffffffffff, 0xc101000000000000} {
		tag := uint64(10 + i)
		p.send(cmdIU(tag, lun, []byte{0x00}, fmtNone, fmtNone, 0, 0, 0, nil))
		expectSense(t, p.expectRsp(t, tag), 5, 0x25, 0)
	}
}

// TestIUFormFirstIUNotLogin: on a connection accepted without private data
// the first IU must be SRP_LOGIN_REQ (64 bytes); anything else gets
// SRP_LOGIN_REJ 0x10000 in a SEND and the connection closes.
func TestIUFormFirstIUNotLogin(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	short, _ := (&srp.LoginRequest{Tag: 5, ReqITIULen: 8260, TargetPortID: srp.NewPortID(guid, guid)}).Marshal()
	for _, c := range []struct {
		name string
		iu   []byte
		tag  uint64
	}{
		{"srp-cmd", tur(0x77), 0x77},
		{"short-login", short[:56], 5},
		{"empty", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := iuFormIdle(t, tg.addr)
			if p == nil {
				t.Fatal("IU-form connection refused")
			}
			p.send(c.iu)
			iu, err := p.recvIU()
			if err != nil {
				t.Fatalf("no SRP_LOGIN_REJ: %v", err)
			}
			if len(iu) < srp.LoginRejSize || srp.Opcode(iu[0]) != srp.OpLoginRej {
				t.Fatalf("answer % x, want SRP_LOGIN_REJ", iu)
			}
			if got := srp.RejectReason(binary.BigEndian.Uint32(iu[4:])); got != srp.RejUnableEstablishChannel {
				t.Errorf("reason %v, want %v", got, srp.RejUnableEstablishChannel)
			}
			if got := binary.BigEndian.Uint64(iu[8:]); got != c.tag {
				t.Errorf("tag %#x, want %#x", got, c.tag)
			}
			p.expectEOF()
		})
	}
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}
