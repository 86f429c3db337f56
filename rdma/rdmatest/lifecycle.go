package rdmatest

import (
	"errors"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Teardown: deregistration, connection and device close, Poll woken by
// close.

func testDeregister(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	m := e.reg(e.b, 64, lw, 0)
	if m.Access() != lw || len(m.Bytes()) != 64 {
		t.Errorf("region Access %v, %d bytes; want %v, 64", m.Access(), len(m.Bytes()), lw)
	}
	m2 := e.reg(e.b, 64, all, 0)
	if m2.RKey() == m.RKey() || m2.LKey() == m.LKey() {
		t.Errorf("two regions share keys: %#x/%#x and %#x/%#x", m.LKey(), m.RKey(), m2.LKey(), m2.RKey())
	}
	if err := m.Deregister(); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if err := m.Deregister(); !errors.Is(err, rdma.ErrDeregistered) {
		t.Fatalf("second Deregister: %v, want rdma.ErrDeregistered", err)
	}
	if err := d.PostSend(send(1, m, 0, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostSend from a deregistered region: %v, want rdma.ErrInvalidWR", err)
	}
	if err := d.PostRecv(recv(1, m, 0, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostRecv into a deregistered region: %v, want rdma.ErrInvalidWR", err)
	}
	pingPong(e, d, a)
}

// ---- teardown ----

func testClose(dialerCloses bool) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) {
		e := newEnv(t, f)
		d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		pingPong(e, d, a)
		closer, other := d, a
		cdev, odev := e.b, e.a
		if !dialerCloses {
			closer, other, cdev, odev = a, d, e.a, e.b
		}
		cb, ob := e.reg(cdev, 64, lw, 0), e.reg(odev, 64, lw, 0)
		if err := closer.PostRecv(recv(1, cb, 0, 32), recv(2, cb, 32, 32)); err != nil {
			t.Fatal(err)
		}
		if err := other.PostRecv(recv(3, ob, 0, 64)); err != nil {
			t.Fatal(err)
		}
		if err := closer.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		cc := e.drain(closer)
		if len(cc) != 2 {
			t.Fatalf("closing side completions %v, want receives 1, 2 flushed", cc)
		}
		want(t, cc[0], 1, rdma.OpRecv, rdma.StatusFlushed)
		want(t, cc[1], 2, rdma.OpRecv, rdma.StatusFlushed)
		oc := e.drain(other)
		if len(oc) != 1 {
			t.Fatalf("peer completions %v, want receive 3 flushed", oc)
		}
		want(t, oc[0], 3, rdma.OpRecv, rdma.StatusFlushed)
		e.waitDone(closer, "closing side")
		e.waitDone(other, "peer")
		if err := closer.Err(); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("closing side Err %v, want rdma.ErrClosed", err)
		}
		for i, c := range []rdma.Conn{closer, other} {
			if n, err := c.Poll(e.ctx, make([]rdma.Completion, 4)); n != 0 || !errors.Is(err, rdma.ErrClosed) {
				t.Errorf("side %d: Poll after drain = %d, %v; want 0, rdma.ErrClosed", i, n, err)
			}
			if err := c.PostSend(send(9, cb, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
				t.Errorf("side %d: PostSend after close: %v, want rdma.ErrClosed", i, err)
			}
			if err := c.PostRecv(recv(9, cb, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
				t.Errorf("side %d: PostRecv after close: %v, want rdma.ErrClosed", i, err)
			}
		}
		closer.Close() // again: no effect, no panic
		other.Close()
	}
}

func testCloseWakesPoll(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := a.Poll(e.ctx, make([]rdma.Completion, 4))
		ch <- res{n, err}
	}()
	d.Close()
	select {
	case r := <-ch:
		if r.n != 0 || !errors.Is(r.err, rdma.ErrClosed) {
			t.Fatalf("blocked Poll returned %d, %v; want 0, rdma.ErrClosed", r.n, r.err)
		}
	case <-e.ctx.Done():
		t.Fatal("Poll blocked on an idle connection did not return after the peer closed it")
	}
}

func testDeviceClose(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.b, 16, lw, 0)
	if err := d.PostRecv(recv(1, rb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	acc := make(chan error, 1)
	go func() {
		_, err := e.l.Accept(e.ctx)
		acc <- err
	}()
	if err := e.a.Close(); err != nil {
		t.Fatalf("Device.Close: %v", err)
	}
	e.waitDone(a, "connection of the closed device")
	e.waitDone(d, "peer")
	dc := e.drain(d)
	if len(dc) != 1 {
		t.Fatalf("peer completions %v, want receive 1 flushed", dc)
	}
	want(t, dc[0], 1, rdma.OpRecv, rdma.StatusFlushed)
	e.drain(a)
	select {
	case err := <-acc:
		if err == nil {
			t.Fatal("Accept returned a request after Device.Close")
		}
	case <-e.ctx.Done():
		t.Fatal("Accept still blocked after Device.Close")
	}
}

// ---- concurrency and scale ----
