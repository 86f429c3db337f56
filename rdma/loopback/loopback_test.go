package loopback

import (
	"bytes"
	"context"
	"errors"
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

func BenchmarkLoopback(b *testing.B) {
	rdmatest.Benchmark(b, newPairFactory())
}
