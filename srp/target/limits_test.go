package target

import (
	"encoding/binary"
	"maps"
	"sync"
	"testing"
	"time"

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
	// (The port's channel set, not Sessions: a channel whose loop has not
	// started yet is not listed there but holds its place.)
	channels := func() int {
		e.port.mu.Lock()
		defer e.port.mu.Unlock()
		return len(e.port.channels)
	}
	e.login(port(1))
	// Once the replaced channel is released, an IU-form connection (login
	// as the first IU) is refused outright: the port is full.
	waitFor(t, e, func() bool { return channels() == 2 })
	if _, pd, err := e.dialRaw(nil); err == nil || len(pd) < 8 || binary.BigEndian.Uint32(pd[4:]) != 0x10001 {
		t.Fatalf("IU-form connection: want LOGIN_REJ 0x00010001, got % x, %v", pd, err)
	}
	// I_LOGOUT of channel b frees a place once it is released.
	b.sendIU(&srp.ILogout{Tag: 9})
	b.waitClosed()
	waitFor(t, e, func() bool { return channels() == 1 })
	e.login(port(3))
}

// TestSetAccessLive: SetAccess while channels run keeps the channels whose
// view is unchanged, logs out (SRP_T_LOGOUT reason 0) those that lost their
// ACL or whose mapping changed, and the next login gets the new mapping.
func TestSetAccessLive(t *testing.T) {
	idA, idB := testInitiator, testInitiator
	idB[15] ^= 0x01
	mA, _ := ParseInitiator(idA.String())
	mB, _ := ParseInitiator(idB.String())
	aclA := ACL{Initiator: mA}
	aclB := ACL{Initiator: mB, LUNs: map[uint64]uint64{0: 0}}
	e := newEnv(t, func(c *Config) { c.DemoMode = false; c.ACLs = []ACL{aclA, aclB} })
	lrA, lrB := defaultLogin(), defaultLogin()
	lrB.InitiatorPortID = idB
	a, b := e.login(lrA), e.login(lrB)
	tur := func(i *ini, tag uint64) {
		t.Helper()
		i.sendIU(&srp.Cmd{Tag: tag, CDB: make([]byte, 16)})
		checkGood(t, i.rspIU(), tag)
	}
	tur(a, 1)
	tur(b, 1)
	logout := func(i *ini) {
		t.Helper()
		ius := i.waitClosed()
		if len(ius) != 1 || len(ius[0]) != 16 || ius[0][0] != 0x80 || binary.BigEndian.Uint32(ius[0][4:]) != 0 {
			t.Fatalf("want one SRP_T_LOGOUT reason 0, got % x", ius)
		}
	}
	// B's mapping becomes read-only: B is logged out, A keeps running.
	aclB.ReadOnly = map[uint64]bool{0: true}
	e.port.SetAccess(false, []ACL{aclA, aclB})
	logout(b)
	tur(a, 2)
	waitFor(t, e, func() bool { return len(e.port.Sessions()) == 1 })
	b = e.login(lrB)
	if v := e.core.lastView(); !maps.Equal(v.LUNs, aclB.LUNs) || !maps.Equal(v.ReadOnly, aclB.ReadOnly) {
		t.Fatalf("view after the mapping became read-only: %+v", v)
	}
	// A's ACL goes: A is logged out, B keeps running.
	e.port.SetAccess(false, []ACL{aclB})
	logout(a)
	tur(b, 4)
	if _, pd, err := e.dial(lrA); err == nil || binary.BigEndian.Uint32(pd[4:]) != 0x10006 {
		t.Fatalf("login without ACL: % x %v", pd, err)
	}
	// Demo mode gives B a different view (every LUN): B is logged out too.
	e.port.SetAccess(true, nil)
	logout(b)
}

// TestSessionCounters checks each SessionInfo counter against a known
// sequence of IUs.
func TestSessionCounters(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	src, s := i.buf(0, 4096)
	fill(src, 1)
	_, d := i.buf(1<<20, 8192)
	i.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)}) // TEST UNIT READY
	checkGood(t, i.rspIU(), 1)
	i.sendIU(&srp.Cmd{Tag: 2, CDB: cdb10(0x2a, 0, 8), DataOut: direct(s)}) // 4096 bytes out
	checkGood(t, i.rspIU(), 2)
	i.sendIU(&srp.Cmd{Tag: 3, CDB: cdb10(0x28, 0, 16), DataIn: direct(d)}) // 8192 bytes in
	checkGood(t, i.rspIU(), 3)
	i.sendIU(&srp.Cmd{Tag: 4, CDB: cdb10(0xe0, 0, 0)}) // the fake core's INVALID COMMAND OPERATION CODE
	if r := i.rspIU(); r.Status != 0x02 {
		t.Fatalf("rsp %+v", r)
	}
	i.sendIU(&srp.TaskMgmt{Tag: 5, Func: srp.TMFLUNReset})
	if r := i.rspIU(); r.Tag != 5 {
		t.Fatalf("rsp %+v", r)
	}
	i.send(append([]byte{0x55}, make([]byte, 15)...)) // unexpected IU: credit back in a CRED_REQ
	if b := i.next(); b[0] != 0x81 {
		t.Fatalf("want SRP_CRED_REQ, got % x", b)
	}
	waitFor(t, e, func() bool { s := e.port.Sessions(); return len(s) == 1 && s[0].Outstanding == 0 })
	got := e.port.Sessions()[0]
	want := SessionInfo{Channel: got.Channel, InitiatorPort: got.InitiatorPort, Remote: got.Remote, State: "LIVE",
		ReqLim: 16, Immediate: true, Commands: 4, ReadBytes: 8192, WriteBytes: 4096, Errors: 1,
		CheckConditions: 1, TMFs: 1, MaxOutstanding: 1}
	// One request at a time, but a response's SEND completion may be seen
	// after the next request arrives.
	if got.MaxOutstanding == 2 {
		want.MaxOutstanding = 2
	}
	if got != want {
		t.Fatalf("counters\n got %+v\nwant %+v", got, want)
	}
}

// TestMaxTotalChannelsConcurrent: logins racing for the last places never
// overshoot MaxTotalChannels.
func TestMaxTotalChannelsConcurrent(t *testing.T) {
	const limit, tries = 3, 10
	e := newEnv(t, func(c *Config) { c.MaxTotalChannels = limit })
	type result struct {
		ok     bool
		reason uint32
	}
	results := make(chan result, tries)
	for k := range tries {
		go func() {
			lr := defaultLogin()
			lr.InitiatorPortID[15] = byte(k)
			_, pd, err := e.dial(lr)
			if err != nil && len(pd) >= 8 {
				results <- result{reason: binary.BigEndian.Uint32(pd[4:])}
				return
			}
			results <- result{ok: err == nil}
		}()
	}
	accepted := 0
	for range tries {
		r := <-results
		switch {
		case r.ok:
			accepted++
		case r.reason != 0x10001:
			t.Errorf("login refused with reason %#x, want 0x10001", r.reason)
		}
	}
	if accepted != limit {
		t.Fatalf("%d logins accepted, want %d", accepted, limit)
	}
}

// TestLoginTimeout: a connection accepted without a login whose
// SRP_LOGIN_REQ IU never comes is closed after LoginTimeout (on the port's
// clock, here a manual one), releasing its rings.
func TestLoginTimeout(t *testing.T) {
	clk := &manualClock{}
	e := newEnv(t, func(c *Config) { c.LoginTimeout = 10 * time.Second; c.Clock = clk })
	i, _, err := e.dialRaw(nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, e, func() bool { return clk.pending() == 1 })
	clk.advance(10*time.Second - time.Millisecond)
	time.Sleep(20 * time.Millisecond) // time for a wrong close to show
	e.port.mu.Lock()
	n := len(e.port.channels)
	e.port.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d channels 1 ms before login_timeout, want 1", n)
	}
	clk.advance(time.Millisecond)
	if ius := i.waitClosed(); len(ius) != 0 {
		t.Fatalf("IUs before the close: % x", ius)
	}
	waitFor(t, e, func() bool {
		e.port.mu.Lock()
		defer e.port.mu.Unlock()
		return len(e.port.channels) == 0
	})
}

// TestMaxTotalChannelsIUForm: IU-form connections awaiting their login
// count against MaxTotalChannels, so a port full of them refuses a login in
// the private data; a login arriving on one of them is not refused for the
// place it already holds.
func TestMaxTotalChannelsIUForm(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxTotalChannels = 2 })
	var idle []*ini
	for range 2 {
		i, _, err := e.dialRaw(nil)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, i)
	}
	lr := defaultLogin()
	lr.InitiatorPortID[15] = 0x77
	if _, pd, err := e.dial(lr); err == nil || len(pd) < 8 || binary.BigEndian.Uint32(pd[4:]) != 0x10001 {
		t.Fatalf("want LOGIN_REJ 0x00010001, got % x, %v", pd, err)
	}
	lr = defaultLogin()
	idle[0].sendIU(&lr)
	if b := idle[0].next(); len(b) != 52 || b[0] != 0xc0 {
		t.Fatalf("IU-form login: want SRP_LOGIN_RSP, got % x", b)
	}
}

// TestNexusOutlivesPendingLogin: a login that reserved its I_T nexus keeps
// the nexus and its SCSI session alive while the nexus's last channel is
// released (a SINGLE re-login racing the old channel's teardown, as ib_srp
// reconnects); abandoning the login then drops them.
func TestNexusOutlivesPendingLogin(t *testing.T) {
	e := newEnv(t, nil)
	a := e.login(defaultLogin())
	lr := defaultLogin()
	pl, reason := e.port.prepareLogin(&lr, nil, nil, testLogger(t))
	if reason != 0 {
		t.Fatalf("prepareLogin: reason %#x", reason)
	}
	a.sendIU(&srp.ILogout{Tag: 1})
	a.waitClosed()
	waitFor(t, e, func() bool {
		e.port.mu.Lock()
		defer e.port.mu.Unlock()
		return len(e.port.channels) == 0
	})
	e.port.mu.Lock()
	kept := e.port.nexuses[pl.nx.key] == pl.nx
	e.port.mu.Unlock()
	e.core.mu.Lock()
	closed := e.core.closed
	e.core.mu.Unlock()
	if !kept || closed != 0 {
		t.Fatalf("nexus kept %v, %d SCSI sessions closed; want kept, 0", kept, closed)
	}
	e.port.abandon(pl)
	waitFor(t, e, func() bool {
		e.core.mu.Lock()
		defer e.core.mu.Unlock()
		return e.core.closed == 1
	})
}

// manualClock is a Clock whose time moves only by advance; a timer's
// function runs (in its own goroutine, as time.AfterFunc) once the time
// reaches it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*manualTimer
}

type manualTimer struct {
	c    *manualClock
	at   time.Duration
	f    func()
	done bool
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now + d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// pending counts the timers not fired or stopped.
func (c *manualClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// advance moves the time by d and fires the timers that are due.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	var due []func()
	for _, t := range c.timers {
		if !t.done && t.at <= c.now {
			t.done = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}
