package hostile

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// iuFormIdle opens an MPA connection without private data (the SRP login
// is to come as the first IU) and returns it once the target accepted it,
// or nil when the target refused it.
func iuFormIdle(t *testing.T, addr string) *rawPeer {
	t.Helper()
	p := dialRaw(t, addr)
	p.nc.SetDeadline(time.Now().Add(60 * time.Second))
	p.write(mpaFrame(keyReq, flagH, 2, irdOrd(16, 16)))
	flags, _, _, err := p.mpaReply()
	if err != nil {
		t.Fatal(err)
	}
	if flags&flagR != 0 {
		p.nc.Close()
		return nil
	}
	return p
}

// TestIUFormLoginNeverSent: a connection accepted without private data
// whose login IU never comes must not hold its channel (a receive ring of
// 2*RQSize+4 buffers, a place under MaxTotalChannels) forever: the peer
// needs no ACL to open it. The target must close it once
// Config.LoginTimeout (here 1 s) passes, so that an admitted initiator
// gets its place.
func TestIUFormLoginNeverSent(t *testing.T) {
	cfg := targetCfgSmall(3)
	cfg.LoginTimeout = time.Second
	tg := startTarget(t, tgtOpts{port: cfg, aclOnly: true})
	var idle []*rawPeer
	for i := 0; i < 3; i++ {
		idle = append(idle, iuFormIdle(t, tg.addr))
	}
	if idle[0] == nil || idle[1] == nil || idle[2] == nil {
		t.Fatal("IU-form connection refused")
	}
	for _, p := range idle {
		p.nc.SetDeadline(time.Now().Add(30 * time.Second))
		p.expectEOF()
	}
	tg.wellBehavedRetry(t, true)
}

// TestIUFormLoginNeverSentOne is TestIUFormLoginNeverSent with one idle
// connection and the default port limits.
func TestIUFormLoginNeverSentOne(t *testing.T) {
	cfg := targetCfgSmall(0)
	cfg.LoginTimeout = time.Second
	tg := startTarget(t, tgtOpts{port: cfg, aclOnly: true})
	p := iuFormIdle(t, tg.addr)
	if p == nil {
		t.Fatal("IU-form connection refused")
	}
	p.nc.SetDeadline(time.Now().Add(30 * time.Second))
	p.expectEOF()
	tg.wellBehaved(t)
}

// TestMaxTotalChannelsWithIUForm: MaxTotalChannels bounds every channel
// the port holds, "counting ... connections whose IU-form login has not
// arrived yet" (target.Config): with the port full of IU-form connections,
// a login in the private data is refused with LOGIN_REJ 0x10001.
func TestMaxTotalChannelsWithIUForm(t *testing.T) {
	const max = 3
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(max)})
	held := 0
	for i := 0; i < max; i++ {
		if iuFormIdle(t, tg.addr) != nil {
			held++
		}
	}
	for i := 0; i < max; i++ {
		p := dialRaw(t, tg.addr)
		rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = srp.NewPortID(uint64(i+1), 0xabc) }), false)
		if !rej {
			held++
		} else if len(pd) < srp.LoginRejSize || srp.RejectReason(be32(pd[4:])) != srp.RejInsufficientResources {
			t.Errorf("login %d rejected with % x, want LOGIN_REJ 0x10001", i, pd)
		}
	}
	if held > max {
		t.Fatalf("the port accepted %d channels at once, MaxTotalChannels %d", held, max)
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
