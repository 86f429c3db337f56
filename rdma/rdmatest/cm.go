package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Connection management: private data, reject, contexts, listener close,
// accept order.

func testConnectPrivateData(t *testing.T, f Factory) {
	e := newEnv(t, f)
	reqPD := pattern(e.a.MaxPrivateData(), 1)
	repPD := pattern(e.b.MaxPrivateData(), 2)
	acfg := rdma.QPConfig{SendDepth: 16, RecvDepth: 16, MaxSGE: 2, IRD: 2, ORD: 3}
	dcfg := rdma.QPConfig{SendDepth: 8, RecvDepth: 12, MaxSGE: 3, IRD: 8, ORD: 8}
	ch := e.acceptAsync(acfg, repPD)
	d, gotRep, err := e.b.Dial(e.ctx, e.addr, dcfg, reqPD)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer d.Close()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if !bytes.Equal(r.req.PrivateData(), reqPD) {
		t.Errorf("request private data: got %d bytes %x, want %d bytes", len(r.req.PrivateData()), r.req.PrivateData(), len(reqPD))
	}
	if !bytes.Equal(gotRep, repPD) {
		t.Errorf("reply private data: got %d bytes %x, want %d bytes", len(gotRep), gotRep, len(repPD))
	}
	if r.req.LocalAddr() == nil || r.req.RemoteAddr() == nil {
		t.Errorf("ConnRequest addresses: local %v remote %v", r.req.LocalAddr(), r.req.RemoteAddr())
	}
	for _, c := range []rdma.Conn{d, r.c} {
		if c.LocalAddr() == nil || c.RemoteAddr() == nil {
			t.Errorf("Conn addresses: local %v remote %v", c.LocalAddr(), c.RemoteAddr())
		}
	}
	checkCaps := func(who string, got rdma.Caps, cfg rdma.QPConfig, peerIRD int) {
		if got.SendDepth < cfg.SendDepth || got.RecvDepth < cfg.RecvDepth || got.MaxSGE < cfg.MaxSGE {
			t.Errorf("%s Caps %+v below the requested %+v", who, got, cfg)
		}
		if got.ORD < 1 || got.ORD > peerIRD || got.ORD > cfg.ORD {
			t.Errorf("%s Caps.ORD %d, want 1..min(own ORD %d, peer IRD %d)", who, got.ORD, cfg.ORD, peerIRD)
		}
	}
	checkCaps("dialer", d.Caps(), dcfg, acfg.IRD)
	checkCaps("acceptor", r.c.Caps(), acfg, dcfg.IRD)

	// An empty request and reply.
	ch = e.acceptAsync(rdma.QPConfig{}, nil)
	d2, rep2, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, nil)
	if err != nil {
		t.Fatalf("Dial without private data: %v", err)
	}
	defer d2.Close()
	r = <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if len(rep2) != 0 || len(r.req.PrivateData()) != 0 {
		t.Errorf("empty private data arrived as request %x, reply %x", r.req.PrivateData(), rep2)
	}
}

func testPrivateDataTooLong(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Nobody accepts yet: a Dial that wrongly sends the request fails by timeout.
	short, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	c, _, err := e.b.Dial(short, e.addr, rdma.QPConfig{}, make([]byte, e.b.MaxPrivateData()+1))
	if c != nil {
		c.Close()
	}
	if !errors.Is(err, rdma.ErrPrivateDataTooLong) {
		t.Fatalf("Dial with %d bytes of private data: %v, want rdma.ErrPrivateDataTooLong", e.b.MaxPrivateData()+1, err)
	}
	reqc := make(chan rdma.ConnRequest, 1)
	go func() {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			close(reqc)
			return
		}
		reqc <- r
	}()
	type dialResult struct {
		c   rdma.Conn
		err error
	}
	dc := make(chan dialResult, 1)
	go func() {
		c, _, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, []byte{1})
		dc <- dialResult{c, err}
	}()
	r, ok := <-reqc
	if !ok {
		t.Fatal("Listener.Accept failed")
	}
	long := make([]byte, e.a.MaxPrivateData()+1)
	if c, err := r.Accept(e.ctx, rdma.QPConfig{}, long); !errors.Is(err, rdma.ErrPrivateDataTooLong) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Accept with %d bytes: %v, want rdma.ErrPrivateDataTooLong", len(long), err)
	}
	if err := r.Reject(long); !errors.Is(err, rdma.ErrPrivateDataTooLong) {
		t.Fatalf("Reject with %d bytes: %v, want rdma.ErrPrivateDataTooLong", len(long), err)
	}
	rej := pattern(e.a.MaxPrivateData(), 3)
	if err := r.Reject(rej); err != nil {
		t.Fatalf("Reject after the refused ones: %v", err)
	}
	res := <-dc
	var re *rdma.RejectError
	if !errors.As(res.err, &re) || !bytes.Equal(re.PrivateData, rej) {
		if res.c != nil {
			res.c.Close()
		}
		t.Fatalf("Dial: %v, want *rdma.RejectError with %d bytes of private data", res.err, len(rej))
	}
}

func testReject(t *testing.T, f Factory) {
	e := newEnv(t, f)
	rej := pattern(32, 4) // an SRP_LOGIN_REJ is 32 bytes
	go func() {
		r, err := e.l.Accept(e.ctx)
		if err == nil {
			r.Reject(rej)
		}
	}()
	c, _, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, pattern(56, 5))
	var re *rdma.RejectError
	if !errors.As(err, &re) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial: %v, want *rdma.RejectError", err)
	}
	if !bytes.Equal(re.PrivateData, rej) {
		t.Fatalf("reject private data %x, want %x", re.PrivateData, rej)
	}
	// The listener still works.
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	pingPong(e, d, a)
}

func testDialContext(t *testing.T, f Factory) {
	e := newEnv(t, f)
	ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer cancel()
	c, _, err := e.b.Dial(ctx, e.addr, rdma.QPConfig{}, nil) // nobody accepts
	if c != nil {
		c.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial with nobody accepting: %v, want context.DeadlineExceeded", err)
	}
	if e.ctx.Err() != nil {
		t.Fatal("Dial did not return before the suite deadline")
	}
}

func testListenerClose(t *testing.T, f Factory) {
	e := newEnv(t, f)
	acc := make(chan error, 1)
	go func() {
		_, err := e.l.Accept(e.ctx)
		acc <- err
	}()
	if err := e.l.Close(); err != nil {
		t.Fatalf("Listener.Close: %v", err)
	}
	select {
	case err := <-acc:
		if err == nil {
			t.Fatal("Accept returned a request after Close without any dial")
		}
	case <-e.ctx.Done():
		t.Fatal("Accept still blocked after Listener.Close")
	}
	c, _, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, nil)
	if err == nil {
		c.Close()
		t.Fatal("Dial to a closed listener succeeded")
	}
	if e.ctx.Err() != nil {
		t.Fatal("Dial to a closed listener ran into the deadline")
	}
}

func testAcceptOutOfOrder(t *testing.T, f Factory) {
	e := newEnv(t, f)
	type dialResult struct {
		c   rdma.Conn
		rep []byte
		err error
	}
	results := make([]chan dialResult, 2)
	for i := range results {
		results[i] = make(chan dialResult, 1)
		go func() {
			c, rep, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, []byte{byte(i)})
			results[i] <- dialResult{c, rep, err}
		}()
	}
	var reqs [2]rdma.ConnRequest
	for range 2 {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			t.Fatalf("Listener.Accept: %v", err)
		}
		if len(r.PrivateData()) != 1 || r.PrivateData()[0] > 1 || reqs[r.PrivateData()[0]] != nil {
			t.Fatalf("request private data %x", r.PrivateData())
		}
		reqs[r.PrivateData()[0]] = r
	}
	// Answer the requests in the opposite order of their arrival: reject
	// dial 0 after accepting dial 1.
	c1, err := reqs[1].Accept(e.ctx, rdma.QPConfig{}, []byte{0x11})
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	defer c1.Close()
	if err := reqs[0].Reject([]byte{0x10}); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	r1 := <-results[1]
	if r1.err != nil || !bytes.Equal(r1.rep, []byte{0x11}) {
		t.Fatalf("accepted Dial: %v, reply %x", r1.err, r1.rep)
	}
	defer r1.c.Close()
	r0 := <-results[0]
	var re *rdma.RejectError
	if !errors.As(r0.err, &re) || !bytes.Equal(re.PrivateData, []byte{0x10}) {
		if r0.c != nil {
			r0.c.Close()
		}
		t.Fatalf("rejected Dial: %v", r0.err)
	}
	pingPong(e, r1.c, c1)
}
