package loopback

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/rdmatest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	d := 20 * time.Second
	if dl, ok := t.Deadline(); ok && time.Until(dl) < 2*d {
		d = time.Until(dl) / 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect returns a connected pair (dialer end, acceptor end) on fresh devices.
func connect(t *testing.T, dcfg, acfg rdma.QPConfig, opts ...Option) (dc, ac *Conn, dd, ad *Device) {
	t.Helper()
	ctx := testCtx(t)
	n := NewNetwork()
	ad = n.NewDevice("tgt", opts...)
	dd = n.NewDevice("ini", opts...)
	t.Cleanup(func() { ad.Close(); dd.Close() })
	l, err := ad.Listen(ctx, "tgt:1")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := r.Accept(ctx, acfg, nil)
		ch <- res{c, err}
	}()
	c, _, err := dd.Dial(ctx, "tgt:1", dcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return c.(*Conn), r.c.(*Conn), dd, ad
}

func poll1(t *testing.T, c rdma.Conn) rdma.Completion {
	t.Helper()
	var out [1]rdma.Completion
	n, err := c.Poll(testCtx(t), out[:])
	if err != nil || n != 1 {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	return out[0]
}

func mustReg(t *testing.T, d *Device, n int, a rdma.Access) rdma.MemoryRegion {
	t.Helper()
	m, err := d.Register(make([]byte, n), a)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSmokeSendWriteRead(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	rbuf := mustReg(t, ad, 64, rdma.AccessLocalWrite)
	if err := ac.PostRecv(rdma.RecvWR{ID: 7, Local: rdma.SGE{MR: rbuf, Length: 64}}); err != nil {
		t.Fatal(err)
	}
	sbuf := mustReg(t, dd, 64, 0)
	copy(sbuf.Bytes(), "hello")
	if err := dc.PostSend(rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: []rdma.SGE{{MR: sbuf, Length: 5}}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := poll1(t, dc); c.ID != 1 || c.Status != rdma.StatusSuccess || c.Op != rdma.OpSend {
		t.Fatalf("send completion %+v", c)
	}
	if c := poll1(t, ac); c.ID != 7 || c.Op != rdma.OpRecv || c.ByteLen != 5 || c.Status != rdma.StatusSuccess {
		t.Fatalf("recv completion %+v", c)
	}
	if string(rbuf.Bytes()[:5]) != "hello" {
		t.Fatalf("received %q", rbuf.Bytes()[:5])
	}

	// RDMA WRITE into the acceptor's memory, READ it back.
	tgt := mustReg(t, ad, 100, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	copy(sbuf.Bytes(), "0123456789")
	if err := dc.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: sbuf, Length: 10}},
		Remote: rdma.RemoteAddr{Addr: tgt.Addr() + 50, RKey: tgt.RKey()}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := poll1(t, dc); c.ID != 2 || c.Status != rdma.StatusSuccess {
		t.Fatalf("write completion %+v", c)
	}
	if !bytes.Equal(tgt.Bytes()[50:60], []byte("0123456789")) {
		t.Fatalf("written %q", tgt.Bytes()[50:60])
	}
	sink := mustReg(t, dd, 10, rdma.AccessLocalWrite)
	if err := dc.PostSend(rdma.SendWR{ID: 3, Op: rdma.OpRDMARead, Local: []rdma.SGE{{MR: sink, Length: 10}},
		Remote: rdma.RemoteAddr{Addr: tgt.Addr() + 50, RKey: tgt.RKey()}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := poll1(t, dc); c.ID != 3 || c.Status != rdma.StatusSuccess || c.ByteLen != 10 {
		t.Fatalf("read completion %+v", c)
	}
	if string(sink.Bytes()) != "0123456789" {
		t.Fatalf("read %q", sink.Bytes())
	}
}

func TestDialRefused(t *testing.T) {
	ctx := testCtx(t)
	d := NewNetwork().NewDevice("x")
	defer d.Close()
	_, _, err := d.Dial(ctx, "nobody", rdma.QPConfig{}, nil)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial to nobody: %v", err)
	}
}

func newPairFactory(opts ...Option) rdmatest.Factory {
	return func(tb testing.TB) (a, b rdma.Device, addr string) {
		n := NewNetwork()
		return n.NewDevice("a", opts...), n.NewDevice("b", opts...), "a:listen"
	}
}

func TestConformance(t *testing.T) {
	rdmatest.Run(t, newPairFactory())
}

// TestConformanceCompleteOnTransmit runs the suite relaxed for iWARP-style
// completions against the loopback in that mode.
func TestConformanceCompleteOnTransmit(t *testing.T) {
	rdmatest.RunWith(t, newPairFactory(WithCompleteOnTransmit()), rdmatest.Options{CompletesOnTransmit: true})
}

func TestCompleteOnTransmit(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{}, WithCompleteOnTransmit())
	tgt := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	loc := mustReg(t, dd, 8, rdma.AccessLocalWrite)
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(5, rb, 8)); err != nil {
		t.Fatal(err)
	}
	if err := dc.PostSend(writeWR(1, loc, tgt, 8)); err != nil { // no remote write right
		t.Fatal(err)
	}
	cs := pollAll(t, dc)
	if len(cs) != 1 {
		t.Fatalf("completions %v", cs)
	}
	wantC(t, cs[0], 1, rdma.OpRDMAWrite, rdma.StatusSuccess)
	var te *rdma.TerminateError
	if !errors.As(dc.Err(), &te) || te.Local || te.Code != 0x02 {
		t.Fatalf("Err %v, want the peer's access rights terminate", dc.Err())
	}
	wantC(t, pollAll(t, ac)[0], 5, rdma.OpRecv, rdma.StatusFlushed)

	// A refused READ still reports its error.
	dc2, _, dd2, ad2 := connect(t, rdma.QPConfig{}, rdma.QPConfig{}, WithCompleteOnTransmit())
	src := mustReg(t, ad2, 8, rdma.AccessLocalWrite)
	if err := dc2.PostSend(readWR(1, mustReg(t, dd2, 8, rdma.AccessLocalWrite), src, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, pollAll(t, dc2)[0], 1, rdma.OpRDMARead, rdma.StatusRemoteAccess)
}

// TestConformanceAsync runs the suite against asynchronous execution.
func TestConformanceAsync(t *testing.T) {
	rdmatest.Run(t, newPairFactory(WithAsyncExecution()))
}

func BenchmarkLoopback(b *testing.B) {
	rdmatest.Benchmark(b, newPairFactory())
}

// pollAll polls c until it returns rdma.ErrClosed.
func pollAll(t *testing.T, c rdma.Conn) []rdma.Completion {
	t.Helper()
	ctx := testCtx(t)
	var out []rdma.Completion
	buf := make([]rdma.Completion, 8)
	for {
		n, err := c.Poll(ctx, buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, rdma.ErrClosed) {
			return out
		}
		if err != nil {
			t.Fatalf("Poll: %v (after %v)", err, out)
		}
	}
}

func wantC(t *testing.T, got rdma.Completion, id uint64, op rdma.Opcode, st rdma.Status) {
	t.Helper()
	if got.ID != id || got.Op != op || got.Status != st {
		t.Fatalf("completion {%d %v %v err=%v}, want {%d %v %v}", got.ID, got.Op, got.Status, got.Err, id, op, st)
	}
}

func sendWR(id uint64, m rdma.MemoryRegion, n int) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: rdma.OpSend, Local: []rdma.SGE{{MR: m, Length: n}}, Signaled: true}
}

func recvWR(id uint64, m rdma.MemoryRegion, n int) rdma.RecvWR {
	return rdma.RecvWR{ID: id, Local: rdma.SGE{MR: m, Length: n}}
}

func writeWR(id uint64, src, dst rdma.MemoryRegion, n int) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: src, Length: n}},
		Remote: rdma.RemoteAddr{Addr: dst.Addr(), RKey: dst.RKey()}, Signaled: true}
}

func readWR(id uint64, sink, src rdma.MemoryRegion, n int) rdma.SendWR {
	w := writeWR(id, sink, src, n)
	w.Op = rdma.OpRDMARead
	return w
}

func TestCapsNegotiation(t *testing.T) {
	dc, ac, _, _ := connect(t, rdma.QPConfig{IRD: 8, ORD: 8}, rdma.QPConfig{IRD: 2, ORD: 3, SendDepth: 5})
	// Each ORD is the smaller of its own ORD and the peer's IRD; each IRD the
	// peer's resulting ORD.
	wantD := rdma.Caps{SendDepth: DefaultSendDepth, RecvDepth: DefaultRecvDepth, MaxSGE: DefaultMaxSGE, IRD: 3, ORD: 2}
	wantA := rdma.Caps{SendDepth: 5, RecvDepth: DefaultRecvDepth, MaxSGE: DefaultMaxSGE, IRD: 2, ORD: 3}
	if dc.Caps() != wantD || ac.Caps() != wantA {
		t.Fatalf("caps dialer %+v acceptor %+v, want %+v %+v", dc.Caps(), ac.Caps(), wantD, wantA)
	}
	if dc.LocalAddr().String() != ac.RemoteAddr().String() || ac.LocalAddr().String() != "tgt:1" ||
		dc.RemoteAddr().String() != "tgt:1" || dc.LocalAddr().Network() != "loopback" {
		t.Fatalf("addresses: dialer %v->%v, acceptor %v->%v", dc.LocalAddr(), dc.RemoteAddr(), ac.LocalAddr(), ac.RemoteAddr())
	}
}

func TestBadConfig(t *testing.T) {
	ctx := testCtx(t)
	n := NewNetwork()
	d := n.NewDevice("d")
	defer d.Close()
	for _, cfg := range []rdma.QPConfig{{SendDepth: -1}, {RecvDepth: MaxDepth + 1}, {MaxSGE: MaxSGE + 1}, {IRD: -2}, {ORD: MaxRD + 1}} {
		if _, _, err := d.Dial(ctx, "x", cfg, nil); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Dial with %+v: %v, want a configuration error", cfg, err)
		}
	}
}

func TestListenAddresses(t *testing.T) {
	ctx := testCtx(t)
	n := NewNetwork()
	d := n.NewDevice("d")
	defer d.Close()
	l1, err := d.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := d.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if l1.Addr().String() == l2.Addr().String() || l1.Addr().String() == "" {
		t.Fatalf("generated addresses %q and %q", l1.Addr(), l2.Addr())
	}
	if _, err := n.NewDevice("e").Listen(ctx, l1.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener on %q: %v, want EADDRINUSE", l1.Addr(), err)
	}
	l1.Close()
	l3, err := d.Listen(ctx, l1.Addr().String())
	if err != nil {
		t.Fatalf("listen on a released address: %v", err)
	}
	l3.Close()
	// Another network is another namespace.
	if l, err := NewNetwork().NewDevice("f").Listen(ctx, l2.Addr().String()); err != nil {
		t.Fatalf("same address on another network: %v", err)
	} else {
		l.Close()
	}
}

func TestRegister(t *testing.T) {
	d := NewNetwork().NewDevice("d")
	if _, err := d.Register(nil, rdma.AccessRemoteWrite); err == nil {
		t.Error("remote write without local write accepted")
	}
	if _, err := d.Register(nil, 1<<7); err == nil {
		t.Error("unknown access bit accepted")
	}
	seen := map[uint32]bool{}
	var prevEnd uint64
	for i, n := range []int{0, 1, 4096, 4097, 10} {
		m, err := d.Register(make([]byte, n), rdma.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []uint32{m.LKey(), m.RKey()} {
			if seen[k] || k == 0 {
				t.Fatalf("region %d: key %#x zero or reused", i, k)
			}
			seen[k] = true
		}
		if m.Addr()%pageSize != 0 || m.Addr() < iovaBase || (i > 0 && m.Addr() <= prevEnd) {
			t.Fatalf("region %d at %#x: not page aligned or overlaps/abuts the previous (end %#x)", i, m.Addr(), prevEnd)
		}
		prevEnd = m.Addr() + uint64(n)
	}
	d.Close()
	if _, err := d.Register(nil, 0); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Register on a closed device: %v", err)
	}
	if _, err := d.Listen(testCtx(t), "x"); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Listen on a closed device: %v", err)
	}
	if _, _, err := d.Dial(testCtx(t), "x", rdma.QPConfig{}, nil); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Dial on a closed device: %v", err)
	}
}

func TestRegionOfOtherDevice(t *testing.T) {
	dc, _, _, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	foreign := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := dc.PostSend(sendWR(1, foreign, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Fatalf("SGE from the peer's device: %v, want ErrInvalidWR", err)
	}
	if err := dc.PostRecv(recvWR(1, foreign, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Fatalf("receive into the peer's device: %v, want ErrInvalidWR", err)
	}
}

func TestRNRWaitsForReceive(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	sb := mustReg(t, dd, 8, 0)
	tgt := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	copy(sb.Bytes(), "abcdefgh")
	// The SEND waits for a receive; the WRITE behind it waits too (RC order).
	if err := dc.PostSend(sendWR(1, sb, 8), writeWR(2, sb, tgt, 8)); err != nil {
		t.Fatal(err)
	}
	if tgt.Bytes()[0] != 0 {
		t.Fatal("RDMA WRITE overtook a SEND waiting for a receive")
	}
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(5, rb, 8)); err != nil {
		t.Fatal(err)
	}
	// PostRecv ran both: the data is in place now.
	if string(rb.Bytes()) != "abcdefgh" || string(tgt.Bytes()) != "abcdefgh" {
		t.Fatalf("after PostRecv: recv %q, write %q", rb.Bytes(), tgt.Bytes())
	}
	wantC(t, poll1(t, dc), 1, rdma.OpSend, rdma.StatusSuccess)
	wantC(t, poll1(t, dc), 2, rdma.OpRDMAWrite, rdma.StatusSuccess)
	wantC(t, poll1(t, ac), 5, rdma.OpRecv, rdma.StatusSuccess)
}

func TestRNRTimeout(t *testing.T) {
	dc, ac, dd, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{}, WithRNRTimeout(time.Millisecond))
	sb := mustReg(t, dd, 8, 0)
	if err := dc.PostSend(sendWR(1, sb, 8), sendWR(2, sb, 8)); err != nil {
		t.Fatal(err)
	}
	cs := pollAll(t, dc)
	if len(cs) != 2 {
		t.Fatalf("completions %v", cs)
	}
	wantC(t, cs[0], 1, rdma.OpSend, rdma.StatusRNRRetryExceeded)
	wantC(t, cs[1], 2, rdma.OpSend, rdma.StatusFlushed)
	var te *rdma.TerminateError
	if !errors.As(dc.Err(), &te) || te.Local || te.Layer != 1 || te.Type != 2 || te.Code != 0x02 {
		t.Fatalf("requester Err %v, want remote DDP untagged 'no buffer' terminate", dc.Err())
	}
	if !errors.As(ac.Err(), &te) || !te.Local {
		t.Fatalf("responder Err %v, want local terminate", ac.Err())
	}
}

func TestTerminateErrors(t *testing.T) {
	cases := []struct {
		name             string
		access           rdma.Access
		op               rdma.Opcode
		off              uint64
		layer, typ, code uint8
	}{
		{"write bad bounds", rdma.AccessLocalWrite | rdma.AccessRemoteWrite, rdma.OpRDMAWrite, 60, 1, 1, 0x01},
		{"write no right", rdma.AccessLocalWrite | rdma.AccessRemoteRead, rdma.OpRDMAWrite, 0, 0, 1, 0x02},
		{"read bad bounds", rdma.AccessRemoteRead, rdma.OpRDMARead, 60, 0, 1, 0x01},
		{"read no right", rdma.AccessLocalWrite | rdma.AccessRemoteWrite, rdma.OpRDMARead, 0, 0, 1, 0x02},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
			tgt := mustReg(t, ad, 64, tc.access)
			loc := mustReg(t, dd, 8, rdma.AccessLocalWrite)
			wr := writeWR(1, loc, tgt, 8)
			wr.Op = tc.op
			wr.Remote.Addr += tc.off
			if err := dc.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			wantC(t, poll1(t, dc), 1, tc.op, rdma.StatusRemoteAccess)
			var te *rdma.TerminateError
			if !errors.As(dc.Err(), &te) || te.Local || te.Layer != tc.layer || te.Type != tc.typ || te.Code != tc.code {
				t.Fatalf("requester Err %#v, want remote terminate layer %d type %d code %#x", dc.Err(), tc.layer, tc.typ, tc.code)
			}
			if !errors.As(ac.Err(), &te) || !te.Local || te.Code != tc.code {
				t.Fatalf("responder Err %v, want the same terminate, local", ac.Err())
			}
		})
	}
	t.Run("bad key", func(t *testing.T) {
		dc, _, dd, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
		loc := mustReg(t, dd, 8, 0)
		wr := rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: loc, Length: 8}}, Remote: rdma.RemoteAddr{Addr: iovaBase, RKey: 0x152}}
		if err := dc.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wantC(t, poll1(t, dc), 1, rdma.OpRDMAWrite, rdma.StatusRemoteAccess)
		var te *rdma.TerminateError
		if !errors.As(dc.Err(), &te) || te.Layer != 1 || te.Type != 1 || te.Code != 0 {
			t.Fatalf("Err %v, want DDP tagged invalid STag", dc.Err())
		}
	})
}

func TestRKeyFromOwnDevice(t *testing.T) {
	// A key registered on the requester's own device is unknown to the peer.
	dc, _, dd, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	own := mustReg(t, dd, 64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err := dc.PostSend(writeWR(1, own, own, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 1, rdma.OpRDMAWrite, rdma.StatusRemoteAccess)
}

func TestSameDeviceBothEnds(t *testing.T) {
	ctx := testCtx(t)
	d := NewNetwork().NewDevice("self")
	defer d.Close()
	l, err := d.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Accept(ctx, rdma.QPConfig{}, nil)
		}
	}()
	c, _, err := d.Dial(ctx, l.Addr().String(), rdma.QPConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := mustReg(t, d, 16, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	src := mustReg(t, d, 16, 0)
	copy(src.Bytes(), "0123456789abcdef")
	if err := c.PostSend(writeWR(1, src, m, 16)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, c), 1, rdma.OpRDMAWrite, rdma.StatusSuccess)
	if string(m.Bytes()) != "0123456789abcdef" {
		t.Fatalf("loopback to the same device wrote %q", m.Bytes())
	}
}

func TestDeregisteredWhileQueued(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	sb := mustReg(t, dd, 8, 0)
	if err := dc.PostSend(sendWR(1, sb, 8)); err != nil { // waits for a receive
		t.Fatal(err)
	}
	if err := sb.Deregister(); err != nil {
		t.Fatal(err)
	}
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(2, rb, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 1, rdma.OpSend, rdma.StatusLocalProtection)
	wantC(t, poll1(t, ac), 2, rdma.OpRecv, rdma.StatusFlushed)
}

func TestReceiveBufferDeregistered(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(2, rb, 8)); err != nil {
		t.Fatal(err)
	}
	rb.Deregister()
	if err := dc.PostSend(sendWR(1, mustReg(t, dd, 8, 0), 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 1, rdma.OpSend, rdma.StatusRemoteOperation)
	wantC(t, poll1(t, ac), 2, rdma.OpRecv, rdma.StatusLocalProtection)
}

func TestSendInvalidateBadKey(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(2, rb, 8), recvWR(3, rb, 8)); err != nil {
		t.Fatal(err)
	}
	target := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	sb := mustReg(t, dd, 8, 0)
	inv := rdma.SendWR{ID: 1, Op: rdma.OpSendInvalidate, Local: []rdma.SGE{{MR: sb, Length: 8}}, InvalidateRKey: target.RKey()}
	if err := dc.PostSend(inv); err != nil {
		t.Fatal(err)
	}
	if c := poll1(t, ac); c.ID != 2 || !c.Invalidated || c.InvalidatedRKey != target.RKey() {
		t.Fatalf("first invalidate: %+v", c)
	}
	// Invalidating it again fails: the key is no longer valid.
	inv.ID = 4
	if err := dc.PostSend(inv); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 4, rdma.OpSendInvalidate, rdma.StatusRemoteOperation)
	wantC(t, poll1(t, ac), 3, rdma.OpRecv, rdma.StatusLocalProtection)
	var te *rdma.TerminateError
	if !errors.As(dc.Err(), &te) || te.Layer != 0 || te.Type != 1 || te.Code != 0x09 {
		t.Fatalf("Err %v, want RDMAP 'STag cannot be invalidated'", dc.Err())
	}
	// Local use of the invalidated region is still fine.
	if !target.(*memoryRegion).usable() {
		t.Fatal("invalidated region unusable locally")
	}
}

func TestIRDEnforcedByResponder(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{ORD: 1}, rdma.QPConfig{IRD: 1}, WithUncheckedORD())
	src := mustReg(t, ad, 8, rdma.AccessRemoteRead)
	sink := mustReg(t, dd, 8, rdma.AccessLocalWrite)
	if err := dc.PostSend(readWR(1, sink, src, 8), readWR(2, sink, src, 8)); err != nil {
		t.Fatal(err)
	}
	cs := pollAll(t, dc)
	if len(cs) != 2 {
		t.Fatalf("completions %v", cs)
	}
	wantC(t, cs[0], 1, rdma.OpRDMARead, rdma.StatusSuccess)
	wantC(t, cs[1], 2, rdma.OpRDMARead, rdma.StatusRemoteInvalidRequest)
	if ac.Err() == nil {
		t.Fatal("responder still up")
	}
}

func TestUnsignaledOnlyFillsSendQueue(t *testing.T) {
	dc, _, dd, ad := connect(t, rdma.QPConfig{SendDepth: 3}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	w := writeWR(1, src, dst, 8)
	w.Signaled = false
	for range 3 {
		if err := dc.PostSend(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := dc.PostSend(w); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("4th unsignaled WRITE into SendDepth 3: %v, want ErrQueueFull", err)
	}
}

func TestUnsignaledReleasedByLaterCompletion(t *testing.T) {
	dc, _, dd, ad := connect(t, rdma.QPConfig{SendDepth: 3}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	w := writeWR(1, src, dst, 8)
	w.Signaled = false
	if err := dc.PostSend(w, w, writeWR(3, src, dst, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 3, rdma.OpRDMAWrite, rdma.StatusSuccess)
	for i := range 3 {
		if err := dc.PostSend(writeWR(uint64(10+i), src, dst, 8)); err != nil {
			t.Fatalf("post %d after the signaled completion released all three slots: %v", i, err)
		}
	}
}

func TestCloseErrors(t *testing.T) {
	dc, ac, _, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	ac.Close()
	if !errors.Is(ac.Err(), rdma.ErrClosed) || ac.Err() != rdma.ErrClosed {
		t.Fatalf("closing side Err %v", ac.Err())
	}
	if dc.Err() != ErrPeerClosed || !errors.Is(dc.Err(), rdma.ErrClosed) {
		t.Fatalf("peer Err %v, want ErrPeerClosed", dc.Err())
	}
	dc2, ac2, _, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	dc2.Drop()
	if dc2.Err() != ErrConnectionLost || ac2.Err() != ErrConnectionLost {
		t.Fatalf("after Drop: %v, %v", dc2.Err(), ac2.Err())
	}
}

func TestFaultStatus(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err := dc.InjectFault(Fault{Op: rdma.OpRDMAWrite, Skip: 1, Status: rdma.StatusRemoteAccess}); err != nil {
		t.Fatal(err)
	}
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(9, rb, 8)); err != nil {
		t.Fatal(err)
	}
	// SEND does not match, the first WRITE is skipped, the second is hit.
	copy(src.Bytes(), "12345678")
	if err := dc.PostSend(sendWR(1, src, 1), writeWR(2, src, dst, 4), writeWR(3, src, dst, 8)); err != nil {
		t.Fatal(err)
	}
	cs := pollAll(t, dc)
	if len(cs) != 3 {
		t.Fatalf("completions %v", cs)
	}
	wantC(t, cs[0], 1, rdma.OpSend, rdma.StatusSuccess)
	wantC(t, cs[1], 2, rdma.OpRDMAWrite, rdma.StatusSuccess)
	wantC(t, cs[2], 3, rdma.OpRDMAWrite, rdma.StatusRemoteAccess)
	if string(dst.Bytes()) != "1234\x00\x00\x00\x00" {
		t.Fatalf("faulted WRITE placed data: %q", dst.Bytes())
	}
	var te *rdma.TerminateError
	if !errors.As(dc.Err(), &te) || !te.Local || te.Code != 0xff {
		t.Fatalf("Err %v, want local injected terminate", dc.Err())
	}
	if err := dc.InjectFault(Fault{}); err == nil {
		t.Fatal("fault doing nothing accepted")
	}
}

func TestFaultDelayKeepsOrder(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	copy(src.Bytes(), "delayed!")
	dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(9, rb, 8)); err != nil {
		t.Fatal(err)
	}
	if err := dd.InjectFault(Fault{Op: rdma.OpRDMAWrite, Delay: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	w := writeWR(1, src, dst, 8)
	w.Signaled = false
	if err := dc.PostSend(w, sendWR(2, src, 1)); err != nil {
		t.Fatal(err)
	}
	// The receive completes only after the delayed WRITE placed its data.
	wantC(t, poll1(t, ac), 9, rdma.OpRecv, rdma.StatusSuccess)
	if string(dst.Bytes()) != "delayed!" {
		t.Fatalf("SEND overtook the delayed WRITE: target %q", dst.Bytes())
	}
	wantC(t, poll1(t, dc), 2, rdma.OpSend, rdma.StatusSuccess)
}

func TestFaultCountIsSpent(t *testing.T) {
	dc, _, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	copy(src.Bytes(), "abcdefgh")
	dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err := dc.InjectFault(Fault{Op: rdma.OpRDMAWrite, Count: 2, Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := dc.PostSend(writeWR(1, src, dst, 1), writeWR(2, src, dst, 2)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, dc), 1, rdma.OpRDMAWrite, rdma.StatusSuccess)
	wantC(t, poll1(t, dc), 2, rdma.OpRDMAWrite, rdma.StatusSuccess)
	// The fault is spent: the third WRITE executes inside PostSend.
	if err := dc.PostSend(writeWR(3, src, dst, 8)); err != nil {
		t.Fatal(err)
	}
	if string(dst.Bytes()) != "abcdefgh" {
		t.Fatalf("third WRITE still delayed: %q", dst.Bytes())
	}
	wantC(t, poll1(t, dc), 3, rdma.OpRDMAWrite, rdma.StatusSuccess)
}

func TestFaultDrop(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	src := mustReg(t, dd, 8, 0)
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(9, rb, 8)); err != nil {
		t.Fatal(err)
	}
	if err := dd.InjectFault(Fault{Drop: true}); err != nil {
		t.Fatal(err)
	}
	s := sendWR(1, src, 8)
	s.Signaled = false // errors complete anyway
	if err := dc.PostSend(s); err != nil {
		t.Fatal(err)
	}
	cs := pollAll(t, dc)
	if len(cs) != 1 {
		t.Fatalf("completions %v", cs)
	}
	wantC(t, cs[0], 1, rdma.OpSend, rdma.StatusRetryExceeded)
	ra := pollAll(t, ac)
	if len(ra) != 1 {
		t.Fatalf("peer completions %v", ra)
	}
	wantC(t, ra[0], 9, rdma.OpRecv, rdma.StatusFlushed)
	if dc.Err() != ErrConnectionLost || ac.Err() != ErrConnectionLost {
		t.Fatalf("Err %v / %v, want ErrConnectionLost", dc.Err(), ac.Err())
	}
}

func TestFaultReceive(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(1, rb, 8), recvWR(2, rb, 8), recvWR(3, rb, 8)); err != nil {
		t.Fatal(err)
	}
	if err := ac.InjectFault(Fault{Op: rdma.OpRecv, Status: rdma.StatusLocalProtection}); err != nil {
		t.Fatal(err)
	}
	src := mustReg(t, dd, 8, 0)
	if err := dc.PostSend(sendWR(10, src, 8), sendWR(11, src, 8)); err != nil && !errors.Is(err, rdma.ErrClosed) {
		t.Fatal(err)
	}
	ra := pollAll(t, ac)
	if len(ra) != 3 {
		t.Fatalf("receiver completions %v", ra)
	}
	wantC(t, ra[0], 1, rdma.OpRecv, rdma.StatusLocalProtection)
	wantC(t, ra[1], 2, rdma.OpRecv, rdma.StatusFlushed)
	wantC(t, pollAll(t, dc)[0], 10, rdma.OpSend, rdma.StatusRemoteOperation)

	// Fault validation.
	for _, f := range []Fault{{Op: rdma.OpRecv}, {Op: rdma.OpRecv, Status: rdma.StatusLocalLength, Delay: time.Second}} {
		if err := dd.InjectFault(f); err == nil {
			t.Errorf("fault %+v accepted", f)
		}
	}
}

func TestFaultReceiveDropAndAnyOpSkipsReceives(t *testing.T) {
	dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
	rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
	if err := ac.PostRecv(recvWR(1, rb, 8), recvWR(2, rb, 8)); err != nil {
		t.Fatal(err)
	}
	// An any-op fault on the receiver's device does not hit receives.
	if err := ad.InjectFault(Fault{Status: rdma.StatusFatal}); err != nil {
		t.Fatal(err)
	}
	src := mustReg(t, dd, 8, 0)
	if err := dc.PostSend(sendWR(10, src, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, poll1(t, ac), 1, rdma.OpRecv, rdma.StatusSuccess)
	if err := ac.InjectFault(Fault{Op: rdma.OpRecv, Drop: true}); err != nil {
		t.Fatal(err)
	}
	if err := dc.PostSend(sendWR(11, src, 8)); err != nil {
		t.Fatal(err)
	}
	wantC(t, pollAll(t, ac)[0], 2, rdma.OpRecv, rdma.StatusFlushed)
	wantC(t, pollAll(t, dc)[1], 11, rdma.OpSend, rdma.StatusRetryExceeded)
	if ac.Err() != ErrConnectionLost {
		t.Fatalf("Err %v", ac.Err())
	}
}

func TestDialCanceledRequest(t *testing.T) {
	ctx := testCtx(t)
	n := NewNetwork()
	a, b := n.NewDevice("a"), n.NewDevice("b")
	defer a.Close()
	defer b.Close()
	l, err := a.Listen(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	// An already-ended context fails before anything is queued.
	if _, _, err := b.Dial(short, "a", rdma.QPConfig{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with a canceled context: %v", err)
	}
	done := make(chan error, 1)
	dctx, dcancel := context.WithCancel(ctx)
	go func() {
		_, _, err := b.Dial(dctx, "a", rdma.QPConfig{}, []byte("x"))
		done <- err
	}()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial after cancel: %v", err)
	}
	if _, err := r.Accept(ctx, rdma.QPConfig{}, nil); !errors.Is(err, ErrRequestCanceled) {
		t.Fatalf("Accept of an abandoned request: %v", err)
	}
	if err := r.Reject(nil); !errors.Is(err, ErrRequestCanceled) {
		t.Fatalf("Reject of an abandoned request: %v", err)
	}
}

func TestDeviceCloseWhileDialing(t *testing.T) {
	ctx := testCtx(t)
	n := NewNetwork()
	a, b := n.NewDevice("a"), n.NewDevice("b")
	defer a.Close()
	l, err := a.Listen(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := b.Dial(ctx, "a", rdma.QPConfig{}, nil)
		done <- err
	}()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := <-done; !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("Dial on a device closed meanwhile: %v", err)
	}
	if _, err := r.Accept(ctx, rdma.QPConfig{}, nil); err == nil {
		t.Fatal("Accept succeeded for a dialer whose device closed")
	}
}

// TestConcurrentCloseAndPost exercises posting, polling and closing at once
// from several goroutines (meaningful under -race).
func TestConcurrentCloseAndPost(t *testing.T) {
	ctx := testCtx(t)
	for round := range 20 {
		dc, ac, dd, ad := connect(t, rdma.QPConfig{}, rdma.QPConfig{})
		src := mustReg(t, dd, 8, 0)
		dst := mustReg(t, ad, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		rb := mustReg(t, ad, 8, rdma.AccessLocalWrite)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				if err := ac.PostRecv(recvWR(uint64(i), rb, 8)); err != nil {
					return
				}
				if _, err := ac.Poll(ctx, make([]rdma.Completion, 4)); err != nil {
					return
				}
			}
		}()
		pollDone := make(chan struct{})
		go func() {
			defer close(pollDone)
			for {
				if _, err := dc.Poll(ctx, make([]rdma.Completion, 4)); err != nil {
					return
				}
			}
		}()
		for i := range 50 {
			if err := dc.PostSend(writeWR(uint64(i), src, dst, 8)); err != nil {
				break
			}
			if i == round {
				go ad.Close()
			}
		}
		<-done
		<-pollDone
		dc.Close()
	}
}

func TestNoGoroutinesAfterTimers(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		dc, _, dd, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{}, WithRNRTimeout(time.Hour))
		if err := dd.InjectFault(Fault{Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		src := mustReg(t, dd, 8, 0)
		if err := dc.PostSend(sendWR(1, src, 8)); err != nil {
			t.Fatal(err)
		}
		dc.Close()
		wantC(t, pollAll(t, dc)[0], 1, rdma.OpSend, rdma.StatusFlushed)
	}()
	ctx := testCtx(t)
	for runtime.NumGoroutine() > before {
		select {
		case <-ctx.Done():
			t.Fatalf("%d goroutines before, %d after", before, runtime.NumGoroutine())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestLoggerGetsQPErrors(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	dc, _, dd, _ := connect(t, rdma.QPConfig{}, rdma.QPConfig{}, WithLogger(slog.New(h)))
	loc := mustReg(t, dd, 8, 0)
	if err := dc.PostSend(rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: loc, Length: 8}}, Remote: rdma.RemoteAddr{RKey: 1}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "loopback QP error") || !strings.Contains(buf.String(), "op=RDMA_WRITE") {
		t.Fatalf("log lacks the QP error:\n%s", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestConcurrentAccepters(t *testing.T) {
	ctx := testCtx(t)
	n := NewNetwork()
	a, b := n.NewDevice("a"), n.NewDevice("b")
	defer a.Close()
	defer b.Close()
	l, err := a.Listen(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	const k = 4
	got := make(chan error, 2*k)
	for range 2 * k { // k accepters get requests, k see the close
		go func() {
			r, err := l.Accept(ctx)
			if err == nil {
				_, err = r.Accept(ctx, rdma.QPConfig{}, nil)
			}
			got <- err
		}()
	}
	for i := range k {
		if _, _, err := b.Dial(ctx, "a", rdma.QPConfig{}, nil); err != nil {
			t.Fatalf("Dial %d: %v", i, err)
		}
	}
	for range k {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for range k {
		if err := <-got; !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("blocked Accept after Close: %v", err)
		}
	}
}
