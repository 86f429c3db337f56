package initiator

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
)

// stubConn accepts posts and never completes anything.
type stubConn struct {
	rdma.Conn
	sent [][]byte
}

func (c *stubConn) PostSend(wrs ...rdma.SendWR) error {
	for _, wr := range wrs {
		var b []byte
		for _, s := range wr.Local {
			b = append(b, s.Bytes()...)
		}
		c.sent = append(c.sent, b)
	}
	return nil
}
func (c *stubConn) PostRecv(...rdma.RecvWR) error { return nil }
func (c *stubConn) Close() error                  { return nil }
func (c *stubConn) Poll(ctx context.Context, _ []rdma.Completion) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}
func (c *stubConn) LocalAddr() net.Addr  { return nil }
func (c *stubConn) RemoteAddr() net.Addr { return nil }

// newStubChannel builds a channel whose rings live on a loopback device and
// whose connection is a stub, to feed it IUs directly.
func newStubChannel(t testing.TB) (*channel, *stubConn) {
	dev := loopback.NewNetwork().NewDevice("x")
	t.Cleanup(func() { dev.Close() })
	s := &Session{dev: dev, opts: Options{Dest: "x"}.withDefaults(), clock: systemClock{}, log: slog.New(slog.DiscardHandler), wake: make(chan struct{}), closed: make(chan struct{})}
	s.state = StateClosed
	sc := &stubConn{}
	li := LoginInfo{ReqLimDelta: 8, MaxITIULen: 8276, MaxTIIULen: 256, UsedITIULen: 8260, CanQueue: 7}
	ch := &channel{s: s, conn: sc, info: li, maxIT: 8260, maxTI: 256, reqLim: 8, log: s.log,
		creditSignal: make(chan struct{}), dead: make(chan struct{}), pollDone: make(chan struct{}), watchdogDone: make(chan struct{})}
	if err := ch.setup(); err != nil {
		t.Fatal(err)
	}
	return ch, sc
}

func TestReceiveMalformed(t *testing.T) {
	ch, sc := newStubChannel(t)
	r := <-ch.free
	r.activate(2)
	rsp := func(tag uint64, n int, senseLen, respLen uint32) []byte {
		b := make([]byte, n)
		b[0] = 0xc1
		binary.BigEndian.PutUint32(b[4:], 1)
		binary.BigEndian.PutUint64(b[8:], tag)
		b[18], b[19] = 0x03, 0x02
		binary.BigEndian.PutUint32(b[28:], senseLen)
		binary.BigEndian.PutUint32(b[32:], respLen)
		return b
	}
	// Short IUs, unknown opcodes, an SRP_RSP for an unknown tag: dropped
	// (the response's credit still counts).
	for _, b := range [][]byte{{}, {0xc1}, {0x99, 0, 0, 0}, rsp(r.tag^0x10000, 36, 0, 0), {0x81, 0, 0, 0, 0, 0, 0, 1}} {
		ch.receive(b)
	}
	if ch.reqLim != 9 {
		t.Errorf("req_lim %d, want 8 + 1 from the unknown-tag response", ch.reqLim)
	}
	select {
	case <-r.done:
		t.Fatal("a malformed IU completed the command")
	default:
	}
	// An SRP_RSP whose sense_data_len runs past the IU still completes its
	// command (status kept, sense dropped).
	ch.receive(rsp(r.tag, 40, 1000, 0))
	select {
	case <-r.done:
	default:
		t.Fatal("truncated SRP_RSP did not complete the command")
	}
	if r.status != 2 || len(r.sense) != 0 {
		t.Errorf("status %#x sense %x", r.status, r.sense)
	}
	// A second response for the same tag is ignored.
	ch.receive(rsp(r.tag, 36, 0, 0))
	select {
	case <-r.done:
		t.Fatal("command completed twice")
	default:
	}
	// CRED_REQ is answered with CRED_RSP echoing the tag.
	cr := make([]byte, 16)
	cr[0] = 0x81
	binary.BigEndian.PutUint32(cr[4:], 2)
	binary.BigEndian.PutUint64(cr[8:], 0x1234)
	ch.receive(cr)
	last := sc.sent[len(sc.sent)-1]
	if len(last) != 16 || last[0] != 0x41 || binary.BigEndian.Uint64(last[8:]) != 0x1234 {
		t.Errorf("CRED_RSP %x", last)
	}
}

func FuzzReceive(f *testing.F) {
	f.Add([]byte{0xc1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 18, 0, 0, 0, 0})
	f.Add([]byte{0x82, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0x70, 0, 6, 0})
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ch, _ := newStubChannel(t)
		r := <-ch.free
		r.activate(2)
		if len(b) >= 16 {
			binary.BigEndian.PutUint64(b[8:], r.tag) // aim at the live command
		}
		ch.receive(b)
	})
}
