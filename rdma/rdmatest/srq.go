package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Shared receive queues (rdma.SRQDevice) are optional: these subtests skip
// when the listening device of the factory does not implement them. The
// acceptor's connections (an SRP target's channels) take their receives from
// one SRQ of the listening device; the dialers use ordinary receive queues.
//
// What they hold a provider to, beyond the doc comments of rdma.SRQ and
// rdma.QPConfig.SRQ:
//   - SENDs arriving on any connection of the SRQ consume its buffers in
//     posting order, each completing through the Poll of the connection the
//     SEND arrived on, with the buffer's RecvWR.ID;
//   - Posted counts buffers posted and not consumed (a consumed buffer no
//     longer counts once its completion has been polled);
//   - a SEND finding the SRQ empty behaves as one finding an ordinary
//     receive queue empty on the same provider (SRQ/Empty compares them).

// srq makes an SRQ of depth on the listening device, closed at cleanup,
// or skips the subtest.
func (e *env) srq(depth int) rdma.SRQ {
	e.t.Helper()
	sd, ok := e.a.(rdma.SRQDevice)
	if !ok {
		e.t.Skipf("device %s does not implement rdma.SRQDevice", e.a.Name())
	}
	s, err := sd.CreateSRQ(depth)
	if err != nil {
		e.t.Fatalf("CreateSRQ(%d): %v", depth, err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// connectSRQ connects a dialer with an ordinary QP to an acceptor QP on s.
func (e *env) connectSRQ(s rdma.SRQ) (d, a rdma.Conn) {
	e.t.Helper()
	return e.connect(rdma.QPConfig{}, rdma.QPConfig{SRQ: s})
}

func wantPosted(tb testing.TB, s rdma.SRQ, n int, when string) {
	tb.Helper()
	if got := s.Posted(); got != n {
		tb.Fatalf("SRQ Posted() = %d %s, want %d", got, when, n)
	}
}

// testSRQShared: three connections share one SRQ; SENDs arriving on them in
// turn consume its buffers in posting order, each receive completing on the
// connection its SEND arrived on.
func testSRQShared(t *testing.T, f Factory) {
	e := newEnv(t, f)
	s := e.srq(16)
	const nconn, nmsg, slot = 3, 9, 32
	var ds, as []rdma.Conn
	for range nconn {
		d, a := e.connectSRQ(s)
		ds, as = append(ds, d), append(as, a)
	}
	rb := e.reg(e.a, nmsg*slot, lw, 0)
	for i := range nmsg {
		if err := s.PostRecv(recv(uint64(100+i), rb, i*slot, slot)); err != nil {
			t.Fatalf("SRQ PostRecv %d: %v", i, err)
		}
	}
	wantPosted(t, s, nmsg, "after posting")
	sb := e.reg(e.b, nmsg*slot, 0, 7)
	for i := range nmsg {
		k := (i * 2) % nconn // connections 0, 2, 1, 0, 2, 1...
		n := 1 + i*3         // distinct lengths
		if err := ds[k].PostSend(send(uint64(i), sb, i*slot, n)); err != nil {
			t.Fatalf("SEND %d on connection %d: %v", i, k, err)
		}
		want(t, e.pollN(ds[k], 1)[0], uint64(i), rdma.OpSend, rdma.StatusSuccess)
		c := e.pollN(as[k], 1)[0]
		// The i-th SEND to arrive, whatever its connection, takes the
		// i-th buffer posted.
		want(t, c, uint64(100+i), rdma.OpRecv, rdma.StatusSuccess)
		if c.ByteLen != n || !bytes.Equal(rb.Bytes()[i*slot:i*slot+n], sb.Bytes()[i*slot:i*slot+n]) {
			t.Fatalf("SEND %d on connection %d: receive ByteLen %d, data %x; want %d bytes %x",
				i, k, c.ByteLen, rb.Bytes()[i*slot:i*slot+n], n, sb.Bytes()[i*slot:i*slot+n])
		}
		wantPosted(t, s, nmsg-1-i, fmt.Sprintf("after %d receives polled", i+1))
	}
	// No connection saw a completion meant for another.
	for k, a := range as {
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		n, err := a.Poll(ctx, make([]rdma.Completion, 4))
		cancel()
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acceptor %d: Poll after all receives = %d, %v; want nothing more", k, n, err)
		}
	}
	// The dialers' ordinary receive queues still work.
	for k := range nconn {
		db := e.reg(e.b, 8, lw, 0)
		if err := ds[k].PostRecv(recv(50, db, 0, 8)); err != nil {
			t.Fatal(err)
		}
		ab := e.reg(e.a, 8, 0, 3+k)
		if err := as[k].PostSend(send(51, ab, 0, 8)); err != nil {
			t.Fatal(err)
		}
		want(t, e.pollN(as[k], 1)[0], 51, rdma.OpSend, rdma.StatusSuccess)
		want(t, e.pollN(ds[k], 1)[0], 50, rdma.OpRecv, rdma.StatusSuccess)
		if !bytes.Equal(db.Bytes(), ab.Bytes()) {
			t.Fatalf("acceptor %d to dialer: data %x, want %x", k, db.Bytes(), ab.Bytes())
		}
	}
}

// testSRQPostRecv: an SRQ queue pair has no receive queue of its own, and
// SRQ.PostRecv validates its requests as Conn.PostRecv does.
func testSRQPostRecv(t *testing.T, f Factory) {
	e := newEnv(t, f)
	s := e.srq(8)
	d, a := e.connectSRQ(s)
	rb := e.reg(e.a, 64, lw, 0)
	if err := a.PostRecv(recv(1, rb, 0, 16)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("Conn.PostRecv on a queue pair using an SRQ: %v, want rdma.ErrInvalidWR", err)
	}
	ro := e.reg(e.a, 64, 0, 0)
	if err := s.PostRecv(recv(2, ro, 0, 16)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("SRQ PostRecv into a region without local write: %v, want rdma.ErrInvalidWR", err)
	}
	if err := s.PostRecv(recv(3, rb, 60, 5)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("SRQ PostRecv past the region: %v, want rdma.ErrInvalidWR", err)
	}
	other := e.reg(e.b, 64, lw, 0)
	if err := s.PostRecv(recv(4, other, 0, 16)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("SRQ PostRecv into a region of another device: %v, want rdma.ErrInvalidWR", err)
	}
	// A valid request, then an invalid one: the first stays posted.
	if err := s.PostRecv(recv(5, rb, 0, 16), recv(6, ro, 0, 16)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("SRQ PostRecv of a valid then an invalid request: %v, want rdma.ErrInvalidWR", err)
	}
	wantPosted(t, s, 1, "after the refused requests")
	sb := e.reg(e.b, 16, 0, 9)
	if err := d.PostSend(send(7, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(d, 1)[0], 7, rdma.OpSend, rdma.StatusSuccess)
	c := e.pollN(a, 1)[0]
	want(t, c, 5, rdma.OpRecv, rdma.StatusSuccess)
	if !bytes.Equal(rb.Bytes()[:16], sb.Bytes()) {
		t.Fatal("receive through the SRQ: data differs")
	}
}

// testSRQDepth: posting past the SRQ's depth fails with rdma.ErrQueueFull,
// leaving the requests before it posted; a consumed and polled buffer frees
// its slot.
func testSRQDepth(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const depth = 8
	s := e.srq(depth)
	d, a := e.connectSRQ(s)
	rb := e.reg(e.a, 16*(depth+2), lw, 0)
	for i := range depth - 1 {
		if err := s.PostRecv(recv(uint64(i), rb, 16*i, 16)); err != nil {
			t.Fatalf("SRQ post %d of depth %d: %v", i, depth, err)
		}
	}
	wantPosted(t, s, depth-1, "after posting depth-1")
	err := s.PostRecv(recv(uint64(depth-1), rb, 16*(depth-1), 16), recv(99, rb, 16*depth, 16))
	if !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("SRQ PostRecv of 2 with 1 slot left: %v, want rdma.ErrQueueFull", err)
	}
	wantPosted(t, s, depth, "after filling it")
	if err := s.PostRecv(recv(100, rb, 0, 16)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("SRQ PostRecv into a full SRQ: %v, want rdma.ErrQueueFull", err)
	}
	sb := e.reg(e.b, 16, 0, 1)
	if err := d.PostSend(send(1, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 0, rdma.OpRecv, rdma.StatusSuccess)
	wantPosted(t, s, depth-1, "after one receive was polled")
	if err := s.PostRecv(recv(101, rb, 16*(depth+1), 16)); err != nil {
		t.Fatalf("SRQ PostRecv after a receive was consumed and polled: %v", err)
	}
	// Exactly depth were posted: buffers 1..depth-1, then 101.
	for i := 1; i <= depth; i++ {
		if err := d.PostSend(send(uint64(i+1), sb, 0, 16)); err != nil {
			t.Fatal(err)
		}
		id := uint64(i)
		if i == depth {
			id = 101
		}
		want(t, e.pollN(a, 1)[0], id, rdma.OpRecv, rdma.StatusSuccess)
	}
	e.pollN(d, depth+1)
	wantPosted(t, s, 0, "after every buffer was consumed")
}

// testSRQCloseConn: closing one connection (from either end) leaves the
// buffers still in the SRQ to the others: no flush completions for them,
// Posted unchanged.
func testSRQCloseConn(t *testing.T, f Factory) {
	for _, acceptorCloses := range []bool{false, true} {
		name := "DialerCloses"
		if acceptorCloses {
			name = "AcceptorCloses"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, f)
			s := e.srq(8)
			d1, a1 := e.connectSRQ(s)
			d2, a2 := e.connectSRQ(s)
			rb := e.reg(e.a, 64, lw, 0)
			sb := e.reg(e.b, 16, 0, 5)
			for i := range 4 {
				if err := s.PostRecv(recv(uint64(1+i), rb, 16*i, 16)); err != nil {
					t.Fatal(err)
				}
			}
			// One receive consumed and completed on the first connection.
			if err := d1.PostSend(send(1, sb, 0, 16)); err != nil {
				t.Fatal(err)
			}
			want(t, e.pollN(a1, 1)[0], 1, rdma.OpRecv, rdma.StatusSuccess)
			want(t, e.pollN(d1, 1)[0], 1, rdma.OpSend, rdma.StatusSuccess)
			if acceptorCloses {
				a1.Close()
			} else {
				d1.Close()
			}
			if c := e.drain(a1); len(c) != 0 {
				t.Fatalf("closed connection's completions %v, want none (the SRQ's buffers are not its own)", c)
			}
			e.drain(d1)
			e.waitDone(a1, "closed acceptor")
			wantPosted(t, s, 3, "after a connection closed")
			if err := d2.PostSend(send(2, sb, 0, 16)); err != nil {
				t.Fatal(err)
			}
			want(t, e.pollN(d2, 1)[0], 2, rdma.OpSend, rdma.StatusSuccess)
			want(t, e.pollN(a2, 1)[0], 2, rdma.OpRecv, rdma.StatusSuccess)
			wantPosted(t, s, 2, "after the other connection consumed one")
		})
	}
}

// testSRQClose: SRQ.Close fails while a queue pair uses it (and the SRQ
// keeps working), succeeds once they are closed and drained, and is safe to
// repeat; posting afterwards fails with rdma.ErrClosed.
func testSRQClose(t *testing.T, f Factory) {
	e := newEnv(t, f)
	s := e.srq(4)
	d, a := e.connectSRQ(s)
	rb := e.reg(e.a, 32, lw, 0)
	if err := s.PostRecv(recv(1, rb, 0, 16), recv(2, rb, 16, 16)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("SRQ.Close with a live queue pair on it succeeded")
	}
	sb := e.reg(e.b, 16, 0, 2)
	if err := d.PostSend(send(1, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 1, rdma.OpRecv, rdma.StatusSuccess)
	e.pollN(d, 1)
	a.Close()
	e.drain(a)
	e.drain(d)
	if err := s.Close(); err != nil {
		t.Fatalf("SRQ.Close after its queue pair was closed and drained: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second SRQ.Close: %v", err)
	}
	if err := s.PostRecv(recv(3, rb, 0, 16)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("SRQ PostRecv after Close: %v, want rdma.ErrClosed", err)
	}
	// A queue pair cannot be made on a closed SRQ.
	accepted := make(chan error, 1)
	go func() {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			accepted <- err
			return
		}
		c, err := r.Accept(e.ctx, rdma.QPConfig{SRQ: s}, nil)
		if err == nil {
			c.Close()
			accepted <- errors.New("accept with a closed SRQ succeeded")
			return
		}
		r.Reject(nil) // the request may still be pending
		accepted <- nil
	}()
	dctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	// The dialer sees a reject or a refusal: the provider's choice.
	if c, _, err := e.b.Dial(dctx, e.addr, rdma.QPConfig{}, nil); err == nil {
		c.Close()
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

// emptyOutcome is how a provider treats a SEND that finds no receive.
type emptyOutcome int

const (
	outcomeWaits emptyOutcome = iota + 1 // RNR retry: delivered once a receive is posted
	outcomeFails                         // the connection goes down (iWARP: Terminate)
)

func (o emptyOutcome) String() string {
	if o == outcomeWaits {
		return "the SEND waits for a receive (RNR retry)"
	}
	return "the connection goes down"
}

// sendToEmpty SENDs from d to a while a has no receive for it, gives the
// provider window to refuse it (with mustFail, until the connection goes
// down), then makes post post a receive (ID 77, 16 bytes of rb) and reports
// what happened.
func sendToEmpty(e *env, d, a rdma.Conn, rb rdma.MemoryRegion, post func(rdma.RecvWR) error, window time.Duration, mustFail bool) emptyOutcome {
	e.t.Helper()
	sb := e.reg(e.b, 16, 0, 4)
	if err := d.PostSend(send(66, sb, 0, 16)); err != nil {
		e.t.Fatal(err)
	}
	var timeout <-chan time.Time
	if !mustFail {
		timeout = time.After(window)
	}
	select {
	case <-d.Done():
	case <-a.Done():
	case <-timeout:
	case <-e.ctx.Done():
		e.t.Fatal("the connection of a SEND without receive stayed up until the deadline")
	}
	err := post(recv(77, rb, 0, 16))
	if err == nil {
		select {
		case <-d.Done():
		case <-a.Done():
		default:
			// Still up: the SEND must now land in the receive.
			want(e.t, e.pollN(d, 1)[0], 66, rdma.OpSend, rdma.StatusSuccess)
			c := e.pollN(a, 1)[0]
			want(e.t, c, 77, rdma.OpRecv, rdma.StatusSuccess)
			if !bytes.Equal(rb.Bytes()[:16], sb.Bytes()) {
				e.t.Fatal("SEND delivered after the receive was posted: data differs")
			}
			return outcomeWaits
		}
	} else if !errors.Is(err, rdma.ErrClosed) {
		e.t.Fatalf("posting the receive: %v", err)
	}
	// Down: the SEND completes with an error (or, on transmit, success),
	// and both sides drain.
	e.waitDone(d, "sender of a SEND without receive")
	e.waitDone(a, "receiver without receive")
	for _, c := range e.drain(d) {
		if c.ID != 66 || c.Op != rdma.OpSend {
			e.t.Fatalf("sender completion %+v, want only SEND 66", c)
		}
	}
	e.drain(a)
	return outcomeFails
}

// testSRQEmpty: a SEND arriving while the SRQ is empty is treated as one
// arriving at an empty ordinary receive queue of the same provider; when the
// connection survives, the next buffer posted to the SRQ takes it, and when
// it goes down, the other connections of the SRQ stay up, and so does the
// buffer posted after the failure.
func testSRQEmpty(t *testing.T, f Factory) {
	e := newEnv(t, f)
	s := e.srq(4)
	d0, a0 := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	// A provider that refuses such a SEND does so within 5 s even on a
	// starved machine (go test -race of many packages on 2 CPUs); one that
	// waits must still be waiting then.
	plain := sendToEmpty(e, d0, a0, e.reg(e.a, 16, lw, 0), func(r rdma.RecvWR) error { return a0.PostRecv(r) },
		5*time.Second, false)
	d1, a1 := e.connectSRQ(s)
	d2, a2 := e.connectSRQ(s)
	shared := sendToEmpty(e, d1, a1, e.reg(e.a, 16, lw, 0), func(r rdma.RecvWR) error { return s.PostRecv(r) },
		200*time.Millisecond, plain == outcomeFails)
	if shared != plain {
		t.Fatalf("SEND to an empty SRQ: %v; to an empty receive queue: %v", shared, plain)
	}
	// The other connection of the SRQ is unaffected. After a failure,
	// buffer 77 was posted to the SRQ with no connection left to take it:
	// it is still there, and the oldest.
	next, left := uint64(88), 0
	if shared == outcomeFails {
		next, left = 77, 1
	}
	wantPosted(t, s, left, "after the SEND without receive")
	rb := e.reg(e.a, 16, lw, 0)
	if err := s.PostRecv(recv(88, rb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	sb := e.reg(e.b, 16, 0, 8)
	if err := d2.PostSend(send(3, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(d2, 1)[0], 3, rdma.OpSend, rdma.StatusSuccess)
	want(t, e.pollN(a2, 1)[0], next, rdma.OpRecv, rdma.StatusSuccess)
}
