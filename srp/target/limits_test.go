package target

import (
	"encoding/binary"
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// TestMaxTotalChannels: the port holds at most MaxTotalChannels channels
// over all I_T nexuses; one more login gets LOGIN_REJ 0x10001 (insufficient
// RDMA channel resources, T10 SRP r16a table 11), a SINGLE login replacing
// a channel of its own nexus still gets in, and a released channel makes
// room.
func TestMaxTotalChannels(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxTotalChannels = 2 })
	port := func(b byte) srp.LoginRequest {
		lr := defaultLogin()
		lr.InitiatorPortID[15] = b
		return lr
	}
	rejected := func(lr srp.LoginRequest) {
		t.Helper()
		_, pd, err := e.dial(lr)
		if err == nil || len(pd) < 8 || binary.BigEndian.Uint32(pd[4:]) != 0x10001 {
			t.Fatalf("want LOGIN_REJ 0x00010001, got % x, %v", pd, err)
		}
	}
	e.login(port(1))
	b := e.login(port(2))
	rejected(port(3))
	multi := port(2)
	multi.ReqFlags |= srp.MultiChanMulti
	rejected(multi)
	// The rejected nexus left no SCSI session open.
	waitFor(t, e, func() bool {
		e.core.mu.Lock()
		defer e.core.mu.Unlock()
		return e.core.opened == 3 && e.core.closed == 1
	})
	// A SINGLE login of nexus 1 replaces its channel: still two in all.
	e.login(port(1))
	// Once the replaced channel is released, an IU-form connection (login
	// as the first IU) is refused outright: the port is full.
	waitFor(t, e, func() bool { return len(e.port.Sessions()) == 2 })
	if _, pd, err := e.dialRaw(nil); err == nil || len(pd) < 8 || binary.BigEndian.Uint32(pd[4:]) != 0x10001 {
		t.Fatalf("IU-form connection: want LOGIN_REJ 0x00010001, got % x, %v", pd, err)
	}
	// I_LOGOUT of channel b frees a place once it is released.
	b.sendIU(&srp.ILogout{Tag: 9})
	b.waitClosed()
	waitFor(t, e, func() bool { return len(e.port.Sessions()) == 1 })
	e.login(port(3))
}
