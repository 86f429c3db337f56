package hostile

import (
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// TestSendSegments: a Send cut into DDP segments (RFC 5041 §5.3) whose
// continuation breaks the rules: MO not where the message stands (1/2/4),
// another MSN while the message is incomplete (1/2/3), MO running the
// message past the receive buffer (1/2/5). A correctly segmented Send is
// served.
func TestSendSegments(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	iu := tur(0x5e9)
	cases := []struct {
		name             string
		second           []byte
		layer, typ, code byte
	}{
		{"mo-behind", append(untagged(true, 3, 0, 0, 1, 8), iu[16:]...), 1, 2, 0x04},
		{"mo-ahead", append(untagged(true, 3, 0, 0, 1, 20), iu[16:]...), 1, 2, 0x04},
		{"msn-changes", append(untagged(true, 3, 0, 0, 2, 16), iu[16:]...), 1, 2, 0x03},
		{"past-buffer", append(untagged(true, 3, 0, 0, 1, 16), make([]byte, 9000)...), 1, 2, 0x05},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := dialRaw(t, tg.addr)
			p.mustLogin(false)
			p.write(p.fpdu(append(untagged(false, 3, 0, 0, 1, 0), iu[:16]...)))
			p.write(p.fpdu(c.second))
			p.expectTerminate(c.layer, c.typ, c.code)
		})
	}
	t.Run("well-formed", func(t *testing.T) {
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		for off := 0; off < len(iu); off += 8 {
			last := off+8 >= len(iu)
			p.write(p.fpdu(append(untagged(last, 3, 0, 0, 1, uint32(off)), iu[off:min(off+8, len(iu))]...)))
		}
		p.expectRsp(t, 0x5e9)
	})
	tg.waitSessions(t, 0) // every peer closed with its subtest
}

// TestMPARevision1: a revision 1 request (RFC 5044, no IRD/ORD word)
// carrying the login is answered with a revision 1 reply carrying the
// SRP_LOGIN_RSP, and the channel serves.
func TestMPARevision1(t *testing.T) {
	tg := startTarget(t, tgtOpts{})
	for _, crc := range []bool{false, true} {
		p := dialRaw(t, tg.addr)
		var fl byte
		if crc {
			fl = flagC
		}
		p.write(mpaFrame(keyReq, fl, 1, loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = p.id })))
		flags, rev, pd, err := p.mpaReply()
		if err != nil {
			t.Fatal(err)
		}
		if rev != 1 || flags&(flagR|flagH|flagM) != 0 {
			t.Fatalf("reply revision %d flags %#x, want revision 1 accepting without H or M", rev, flags)
		}
		if crc && flags&flagC == 0 {
			t.Fatalf("reply flags %#x: C not set though the request asked for CRC", flags)
		}
		p.crc = crc
		if _, err := srp.UnmarshalLoginResponse(pd); err != nil {
			t.Fatalf("reply private data: %v", err)
		}
		p.send(tur(1))
		p.expectRsp(t, 1)
		p.nc.Close()
	}
	tg.waitSessions(t, 0)
}
