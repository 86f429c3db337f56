package target

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// srqPosted is how many buffers the port's shared receive queue holds.
func srqPosted(e *env) int {
	e.port.mu.Lock()
	defer e.port.mu.Unlock()
	return e.port.srq.Posted()
}

// TestSRQ: with UseSRQ every channel receives through the port's one
// shared receive queue; I/O on several channels of two I_T nexuses moves
// the right bytes, every buffer goes back to the queue once the channels
// are idle, and closing a channel with IUs parked and commands in the core
// loses none. Port.Close destroys the queue and deregisters its buffers.
func TestSRQ(t *testing.T) {
	const depth = 64
	e := newEnv(t, func(c *Config) { c.UseSRQ, c.SRQSize, c.RQSize = true, depth, 8 })
	if got := srqPosted(e); got != depth {
		t.Fatalf("%d buffers posted at start, want %d", got, depth)
	}
	lr := defaultLogin()
	a := e.login(lr)
	lr.ReqFlags |= srp.MultiChanMulti
	b := e.login(lr)
	lr = defaultLogin()
	lr.InitiatorPortID[0] ^= 0x40
	c := e.login(lr)
	for k, in := range []*ini{a, b, c} {
		base := uint32(k * 512)
		src, s := in.buf(0, 64<<10)
		fill(src, byte(k+1))
		in.sendIU(&srp.Cmd{Tag: 1, CDB: cdb10(0x2a, base, 128), DataOut: direct(s)})
		checkGood(t, in.rspIU(), 1)
		// Immediate data arrives in a shared buffer.
		imm := bytes.Repeat([]byte{byte(0xc0 + k)}, 4096)
		in.sendIU(&srp.Cmd{Tag: 2, CDB: cdb10(0x2a, base+128, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: imm})
		checkGood(t, in.rspIU(), 2)
		dst, d := in.buf(1<<20, 64<<10+4096)
		in.sendIU(&srp.Cmd{Tag: 3, CDB: cdb10(0x28, base, 136), DataIn: direct(d)})
		checkGood(t, in.rspIU(), 3)
		if !bytes.Equal(dst[:64<<10], src) || !bytes.Equal(dst[64<<10:], imm) {
			t.Fatalf("channel %d: data differs", k)
		}
	}
	waitFor(t, e, func() bool { return srqPosted(e) == depth })

	// Channel a: one command held in the core, more parked behind the
	// send ring, then an admin logout. Every buffer comes back.
	release := make(chan struct{})
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		select {
		case <-release:
		case <-ctx.Done():
			return scsi.Result{Aborted: true}, true
		}
		return scsi.Result{}, true
	})
	for tag := uint64(10); tag < 30; tag++ { // 20 commands, req_lim 8: most are parked
		a.sendIU(&srp.Cmd{Tag: tag, CDB: make([]byte, 16)})
	}
	waitFor(t, e, func() bool { return srqPosted(e) == depth-20 })
	var aID uint64
	waitFor(t, e, func() bool {
		for _, s := range e.port.Sessions() {
			if s.Outstanding == 8 { // only channel a has commands in progress
				aID = s.Channel
				return true
			}
		}
		return false
	})
	if !e.port.RemoveSession(strconv.FormatUint(aID, 10)) {
		t.Fatalf("channel a not found: %+v", e.port.Sessions())
	}
	a.waitClosed()
	close(release)
	waitFor(t, e, func() bool { return len(e.port.Sessions()) == 2 && srqPosted(e) == depth })
	// The other channels still work.
	b.sendIU(&srp.Cmd{Tag: 40, CDB: make([]byte, 16)})
	checkGood(t, b.rspIU(), 40)
	c.sendIU(&srp.Cmd{Tag: 41, CDB: make([]byte, 16)})
	checkGood(t, c.rspIU(), 41)

	e.port.mu.Lock()
	q := e.port.srq
	e.port.mu.Unlock()
	cctx, ccancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer ccancel()
	if err := e.port.Close(cctx); err != nil {
		t.Fatal(err)
	}
	mr, err := e.tdev.Register(make([]byte, 512), rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	if err := q.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: mr, Length: 512}}); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("shared receive queue still open after Port.Close: %v", err)
	}
}

// TestSRQIUForm: a login sent as the first IU lands in a shared buffer.
func TestSRQIUForm(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UseSRQ, c.SRQSize = true, 16 })
	i, _, err := e.dialRaw(nil)
	if err != nil {
		t.Fatal(err)
	}
	lr := defaultLogin()
	i.sendIU(&lr)
	if b := i.next(); len(b) != 52 || b[0] != 0xc0 {
		t.Fatalf("want SRP_LOGIN_RSP, got % x", b)
	}
	i.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
	checkGood(t, i.rspIU(), 1)
	waitFor(t, e, func() bool { return srqPosted(e) == 16 })
}

// noSRQDev hides the device's shared receive queues.
type noSRQDev struct{ rdma.Device }

// TestSRQUnsupported: UseSRQ on a device without shared receive queues
// fails NewPort with ErrNoSRQ; a bad SRQSize is a config error.
func TestSRQUnsupported(t *testing.T) {
	e := newEnv(t, nil)
	_, err := NewPort(Config{ServiceGUID: 1, UseSRQ: true}, noSRQDev{e.tdev}, e.core)
	if !errors.Is(err, ErrNoSRQ) {
		t.Fatalf("NewPort: %v, want ErrNoSRQ", err)
	}
	for _, n := range []int{3, 65536, -1} {
		if err := (Config{UseSRQ: true, SRQSize: n}).Validate(); err == nil {
			t.Errorf("SRQSize %d accepted", n)
		}
	}
}

// TestSRQCreditOverrun: with a shared receive queue, a channel whose
// initiator ignores req_lim and holds more buffers than a private ring
// would (2*RQSize+4) is closed, and every buffer comes back, so the other
// channels keep their share.
func TestSRQCreditOverrun(t *testing.T) {
	const depth = 64
	e := newEnv(t, func(c *Config) { c.UseSRQ, c.SRQSize, c.RQSize = true, depth, 2 })
	release := make(chan struct{})
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.Tag >= 100 {
			<-release
		}
		return scsi.Result{}, true
	})
	good := e.login(defaultLogin())
	lr := defaultLogin()
	lr.InitiatorPortID[0] ^= 0x20
	bad := e.login(lr)
	for tag := uint64(100); tag < 130; tag++ { // req_lim is 2
		if err := bad.trySend(mustMarshal(t, &srp.Cmd{Tag: tag, CDB: make([]byte, 16)})); err != nil {
			break
		}
	}
	bad.waitClosed()
	close(release)
	waitFor(t, e, func() bool { return len(e.port.Sessions()) == 1 && srqPosted(e) == depth })
	if s := e.port.Sessions(); s[0].InitiatorPort != hex.EncodeToString(testInitiator[:]) {
		t.Fatalf("the wrong channel survived: %+v", s)
	}
	good.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
	checkGood(t, good.rspIU(), 1)
}

func mustMarshal(t *testing.T, iu srp.IU) []byte {
	t.Helper()
	b, err := iu.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
