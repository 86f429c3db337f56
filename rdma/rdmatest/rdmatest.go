// Package rdmatest is a provider-independent conformance suite for the rdma
// transport contract, and benchmarks any provider can run.
//
// A provider's test calls Run with a Factory:
//
//	func TestConformance(t *testing.T) {
//		rdmatest.Run(t, func(tb testing.TB) (a, b rdma.Device, addr string) {
//			return newDevice(tb), newDevice(tb), "127.0.0.1:0"
//		})
//	}
//
// # What the suite expects of a provider
//
// Beyond the doc comments of package rdma, the suite relies on these readings
// of the contract (the verbs behaviour they come from is noted):
//
//   - Listen on the factory's address, then Dial the listener's
//     Addr().String(): the address may ask for a free port (":0").
//   - Dial and Poll honour their contexts: with nobody accepting, or nothing
//     to complete, they return an error matching context.DeadlineExceeded
//     when the context expires (an abandoned Poll leaves the connection up).
//   - Connect requests may be answered in any order; Listener.Accept and a
//     blocked Poll return when the listener or connection closes.
//   - Private data up to MaxPrivateData of the receiving side arrives intact
//     (request: the listener's device; reply and reject: the dialer's).
//     Longer private data fails with rdma.ErrPrivateDataTooLong before
//     anything is sent; a ConnRequest whose Accept or Reject failed that way
//     is still pending and can be answered again.
//   - Caps reports at least the requested SendDepth, RecvDepth and MaxSGE,
//     and an ORD between 1 and the peer's requested IRD.
//   - A send queue slot is held from PostSend until Poll returns the work
//     request's completion (an unsignaled request's slot until a later
//     completion of the same send queue is returned); a receive slot until
//     its completion is returned; an RDMA READ counts against ORD for as long
//     as it holds its send slot. Posting past SendDepth, RecvDepth or ORD
//     returns rdma.ErrQueueFull and posts nothing more; the work requests
//     before it in the same call stay posted. (Verbs: a CQ sized to its
//     queues never overflows because slots free only as completions are
//     polled.)
//   - Completions of one queue arrive in posting order; unsignaled requests
//     that succeed produce none; error and flush completions carry the work
//     request's ID and opcode (rdma.OpRecv for receives).
//   - RC ordering: a SEND posted after an RDMA WRITE on the same connection
//     completes at the receiver only after the WRITE's data is in place, and
//     an RDMA READ returns data reflecting every WRITE posted before it (it
//     may also reflect WRITEs posted after it: RFC 5040 §5.5).
//   - A SEND consumes the oldest posted receive. Receives must be posted
//     before the matching SEND arrives: the suite never relies on RNR retry,
//     which iWARP does not have.
//   - Zero-length RDMA WRITE and READ succeed whatever the remote address
//     and key (no key check for zero bytes: IBA vol. 1 ch. 9.4, and ib_srpt's
//     zero-length WRITE with STag 0 over iWARP).
//   - A remote access with an unknown, deregistered or invalidated RKey,
//     outside the region, or without the right completes with
//     rdma.StatusRemoteAccess, and the connection goes down on both sides:
//     every other outstanding work request (sends and receives, both sides)
//     completes with rdma.StatusFlushed, Done closes, Err is non-nil, and
//     Poll returns rdma.ErrClosed once drained. Posting on a down connection
//     returns rdma.ErrClosed (a request posted before the failure was seen
//     completes with rdma.StatusFlushed instead: the suite accepts both).
//   - A SEND longer than the receive buffer completes that receive with
//     rdma.StatusLocalLength and the SEND with rdma.StatusRemoteInvalidRequest
//     or rdma.StatusRemoteOperation; the connection goes down.
//   - SEND with Invalidate reports Invalidated and the key in the receive
//     completion, and the key is unusable remotely afterwards.
//   - Close on either side takes the connection down on both; the closing
//     side's Err matches rdma.ErrClosed. Device.Close takes down the
//     device's connections and listeners.
//   - Once both devices of a factory are closed, every goroutine the
//     provider started for them exits (checked against the goroutine count
//     before the factory was called, with a deadline).
//
// Shared receive queues are optional (rdma.SRQDevice); the SRQ subtests
// skip on a provider without them (see srq.go for what they expect).
//
// Both directions are exercised: the dialer (an SRP initiator) and the
// acceptor (an SRP target, which issues the RDMA READs and WRITEs) each act as
// requester. Subtests run sequentially (the goroutine check needs it; do not
// run the suite in parallel with other tests of the same process), each with
// fresh devices from the factory and a context deadline of at most 30 s.
// RunWith relaxes the suite for documented provider differences (Options).
package rdmatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Factory returns two devices that can reach each other and an address the
// first can Listen on (the second dials the listener's Addr().String()). It is
// called once per subtest and benchmark. The suite closes both devices when
// the subtest ends; the factory may register more cleanup with tb.Cleanup.
type Factory func(tb testing.TB) (a, b rdma.Device, addr string)

// Options relax the suite for providers whose completion semantics differ
// in documented ways. The zero value asks for the strict behaviour described
// in the package documentation.
type Options struct {
	// CompletesOnTransmit: SEND and RDMA WRITE complete at the requester
	// once transmitted, without waiting for the responder (an iWARP Data
	// Sink acknowledges neither, RFC 5040; siw completes them so). An
	// error the responder finds in such a request then reaches the requester
	// only as the connection's teardown: the request and those after it may
	// complete successfully, with an error, or flushed; and a SEND posted
	// after a failing RDMA READ may complete successfully. The suite then
	// checks placed data only after a fencing RDMA READ.
	CompletesOnTransmit bool
	// RemoteAccessStatuses are the statuses accepted for a work request the
	// responder refused for its key, bounds or rights; empty means
	// {rdma.StatusRemoteAccess}.
	RemoteAccessStatuses []rdma.Status
}

func (o Options) remoteAccessOK(st rdma.Status) bool {
	if len(o.RemoteAccessStatuses) == 0 {
		return st == rdma.StatusRemoteAccess
	}
	return slices.Contains(o.RemoteAccessStatuses, st)
}

// Run runs the conformance suite as subtests of t, strictly.
func Run(t *testing.T, f Factory) { RunWith(t, f, Options{}) }

// RunWith runs the conformance suite as subtests of t, relaxed by opts.
func RunWith(t *testing.T, f Factory, opts Options) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"Connect/PrivateData", testConnectPrivateData},
		{"Connect/PrivateDataTooLong", testPrivateDataTooLong},
		{"Connect/Reject", testReject},
		{"Connect/DialContext", testDialContext},
		{"Connect/ListenerClose", testListenerClose},
		{"Connect/AcceptOutOfOrder", testAcceptOutOfOrder},
		{"PollContext", testPollContext},
		{"SendRecv/Sizes", testSendRecvSizes},
		{"SendRecv/Gather", testSendGather},
		{"SendRecv/FIFO", testSendFIFO},
		{"SendRecv/Solicited", testSolicited},
		{"SendRecv/Unsignaled", testUnsignaled},
		{"SendRecv/Bidirectional", testBidirectional},
		{"SendRecv/LocalLength", testLocalLength(opts)},
		{"SendInvalidate", testSendInvalidate(opts)},
		{"RDMA/WriteRead", testWriteRead(opts)},
		{"RDMA/WriteThenSendOrdering", testWriteSendOrdering},
		{"RDMA/ZeroLength", testZeroLength},
		{"RDMA/BadRKey", remoteError(badRKey, false, opts)},
		{"RDMA/OutOfBoundsEnd", remoteError(pastEnd, false, opts)},
		{"RDMA/OutOfBoundsStart", remoteError(beforeStart, false, opts)},
		{"RDMA/OutOfBoundsWrap", remoteError(addrWrap, false, opts)},
		{"RDMA/WriteWithoutRight", remoteError(writeNoRight, false, opts)},
		{"RDMA/ReadWithoutRight", remoteError(readNoRight, false, opts)},
		{"RDMA/DeregisteredWrite", remoteError(deregWrite, false, opts)},
		{"RDMA/DeregisteredRead", remoteError(deregRead, false, opts)},
		{"RDMA/ReadBadBoundsFromAcceptor", remoteError(beforeStart, true, opts)},
		{"RDMA/WriteWithoutRightFromAcceptor", remoteError(writeNoRight, true, opts)},
		{"Queue/SendFull", testSendQueueFull},
		{"Queue/SendFullBatch", testSendQueueFullBatch},
		{"Queue/RecvFull", testRecvQueueFull},
		{"Queue/ORD", testORD},
		{"InvalidWR", testInvalidWR},
		{"SRQ/Shared", testSRQShared},
		{"SRQ/PostRecv", testSRQPostRecv},
		{"SRQ/Depth", testSRQDepth},
		{"SRQ/CloseConn", testSRQCloseConn},
		{"SRQ/Close", testSRQClose},
		{"SRQ/Empty", testSRQEmpty},
		{"Deregister", testDeregister},
		{"Close/Dialer", testClose(true)},
		{"Close/Acceptor", testClose(false)},
		{"Close/WakesPoll", testCloseWakesPoll},
		{"Close/Device", testDeviceClose},
		{"Concurrent", testConcurrent},
		{"ManyConnections", testManyConnections},
		{"RandomOps", testRandomOps},
		{"GoroutineLeak", testGoroutineLeak},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// env is one subtest's devices, listener and deadline.
type env struct {
	t    testing.TB
	ctx  context.Context
	a, b rdma.Device // a listens, b dials
	l    rdma.Listener
	addr string // the listener's address
}

const maxTestTime = 30 * time.Second

func newEnv(tb testing.TB, f Factory) *env {
	tb.Helper()
	d := maxTestTime
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 2*d {
			d = time.Until(dl) / 2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	a, b, addr := f(tb)
	tb.Cleanup(func() { a.Close(); b.Close() })
	l, err := a.Listen(ctx, addr)
	if err != nil {
		tb.Fatalf("Listen(%q): %v", addr, err)
	}
	tb.Cleanup(func() { l.Close() })
	return &env{t: tb, ctx: ctx, a: a, b: b, l: l, addr: l.Addr().String()}
}

type acceptResult struct {
	c   rdma.Conn
	req rdma.ConnRequest
	err error
}

// acceptAsync accepts one request with cfg and reply private data.
func (e *env) acceptAsync(cfg rdma.QPConfig, pd []byte) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			ch <- acceptResult{err: fmt.Errorf("Listener.Accept: %w", err)}
			return
		}
		c, err := r.Accept(e.ctx, cfg, pd)
		if err != nil {
			err = fmt.Errorf("ConnRequest.Accept: %w", err)
		}
		ch <- acceptResult{c: c, req: r, err: err}
	}()
	return ch
}

// connect returns (dialer's conn, acceptor's conn), closed at cleanup.
func (e *env) connect(dcfg, acfg rdma.QPConfig) (d, a rdma.Conn) {
	e.t.Helper()
	ch := e.acceptAsync(acfg, nil)
	d, _, err := e.b.Dial(e.ctx, e.addr, dcfg, nil)
	if err != nil {
		e.t.Fatalf("Dial: %v", err)
	}
	e.t.Cleanup(func() { d.Close() })
	r := <-ch
	if r.err != nil {
		e.t.Fatal(r.err)
	}
	e.t.Cleanup(func() { r.c.Close() })
	return d, r.c
}

func (e *env) reg(dev rdma.Device, n int, access rdma.Access, seed int) rdma.MemoryRegion {
	e.t.Helper()
	buf := make([]byte, n)
	fill(buf, seed)
	m, err := dev.Register(buf, access)
	if err != nil {
		e.t.Fatalf("Register(%d bytes, %v): %v", n, access, err)
	}
	return m
}

// fill writes a pattern depending on seed and position.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8 + 1)
	}
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

const (
	rw  = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	lw  = rdma.AccessLocalWrite
	all = rw
)

// pollN polls c until it has n completions.
func (e *env) pollN(c rdma.Conn, n int) []rdma.Completion {
	e.t.Helper()
	out := make([]rdma.Completion, 0, n)
	buf := make([]rdma.Completion, 16)
	for len(out) < n {
		k, err := c.Poll(e.ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			e.t.Fatalf("Poll after %d of %d completions %v: %v", len(out), n, out, err)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// drain polls c until it returns rdma.ErrClosed, returning the completions.
func (e *env) drain(c rdma.Conn) []rdma.Completion {
	e.t.Helper()
	var out []rdma.Completion
	buf := make([]rdma.Completion, 16)
	for {
		k, err := c.Poll(e.ctx, buf)
		out = append(out, buf[:k]...)
		if errors.Is(err, rdma.ErrClosed) {
			return out
		}
		if err != nil {
			e.t.Fatalf("Poll while draining (got %v): %v, want rdma.ErrClosed after the completions", out, err)
		}
	}
}

func (e *env) waitDone(c rdma.Conn, who string) {
	e.t.Helper()
	select {
	case <-c.Done():
	case <-e.ctx.Done():
		e.t.Fatalf("%s: Done not closed before the deadline", who)
	}
	if c.Err() == nil {
		e.t.Fatalf("%s: Err() = nil after Done", who)
	}
}

func want(tb testing.TB, got rdma.Completion, id uint64, op rdma.Opcode, st rdma.Status) {
	tb.Helper()
	if got.ID != id || got.Op != op || got.Status != st {
		tb.Fatalf("completion {ID %d, %v, %v (err %v)}, want {ID %d, %v, %v}", got.ID, got.Op, got.Status, got.Err, id, op, st)
	}
}

func sge(m rdma.MemoryRegion, off, n int) []rdma.SGE {
	return []rdma.SGE{{MR: m, Offset: off, Length: n}}
}

func recv(id uint64, m rdma.MemoryRegion, off, n int) rdma.RecvWR {
	return rdma.RecvWR{ID: id, Local: rdma.SGE{MR: m, Offset: off, Length: n}}
}

func send(id uint64, m rdma.MemoryRegion, off, n int) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: rdma.OpSend, Local: sge(m, off, n), Signaled: true}
}

func rdmaWR(id uint64, op rdma.Opcode, local []rdma.SGE, remote rdma.MemoryRegion, off uint64) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: op, Local: local, Signaled: true,
		Remote: rdma.RemoteAddr{Addr: remote.Addr() + off, RKey: remote.RKey()}}
}

// ---- connection management ----

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

func testPollContext(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if n, err := a.Poll(ctx, make([]rdma.Completion, 4)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll on an idle connection = %d, %v; want 0, context.DeadlineExceeded", n, err)
	}
	if e.ctx.Err() != nil {
		t.Fatal("Poll ignored its context")
	}
	pingPong(e, d, a) // the connection survives an abandoned Poll
}

// pingPong checks that d and a can exchange a SEND each way.
func pingPong(e *env, d, a rdma.Conn) {
	e.t.Helper()
	for i, pair := range [][2]rdma.Conn{{d, a}, {a, d}} {
		s, r := pair[0], pair[1]
		sdev, rdev := e.b, e.a
		if i == 1 {
			sdev, rdev = e.a, e.b
		}
		rb := e.reg(rdev, 64, lw, 0)
		sb := e.reg(sdev, 64, 0, 10+i)
		if err := r.PostRecv(recv(100, rb, 0, 64)); err != nil {
			e.t.Fatalf("PostRecv: %v", err)
		}
		if err := s.PostSend(send(200, sb, 0, 64)); err != nil {
			e.t.Fatalf("PostSend: %v", err)
		}
		want(e.t, e.pollN(s, 1)[0], 200, rdma.OpSend, rdma.StatusSuccess)
		c := e.pollN(r, 1)[0]
		want(e.t, c, 100, rdma.OpRecv, rdma.StatusSuccess)
		if c.ByteLen != 64 || !bytes.Equal(rb.Bytes(), sb.Bytes()) {
			e.t.Fatalf("ping-pong data: %d bytes %x, want %x", c.ByteLen, rb.Bytes(), sb.Bytes())
		}
	}
}

// ---- SEND / RECV ----

func testSendRecvSizes(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	sizes := []int{0, 1, 7, 64, 4096, 65536, 1 << 20}
	var rbufs, sbufs []rdma.MemoryRegion
	for i, n := range sizes {
		rb := e.reg(e.a, n+13, lw, 0) // room to spare, at an offset
		rbufs = append(rbufs, rb)
		if err := a.PostRecv(recv(uint64(1000+i), rb, 5, n+8)); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
		sbufs = append(sbufs, e.reg(e.b, n+3, 0, 20+i))
	}
	for i, n := range sizes {
		if err := d.PostSend(send(uint64(i), sbufs[i], 3, n)); err != nil {
			t.Fatalf("PostSend %d bytes: %v", n, err)
		}
	}
	for i, c := range e.pollN(d, len(sizes)) {
		want(t, c, uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
	for i, c := range e.pollN(a, len(sizes)) {
		want(t, c, uint64(1000+i), rdma.OpRecv, rdma.StatusSuccess)
		n := sizes[i]
		if c.ByteLen != n {
			t.Errorf("recv %d: ByteLen %d, want %d", i, c.ByteLen, n)
		}
		got := rbufs[i].Bytes()
		if !bytes.Equal(got[5:5+n], sbufs[i].Bytes()[3:3+n]) {
			t.Errorf("recv %d: %d bytes differ from those sent", i, n)
		}
		if !bytes.Equal(got[:5], pattern(n+13, 0)[:5]) || !bytes.Equal(got[5+n:], pattern(n+13, 0)[5+n:]) {
			t.Errorf("recv %d: bytes outside the received range changed", i)
		}
	}
}

func testSendGather(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{MaxSGE: 3}, rdma.QPConfig{})
	m1, m2 := e.reg(e.b, 100, 0, 1), e.reg(e.b, 300, lw, 2)
	rb := e.reg(e.a, 512, lw, 0)
	if err := a.PostRecv(recv(9, rb, 0, 512)); err != nil {
		t.Fatal(err)
	}
	wr := rdma.SendWR{ID: 1, Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{
		{MR: m1, Offset: 10, Length: 50}, {MR: m2, Offset: 0, Length: 0}, {MR: m2, Offset: 200, Length: 100}}}
	if err := d.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(d, 1)[0], 1, rdma.OpSend, rdma.StatusSuccess)
	c := e.pollN(a, 1)[0]
	want(t, c, 9, rdma.OpRecv, rdma.StatusSuccess)
	exp := append(append([]byte{}, m1.Bytes()[10:60]...), m2.Bytes()[200:300]...)
	if c.ByteLen != 150 || !bytes.Equal(rb.Bytes()[:150], exp) {
		t.Fatalf("gathered SEND: ByteLen %d, data %x, want 150 bytes %x", c.ByteLen, rb.Bytes()[:c.ByteLen], exp)
	}
}

func testSendFIFO(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const n = 100
	d, a := e.connect(rdma.QPConfig{SendDepth: n}, rdma.QPConfig{RecvDepth: n})
	rb := e.reg(e.a, 8*n, lw, 0)
	for i := range n {
		if err := a.PostRecv(recv(uint64(i), rb, 8*i, 8)); err != nil {
			t.Fatal(err)
		}
	}
	sb := e.reg(e.b, 8*n, 0, 0)
	for i := range n {
		binary.BigEndian.PutUint64(sb.Bytes()[8*i:], uint64(i)*3+1)
	}
	for i := range n {
		wr := send(uint64(i), sb, 8*i, 8)
		wr.Signaled = i%10 == 9
		if err := d.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range e.pollN(d, n/10) {
		want(t, c, uint64(10*i+9), rdma.OpSend, rdma.StatusSuccess)
	}
	for i, c := range e.pollN(a, n) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if got := binary.BigEndian.Uint64(rb.Bytes()[8*i:]); got != uint64(i)*3+1 || c.ByteLen != 8 {
			t.Fatalf("receive %d holds message %d (ByteLen %d): SENDs consumed receives out of order", i, (got-1)/3, c.ByteLen)
		}
	}
}

func testSolicited(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 16, lw, 0)
	sb := e.reg(e.b, 16, 0, 1)
	for i := range 3 {
		if err := a.PostRecv(recv(uint64(i), rb, 0, 16)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sol := range []bool{false, true, false} {
		wr := send(uint64(i), sb, 0, 4)
		wr.Solicited = sol
		if err := d.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	e.pollN(d, 3)
	for i, c := range e.pollN(a, 3) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if c.Solicited != (i == 1) {
			t.Errorf("receive %d: Solicited %v, want %v", i, c.Solicited, i == 1)
		}
	}
}

func testUnsignaled(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 16, lw, 0)
	sb := e.reg(e.b, 16, 0, 1)
	tgt := e.reg(e.a, 16, all, 2)
	for i := range 2 {
		if err := a.PostRecv(recv(uint64(i), rb, 8*i, 8)); err != nil {
			t.Fatal(err)
		}
	}
	s0 := send(10, sb, 0, 8)
	s0.Signaled = false
	w := rdmaWR(11, rdma.OpRDMAWrite, sge(sb, 0, 8), tgt, 0)
	w.Signaled = false
	if err := d.PostSend(s0, w, send(12, sb, 8, 8)); err != nil {
		t.Fatal(err)
	}
	// The first completion on the dialer must be the signaled SEND's.
	want(t, e.pollN(d, 1)[0], 12, rdma.OpSend, rdma.StatusSuccess)
	for i, c := range e.pollN(a, 2) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	if !bytes.Equal(rb.Bytes(), sb.Bytes()) || !bytes.Equal(tgt.Bytes()[:8], sb.Bytes()[:8]) {
		t.Fatal("data of unsignaled work requests not delivered")
	}
}

func testBidirectional(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	for range 3 {
		pingPong(e, d, a)
	}
}

func testLocalLength(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { localLength(t, f, opts) }
}

func localLength(t *testing.T, f Factory, opts Options) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 64, lw, 0)
	sb := e.reg(e.b, 64, 0, 1)
	if err := a.PostRecv(recv(1, rb, 0, 16), recv(2, rb, 16, 16)); err != nil {
		t.Fatal(err)
	}
	if err := d.PostRecv(recv(3, e.reg(e.b, 16, lw, 0), 0, 16)); err != nil {
		t.Fatal(err)
	}
	if err := d.PostSend(send(5, sb, 0, 17)); err != nil {
		t.Fatal(err)
	}
	ac := e.drain(a)
	if len(ac) != 2 {
		t.Fatalf("acceptor completions %v, want receive 1 local length error, receive 2 flushed", ac)
	}
	want(t, ac[0], 1, rdma.OpRecv, rdma.StatusLocalLength)
	want(t, ac[1], 2, rdma.OpRecv, rdma.StatusFlushed)
	dcs := e.drain(d)
	var sendC, recvC []rdma.Completion
	for _, c := range dcs {
		if c.Op == rdma.OpRecv {
			recvC = append(recvC, c)
		} else {
			sendC = append(sendC, c)
		}
	}
	okStatus := func(st rdma.Status) bool {
		return st == rdma.StatusRemoteInvalidRequest || st == rdma.StatusRemoteOperation ||
			(opts.CompletesOnTransmit && st == rdma.StatusSuccess)
	}
	if len(sendC) != 1 || sendC[0].ID != 5 || !okStatus(sendC[0].Status) {
		t.Fatalf("sender completions %v, want SEND 5 with remote invalid request or remote operation error", sendC)
	}
	if len(recvC) != 1 {
		t.Fatalf("sender receive completions %v, want receive 3 flushed", recvC)
	}
	want(t, recvC[0], 3, rdma.OpRecv, rdma.StatusFlushed)
	e.waitDone(d, "sender")
	e.waitDone(a, "receiver")
}

func testSendInvalidate(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { sendInvalidate(t, f, opts) }
}

func sendInvalidate(t *testing.T, f Factory, opts Options) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	// The dialer (an SRP initiator) exposes a buffer; the acceptor (target)
	// writes it and invalidates the key with its response.
	ib := e.reg(e.b, 64, all, 0)
	rb := e.reg(e.b, 64, lw, 0)
	tb := e.reg(e.a, 64, 0, 7)
	if err := d.PostRecv(recv(1, rb, 0, 64)); err != nil {
		t.Fatal(err)
	}
	wr := rdmaWR(2, rdma.OpRDMAWrite, sge(tb, 0, 64), ib, 0)
	wr.Signaled = false
	inv := rdma.SendWR{ID: 3, Op: rdma.OpSendInvalidate, Local: sge(tb, 0, 36), Signaled: true, InvalidateRKey: ib.RKey()}
	if err := a.PostSend(wr, inv); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 3, rdma.OpSendInvalidate, rdma.StatusSuccess)
	c := e.pollN(d, 1)[0]
	want(t, c, 1, rdma.OpRecv, rdma.StatusSuccess)
	if !c.Invalidated || c.InvalidatedRKey != ib.RKey() || c.ByteLen != 36 {
		t.Fatalf("receive of SEND with Invalidate: Invalidated %v key %#x ByteLen %d, want true %#x 36",
			c.Invalidated, c.InvalidatedRKey, c.ByteLen, ib.RKey())
	}
	if !bytes.Equal(ib.Bytes(), tb.Bytes()) {
		t.Fatal("RDMA WRITE before the SEND with Invalidate not placed")
	}
	// The key no longer grants remote access.
	if err := a.PostSend(rdmaWR(4, rdma.OpRDMAWrite, sge(tb, 0, 8), ib, 0)); err != nil {
		t.Fatal(err)
	}
	c = e.pollN(a, 1)[0]
	if opts.CompletesOnTransmit && c.Status == rdma.StatusSuccess {
		e.waitDone(a, "requester of a WRITE with an invalidated key")
		return
	}
	if c.ID != 4 || c.Op != rdma.OpRDMAWrite || !opts.remoteAccessOK(c.Status) {
		t.Fatalf("WRITE with an invalidated key: %+v, want a remote access error", c)
	}
}

// ---- RDMA WRITE / READ ----

// testWriteRead runs RDMA WRITE and READ from the dialer into the acceptor's
// memory and, as an SRP target does, from the acceptor into the dialer's.
func testWriteRead(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { writeReadBothWays(t, f, opts) }
}

func writeReadBothWays(t *testing.T, f Factory, opts Options) {
	for _, dialerRequests := range []bool{true, false} {
		name := "AcceptorRequests"
		if dialerRequests {
			name = "DialerRequests"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, f)
			cfg := rdma.QPConfig{MaxSGE: 4}
			d, a := e.connect(cfg, cfg)
			if dialerRequests {
				writeRead(t, e, opts, d, a, e.b, e.a)
			} else {
				writeRead(t, e, opts, a, d, e.a, e.b)
			}
			pingPong(e, d, a)
		})
	}
}

// writeRead: req (on device rdev) writes and reads memory of device tdev,
// the device of resp.
func writeRead(t *testing.T, e *env, opts Options, req, resp rdma.Conn, rdev, tdev rdma.Device) {
	d := req
	const size = 256 << 10
	tgt := e.reg(tdev, size, all, 0)
	src1, src2 := e.reg(rdev, size, 0, 1), e.reg(rdev, 1000, 0, 2)
	cases := []struct {
		off  uint64
		sges []rdma.SGE
	}{
		{0, sge(src1, 0, size)},       // whole region
		{size - 1, sge(src2, 999, 1)}, // last byte
		{4093, sge(src1, 17, 8192)},   // unaligned, crossing pages
		{100, []rdma.SGE{{MR: src2, Offset: 0, Length: 1000}, {MR: src1, Offset: 5, Length: 3000}, {MR: src2, Offset: 500, Length: 1}}},
	}
	expect := pattern(size, 0)
	fence := e.reg(rdev, 1, lw, 0)
	for i, tc := range cases {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMAWrite, tc.sges, tgt, tc.off)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		want(t, e.pollN(d, 1)[0], uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
		if opts.CompletesOnTransmit {
			// The completion says nothing of placement; a READ behind the
			// WRITE returns only after it (RC ordering).
			if err := d.PostSend(rdmaWR(50, rdma.OpRDMARead, sge(fence, 0, 1), tgt, 0)); err != nil {
				t.Fatalf("fence READ: %v", err)
			}
			want(t, e.pollN(d, 1)[0], 50, rdma.OpRDMARead, rdma.StatusSuccess)
		}
		o := int(tc.off)
		for _, s := range tc.sges {
			o += copy(expect[o:], s.Bytes())
		}
		if !bytes.Equal(tgt.Bytes(), expect) {
			t.Fatalf("write %d (%d bytes at offset %d): target memory differs", i, o-int(tc.off), tc.off)
		}
	}
	// Read back ranges, scattering into several sinks.
	fill(tgt.Bytes(), 9) // the acceptor's own update, visible to later READs
	sink1, sink2 := e.reg(rdev, size, lw, 3), e.reg(rdev, 4096, lw, 4)
	reads := []struct {
		off  uint64
		sges []rdma.SGE
	}{
		{0, sge(sink1, 0, size)},
		{size - 1, sge(sink2, 4095, 1)},
		{777, []rdma.SGE{{MR: sink2, Offset: 1, Length: 100}, {MR: sink1, Offset: 9, Length: 5000}}},
	}
	// A region granting only remote read (no local write) is readable.
	ro := e.reg(tdev, 100, rdma.AccessRemoteRead, 11)
	if err := d.PostSend(rdmaWR(99, rdma.OpRDMARead, sge(sink2, 0, 100), ro, 0)); err != nil {
		t.Fatalf("read of a remote-read-only region: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 99, rdma.OpRDMARead, rdma.StatusSuccess)
	if !bytes.Equal(sink2.Bytes()[:100], ro.Bytes()) {
		t.Fatal("read of a remote-read-only region: data differs")
	}
	for i, tc := range reads {
		if err := d.PostSend(rdmaWR(uint64(100+i), rdma.OpRDMARead, tc.sges, tgt, tc.off)); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		c := e.pollN(d, 1)[0]
		want(t, c, uint64(100+i), rdma.OpRDMARead, rdma.StatusSuccess)
		o := int(tc.off)
		for _, s := range tc.sges {
			if !bytes.Equal(s.Bytes(), tgt.Bytes()[o:o+s.Length]) {
				t.Fatalf("read %d: sink differs from the target's bytes at offset %d", i, o)
			}
			o += s.Length
		}
		if c.ByteLen != o-int(tc.off) {
			t.Errorf("read %d: ByteLen %d, want %d", i, c.ByteLen, o-int(tc.off))
		}
	}
}

func testWriteSendOrdering(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	const size = 64 << 10
	tgt := e.reg(e.a, size, all, 0)
	rb := e.reg(e.a, 8, lw, 0)
	src := e.reg(e.b, size, 0, 0)
	note := e.reg(e.b, 8, 0, 0)
	for i := range 50 {
		fill(src.Bytes(), 100+i)
		if err := a.PostRecv(recv(uint64(i), rb, 0, 8)); err != nil {
			t.Fatal(err)
		}
		w := rdmaWR(0, rdma.OpRDMAWrite, sge(src, 0, size), tgt, 0)
		w.Signaled = false
		if err := d.PostSend(w, send(uint64(i), note, 0, 8)); err != nil {
			t.Fatal(err)
		}
		want(t, e.pollN(a, 1)[0], uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if !bytes.Equal(tgt.Bytes(), pattern(size, 100+i)) {
			t.Fatalf("round %d: SEND arrived before the preceding RDMA WRITE's data", i)
		}
		want(t, e.pollN(d, 1)[0], uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
}

func testZeroLength(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	tgt := e.reg(e.a, 16, all, 0)
	wrs := []rdma.SendWR{
		{ID: 1, Op: rdma.OpRDMAWrite, Signaled: true},                                                       // STag 0, TO 0, as ib_srpt sends
		{ID: 2, Op: rdma.OpRDMARead, Signaled: true},                                                        // no SGE
		{ID: 3, Op: rdma.OpRDMAWrite, Signaled: true, Remote: rdma.RemoteAddr{Addr: 1 << 60, RKey: 0x5eed}}, // bogus key
		{ID: 4, Op: rdma.OpRDMARead, Signaled: true, Local: sge(e.reg(e.b, 4, lw, 0), 2, 0),
			Remote: rdma.RemoteAddr{Addr: tgt.Addr() + 1000, RKey: tgt.RKey()}}, // empty SGE, out of bounds
	}
	if err := d.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for i, c := range e.pollN(d, len(wrs)) {
		want(t, c, wrs[i].ID, wrs[i].Op, rdma.StatusSuccess)
		if c.ByteLen != 0 {
			t.Errorf("zero-length %v: ByteLen %d", c.Op, c.ByteLen)
		}
	}
	pingPong(e, d, a) // still up
}

// remoteCase makes a bad RDMA work request against a region of dev.
type remoteCase func(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR

func badRKey(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
	wr.Remote.RKey ^= 0x00ffff00 // some other key, most likely unknown
	for _, k := range []uint32{m.RKey(), m.LKey()} {
		if wr.Remote.RKey == k {
			wr.Remote.RKey ^= 0x80000000
		}
	}
	return wr
}

func pastEnd(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 57) // last byte at 64
}

func beforeStart(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMARead, sge(local, 0, 8), m, 0)
	wr.Remote.Addr--
	return wr
}

func addrWrap(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
	wr.Remote.Addr = ^uint64(0) - 3 // the range wraps past 2^64
	return wr
}

func writeNoRight(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, lw|rdma.AccessRemoteRead, 0)
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
}

func readNoRight(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, lw|rdma.AccessRemoteWrite, 0)
	return rdmaWR(7, rdma.OpRDMARead, sge(local, 0, 8), m, 0)
}

func deregWrite(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	if err := m.Deregister(); err != nil {
		e.t.Fatal(err)
	}
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
}

func deregRead(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	wr := deregWrite(e, dev, local)
	wr.Op = rdma.OpRDMARead
	return wr
}

// testRemoteError posts a bad RDMA request from the dialer, followed by a
// SEND, with receives posted on both sides, and checks the error completion,
// the flushes and the teardown on both sides.
// remoteError: with fromAcceptor the acceptor is the requester (as an SRP
// target reading or writing initiator memory), else the dialer.
func remoteError(mk remoteCase, fromAcceptor bool, opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) {
		e := newEnv(t, f)
		// d is the requester, a the responder.
		d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		reqDev, respDev := e.b, e.a
		if fromAcceptor {
			d, a = a, d
			reqDev, respDev = e.a, e.b
		}
		local := e.reg(reqDev, 64, lw, 0)
		rbA, rbD := e.reg(respDev, 64, lw, 0), e.reg(reqDev, 64, lw, 0)
		if err := a.PostRecv(recv(21, rbA, 0, 32), recv(22, rbA, 32, 32)); err != nil {
			t.Fatal(err)
		}
		if err := d.PostRecv(recv(31, rbD, 0, 32)); err != nil {
			t.Fatal(err)
		}
		bad := mk(e, respDev, local)
		err := d.PostSend(bad, send(8, local, 0, 8))
		if err != nil && !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("PostSend: %v", err)
		}
		// The first completion must be the error (a success means the
		// access was wrongly allowed; fail at once rather than at the
		// deadline), unless WRITEs complete on transmit.
		first := e.pollN(d, 1)[0]
		onTransmit := opts.CompletesOnTransmit && bad.Op == rdma.OpRDMAWrite && first.Status == rdma.StatusSuccess
		if first.ID != 7 || first.Op != bad.Op || (!opts.remoteAccessOK(first.Status) && !onTransmit) {
			t.Fatalf("completion {ID %d, %v, %v (err %v)}, want {ID 7, %v, remote access error}", first.ID, first.Op, first.Status, first.Err, bad.Op)
		}
		sends := []rdma.Completion{first}
		var recvs []rdma.Completion
		for _, c := range e.drain(d) {
			if c.Op == rdma.OpRecv {
				recvs = append(recvs, c)
			} else {
				sends = append(sends, c)
			}
		}
		switch {
		case len(sends) == 2 && opts.CompletesOnTransmit:
			// The SEND may have gone out before the error came back.
			if sends[1].ID != 8 || sends[1].Op != rdma.OpSend {
				t.Fatalf("requester send completions %v, want the WRITE then SEND 8", sends)
			}
		case len(sends) == 2:
			want(t, sends[1], 8, rdma.OpSend, rdma.StatusFlushed)
		case len(sends) == 1 && err != nil:
			// The SEND was refused with ErrClosed.
		default:
			t.Fatalf("requester send completions %v, want the error then SEND 8 flushed (or refused)", sends)
		}
		if len(recvs) != 1 {
			t.Fatalf("requester receive completions %v, want receive 31 flushed", recvs)
		}
		want(t, recvs[0], 31, rdma.OpRecv, rdma.StatusFlushed)
		ac := e.drain(a)
		if len(ac) != 2 {
			t.Fatalf("responder completions %v, want receives 21, 22 flushed", ac)
		}
		want(t, ac[0], 21, rdma.OpRecv, rdma.StatusFlushed)
		want(t, ac[1], 22, rdma.OpRecv, rdma.StatusFlushed)
		e.waitDone(d, "requester")
		e.waitDone(a, "responder")
		if bad.Op == rdma.OpRDMARead && !bytes.Equal(local.Bytes()[:8], pattern(64, 0)[:8]) {
			t.Error("refused RDMA READ placed data in the sink")
		}
		if err := d.PostSend(send(9, local, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("PostSend on a down connection: %v, want rdma.ErrClosed", err)
		}
		if err := a.PostRecv(recv(23, rbA, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("PostRecv on a down connection: %v, want rdma.ErrClosed", err)
		}
	}
}

// ---- queue limits ----

const maxQueueTest = 4096

func testSendQueueFull(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{SendDepth: 8}, rdma.QPConfig{})
	depth := d.Caps().SendDepth
	if depth > maxQueueTest {
		t.Skipf("SendDepth %d too large to fill", depth)
	}
	tgt := e.reg(e.a, 64, all, 0)
	src := e.reg(e.b, 64, 0, 1)
	for i := range depth {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); err != nil {
			t.Fatalf("post %d of SendDepth %d: %v", i, depth, err)
		}
	}
	if err := d.PostSend(rdmaWR(999, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("post beyond SendDepth %d with no completion polled: %v, want rdma.ErrQueueFull", depth, err)
	}
	for i, c := range e.pollN(d, depth) {
		want(t, c, uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
	}
	if err := d.PostSend(rdmaWR(1000, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); err != nil {
		t.Fatalf("post after polling: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 1000, rdma.OpRDMAWrite, rdma.StatusSuccess)
	pingPong(e, d, a)
}

func testSendQueueFullBatch(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, _ := e.connect(rdma.QPConfig{SendDepth: 4}, rdma.QPConfig{})
	depth := d.Caps().SendDepth
	if depth > maxQueueTest {
		t.Skipf("SendDepth %d too large to fill", depth)
	}
	tgt := e.reg(e.a, 64, all, 0)
	src := e.reg(e.b, 64, 0, 1)
	wrs := make([]rdma.SendWR, depth+2)
	for i := range wrs {
		wrs[i] = rdmaWR(uint64(i), rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 0)
	}
	if err := d.PostSend(wrs...); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("posting %d work requests at once into SendDepth %d: %v, want rdma.ErrQueueFull", len(wrs), depth, err)
	}
	for i, c := range e.pollN(d, depth) {
		want(t, c, uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
	}
	if err := d.PostSend(rdmaWR(500, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 0)); err != nil {
		t.Fatal(err)
	}
	// Exactly SendDepth of the batch were posted: the next completion is 500's.
	want(t, e.pollN(d, 1)[0], 500, rdma.OpRDMAWrite, rdma.StatusSuccess)
}

func testRecvQueueFull(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{RecvDepth: 8})
	depth := a.Caps().RecvDepth
	if depth > maxQueueTest {
		t.Skipf("RecvDepth %d too large to fill", depth)
	}
	rb := e.reg(e.a, 16, lw, 0)
	for i := range depth {
		if err := a.PostRecv(recv(uint64(i), rb, 0, 16)); err != nil {
			t.Fatalf("post %d of RecvDepth %d: %v", i, depth, err)
		}
	}
	if err := a.PostRecv(recv(999, rb, 0, 16)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("post beyond RecvDepth %d: %v, want rdma.ErrQueueFull", depth, err)
	}
	sb := e.reg(e.b, 16, 0, 0)
	if err := d.PostSend(send(1, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 0, rdma.OpRecv, rdma.StatusSuccess)
	if err := a.PostRecv(recv(1000, rb, 0, 16)); err != nil {
		t.Fatalf("post after a receive completed and was polled: %v", err)
	}
}

func testORD(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, _ := e.connect(rdma.QPConfig{ORD: 2, SendDepth: 16}, rdma.QPConfig{IRD: 4})
	ord := d.Caps().ORD
	if ord < 1 || ord > 2 {
		t.Fatalf("ORD %d, want 1..2 as requested", ord)
	}
	tgt := e.reg(e.a, 64, all, 0)
	sink := e.reg(e.b, 64, lw, 0)
	for i := range ord {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMARead, sge(sink, 8*i, 8), tgt, 0)); err != nil {
			t.Fatalf("READ %d of ORD %d: %v", i, ord, err)
		}
	}
	if err := d.PostSend(rdmaWR(99, rdma.OpRDMARead, sge(sink, 0, 8), tgt, 0)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("READ beyond ORD %d: %v, want rdma.ErrQueueFull", ord, err)
	}
	// Other work is not limited by ORD.
	if err := d.PostSend(rdmaWR(100, rdma.OpRDMAWrite, sge(sink, 0, 8), tgt, 0)); err != nil {
		t.Fatalf("WRITE with ORD READs outstanding: %v", err)
	}
	cs := e.pollN(d, ord+1)
	for i := range ord {
		want(t, cs[i], uint64(i), rdma.OpRDMARead, rdma.StatusSuccess)
	}
	want(t, cs[ord], 100, rdma.OpRDMAWrite, rdma.StatusSuccess)
	if err := d.PostSend(rdmaWR(101, rdma.OpRDMARead, sge(sink, 0, 8), tgt, 0)); err != nil {
		t.Fatalf("READ after polling: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 101, rdma.OpRDMARead, rdma.StatusSuccess)
}

func testInvalidWR(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{MaxSGE: 2}, rdma.QPConfig{})
	maxSGE := d.Caps().MaxSGE
	m := e.reg(e.b, 64, lw, 0)
	ro := e.reg(e.b, 64, 0, 0)
	tgt := e.reg(e.a, 64, all, 0)
	many := make([]rdma.SGE, maxSGE+1)
	for i := range many {
		many[i] = rdma.SGE{MR: m, Offset: i % 64, Length: 0}
	}
	cases := []struct {
		name string
		wr   rdma.SendWR
	}{
		{"opcode 0", rdma.SendWR{ID: 1, Signaled: true}},
		{"opcode RECV", rdma.SendWR{ID: 1, Op: rdma.OpRecv, Signaled: true}},
		{"SGE past its region", send(1, m, 60, 5)},
		{"SGE negative offset", send(1, m, -1, 2)},
		{"too many SGEs", rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: many, Signaled: true}},
		{"READ into a region without local write", rdmaWR(1, rdma.OpRDMARead, sge(ro, 0, 8), tgt, 0)},
		{"SGE without region", rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: []rdma.SGE{{Length: 1}}, Signaled: true}},
	}
	if maxSGE > maxQueueTest {
		cases = cases[:4]
	}
	for _, tc := range cases {
		if err := d.PostSend(tc.wr); !errors.Is(err, rdma.ErrInvalidWR) {
			t.Errorf("PostSend %s: %v, want rdma.ErrInvalidWR", tc.name, err)
		}
	}
	if err := d.PostRecv(recv(1, ro, 0, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostRecv into a region without local write: %v, want rdma.ErrInvalidWR", err)
	}
	if err := d.PostRecv(recv(1, m, 32, 33)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostRecv past the region: %v, want rdma.ErrInvalidWR", err)
	}
	pingPong(e, d, a) // nothing was posted, the connection is fine
}

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

func testConcurrent(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const workers, per = 4, 100
	const total = workers * per
	cfg := rdma.QPConfig{SendDepth: total + 16, RecvDepth: total + 16}
	d, a := e.connect(cfg, cfg)
	// Both sides post all receives first, then both send concurrently from
	// several goroutines each, while one goroutine per side polls.
	type side struct {
		c       rdma.Conn
		dev     rdma.Device
		rb, sb  rdma.MemoryRegion
		errs    chan error
		results chan []rdma.Completion
	}
	sides := []*side{{c: d, dev: e.b}, {c: a, dev: e.a}}
	for _, s := range sides {
		s.rb = e.reg(s.dev, 16*total, lw, 0)
		s.sb = e.reg(s.dev, 16*total, 0, 0)
		s.errs = make(chan error, workers+1)
		s.results = make(chan []rdma.Completion, 1)
		for i := range total {
			if err := s.c.PostRecv(recv(uint64(i), s.rb, 16*i, 16)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for si, s := range sides {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range per {
					slot := w*per + k
					b := s.sb.Bytes()[16*slot : 16*slot+16]
					binary.BigEndian.PutUint64(b, uint64(w))
					binary.BigEndian.PutUint64(b[8:], uint64(k))
					if err := s.c.PostSend(send(uint64(slot), s.sb, 16*slot, 16)); err != nil {
						s.errs <- fmt.Errorf("side %d worker %d send %d: %w", si, w, k, err)
						return
					}
				}
			}()
		}
		go func() {
			// Poll all sends and receives of this side (2*total completions).
			var got []rdma.Completion
			buf := make([]rdma.Completion, 32)
			for len(got) < 2*total {
				n, err := s.c.Poll(e.ctx, buf)
				if err != nil {
					s.errs <- fmt.Errorf("side %d Poll after %d completions: %w", si, len(got), err)
					s.results <- got
					return
				}
				got = append(got, buf[:n]...)
			}
			s.results <- got
		}()
	}
	wg.Wait()
	for si, s := range sides {
		got := <-s.results
		select {
		case err := <-s.errs:
			t.Fatal(err)
		default:
		}
		nsend, nrecv := 0, 0
		next := [workers]uint64{}
		for _, c := range got {
			if c.Status != rdma.StatusSuccess {
				t.Fatalf("side %d: completion %+v", si, c)
			}
			if c.Op == rdma.OpSend {
				nsend++
				continue
			}
			if c.ID != uint64(nrecv) {
				t.Fatalf("side %d: receive completion %d has ID %d: out of order", si, nrecv, c.ID)
			}
			nrecv++
			b := s.rb.Bytes()[16*c.ID:]
			w, k := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
			if w >= workers || k != next[w] {
				t.Fatalf("side %d: message (worker %d, #%d) arrived, expected #%d of that worker: per-poster order broken", si, w, k, next[min(w, workers-1)])
			}
			next[w]++
		}
		if nsend != total || nrecv != total {
			t.Fatalf("side %d: %d send and %d receive completions, want %d each", si, nsend, nrecv, total)
		}
	}
}

func testManyConnections(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const n = 32
	accepted := make(chan acceptResult, n)
	go func() {
		for range n {
			r, err := e.l.Accept(e.ctx)
			if err != nil {
				accepted <- acceptResult{err: err}
				return
			}
			c, err := r.Accept(e.ctx, rdma.QPConfig{SendDepth: 4, RecvDepth: 4}, r.PrivateData())
			accepted <- acceptResult{c: c, req: r, err: err}
		}
	}()
	type dialed struct {
		c   rdma.Conn
		idx byte
	}
	var ds []dialed
	var as []rdma.Conn
	defer func() {
		for _, d := range ds {
			d.c.Close()
		}
		for _, a := range as {
			a.Close()
		}
	}()
	byIdx := map[byte]rdma.Conn{}
	for i := range n {
		c, rep, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{SendDepth: 4, RecvDepth: 4}, []byte{byte(i)})
		if err != nil {
			t.Fatalf("Dial %d: %v", i, err)
		}
		if len(rep) != 1 || rep[0] != byte(i) {
			t.Fatalf("Dial %d: reply private data %x, want %02x", i, rep, i)
		}
		ds = append(ds, dialed{c, byte(i)})
	}
	for range n {
		r := <-accepted
		if r.err != nil {
			t.Fatal(r.err)
		}
		as = append(as, r.c)
		byIdx[r.req.PrivateData()[0]] = r.c
	}
	rb := e.reg(e.a, n, lw, 0)
	sb := e.reg(e.b, n, 0, 0)
	for i := range n {
		sb.Bytes()[i] = byte(i) ^ 0x5a
		if err := byIdx[byte(i)].PostRecv(recv(uint64(i), rb, i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range ds {
		if err := d.c.PostSend(send(uint64(d.idx), sb, int(d.idx), 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range ds {
		want(t, e.pollN(d.c, 1)[0], uint64(d.idx), rdma.OpSend, rdma.StatusSuccess)
		want(t, e.pollN(byIdx[d.idx], 1)[0], uint64(d.idx), rdma.OpRecv, rdma.StatusSuccess)
		if rb.Bytes()[d.idx] != d.idx^0x5a {
			t.Fatalf("connection %d delivered %#x, want %#x", d.idx, rb.Bytes()[d.idx], d.idx^0x5a)
		}
	}
	for i, d := range ds {
		if i%2 == 0 {
			d.c.Close()
		} else {
			byIdx[d.idx].Close()
		}
	}
	for _, d := range ds {
		e.waitDone(d.c, fmt.Sprintf("dialer %d", d.idx))
		e.waitDone(byIdx[d.idx], fmt.Sprintf("acceptor %d", d.idx))
	}
}

func testGoroutineLeak(t *testing.T, f Factory) {
	before := runtime.NumGoroutine()
	func() {
		e := newEnv(t, f)
		d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		pingPong(e, d, a)
		tgt := e.reg(e.a, 4096, all, 0)
		if err := d.PostSend(rdmaWR(1, rdma.OpRDMAWrite, sge(e.reg(e.b, 4096, 0, 1), 0, 4096), tgt, 0)); err != nil {
			t.Fatal(err)
		}
		e.pollN(d, 1)
		d2, a2 := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		d2.Close()
		e.waitDone(a2, "acceptor")
		// A rejected request and a failed dial.
		go func() {
			if r, err := e.l.Accept(e.ctx); err == nil {
				r.Reject(nil)
			}
		}()
		if c, _, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, nil); err == nil {
			c.Close()
			t.Fatal("Dial succeeded against a rejecting listener")
		}
		e.l.Close()
		e.a.Close()
		e.b.Close()
		e.waitDone(d, "dialer")
		e.waitDone(a, "acceptor")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return
		}
		if time.Now().After(deadline) {
			var sb strings.Builder
			pprof.Lookup("goroutine").WriteTo(&sb, 1)
			t.Fatalf("%d goroutines before, %d after closing everything:\n%s", before, now, sb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
