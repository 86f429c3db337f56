package iwarp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// testCtx is bounded by the test deadline (or 60 s).
func testCtx(t testing.TB) context.Context {
	t.Helper()
	dl := time.Now().Add(60 * time.Second)
	if tt, ok := t.(*testing.T); ok {
		if d, ok := tt.Deadline(); ok && d.Add(-5*time.Second).Before(dl) {
			dl = d.Add(-5 * time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	t.Cleanup(cancel)
	return ctx
}

type pair struct {
	dev        *Device
	client     rdma.Conn
	server     rdma.Conn
	reqPD      []byte
	repPD      []byte
	listenAddr string
}

// connect dials and accepts one connection over TCP on loopback.
func connect(t testing.TB, ccfg, scfg Config, addr string, q rdma.QPConfig) *pair {
	t.Helper()
	ctx := testCtx(t)
	sdev := NewDevice(scfg)
	cdev := NewDevice(ccfg)
	t.Cleanup(func() { cdev.Close(); sdev.Close() })
	ln, err := sdev.Listen(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type res struct {
		c   rdma.Conn
		pd  []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{err: err}
			return
		}
		c, err := r.Accept(ctx, q, []byte("login response"))
		ch <- res{c: c, pd: r.PrivateData(), err: err}
	}()
	cc, rep, err := cdev.Dial(ctx, ln.Addr().String(), q, []byte("login request"))
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() { cc.Close(); s.c.Close() })
	return &pair{dev: sdev, client: cc, server: s.c, reqPD: s.pd, repPD: rep, listenAddr: ln.Addr().String()}
}

func pollOne(t testing.TB, c rdma.Conn) rdma.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	var out [1]rdma.Completion
	n, err := c.Poll(ctx, out[:])
	if err != nil || n != 1 {
		t.Fatalf("Poll: %d, %v", n, err)
	}
	return out[0]
}

func mustReg(t testing.TB, c rdma.Conn, d rdma.Device, buf []byte, a rdma.Access) rdma.MemoryRegion {
	t.Helper()
	mr, err := d.Register(buf, a)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

func TestConnectSendRecvWriteRead(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, rev := range []int{1, 2} {
			t.Run(fmt.Sprintf("crc=%v,rev=%d", crc, rev), func(t *testing.T) {
				cfg := Config{CRC: crc, MPARevision: rev, MaxFPDUPayload: 1024}
				p := connect(t, cfg, Config{MPARevision: 2}, "127.0.0.1:0", rdma.QPConfig{})
				if string(p.reqPD) != "login request" || string(p.repPD) != "login response" {
					t.Fatalf("private data %q / %q", p.reqPD, p.repPD)
				}
				cdev := p.client.(*conn).dev
				sdev := p.server.(*conn).dev
				if p.client.(*conn).crc != crc || p.server.(*conn).crc != crc {
					t.Fatalf("crc negotiated client %v server %v", p.client.(*conn).crc, p.server.(*conn).crc)
				}

				// SEND/RECV, multi-segment.
				rbuf := make([]byte, 5000)
				rmr := mustReg(t, p.server, sdev, rbuf, rdma.AccessLocalWrite)
				if err := p.server.PostRecv(rdma.RecvWR{ID: 7, Local: rdma.SGE{MR: rmr, Length: len(rbuf)}}); err != nil {
					t.Fatal(err)
				}
				sbuf := bytes.Repeat([]byte("0123456789abcdef"), 250) // 4000 bytes
				smr := mustReg(t, p.client, cdev, sbuf, 0)
				if err := p.client.PostSend(rdma.SendWR{ID: 1, Op: rdma.OpSend, Signaled: true, Solicited: true,
					Local: []rdma.SGE{{MR: smr, Length: 1000}, {MR: smr, Offset: 1000, Length: 3000}}}); err != nil {
					t.Fatal(err)
				}
				if c := pollOne(t, p.client); c.ID != 1 || c.Status != rdma.StatusSuccess || c.Op != rdma.OpSend {
					t.Fatalf("send completion %+v", c)
				}
				c := pollOne(t, p.server)
				if c.ID != 7 || c.Status != rdma.StatusSuccess || c.ByteLen != 4000 || !c.Solicited || c.Op != rdma.OpRecv {
					t.Fatalf("recv completion %+v", c)
				}
				if !bytes.Equal(rbuf[:4000], sbuf) {
					t.Fatal("received data differs")
				}

				// RDMA WRITE into the server's region.
				wbuf := make([]byte, 3000)
				wmr := mustReg(t, p.server, sdev, wbuf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
				if err := p.client.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpRDMAWrite, Signaled: true,
					Local:  []rdma.SGE{{MR: smr, Offset: 16, Length: 2500}},
					Remote: rdma.RemoteAddr{Addr: wmr.Addr() + 100, RKey: wmr.RKey()}}); err != nil {
					t.Fatal(err)
				}
				if c := pollOne(t, p.client); c.ID != 2 || c.Status != rdma.StatusSuccess {
					t.Fatalf("write completion %+v", c)
				}
				// A SEND after the WRITE orders after its placement.
				if err := p.server.PostRecv(rdma.RecvWR{ID: 8, Local: rdma.SGE{MR: rmr, Length: 10}}); err != nil {
					t.Fatal(err)
				}
				if err := p.client.PostSend(rdma.SendWR{ID: 3, Op: rdma.OpSend, Local: []rdma.SGE{{MR: smr, Length: 4}}}); err != nil {
					t.Fatal(err)
				}
				if c := pollOne(t, p.server); c.ID != 8 || c.ByteLen != 4 {
					t.Fatalf("recv completion %+v", c)
				}
				if !bytes.Equal(wbuf[100:2600], sbuf[16:2516]) {
					t.Fatal("written data differs")
				}

				// RDMA READ from the server's region into two SGEs.
				src := bytes.Repeat([]byte{0xa5, 0x5a, 0x11}, 1000)
				srcMR := mustReg(t, p.server, sdev, src, rdma.AccessRemoteRead)
				dst := make([]byte, 4000)
				dstMR := mustReg(t, p.client, cdev, dst, rdma.AccessLocalWrite)
				if err := p.client.PostSend(rdma.SendWR{ID: 4, Op: rdma.OpRDMARead, Signaled: true,
					Local:  []rdma.SGE{{MR: dstMR, Offset: 10, Length: 1000}, {MR: dstMR, Offset: 2000, Length: 1900}},
					Remote: rdma.RemoteAddr{Addr: srcMR.Addr() + 50, RKey: srcMR.RKey()}}); err != nil {
					t.Fatal(err)
				}
				if c := pollOne(t, p.client); c.ID != 4 || c.Status != rdma.StatusSuccess || c.ByteLen != 2900 || c.Op != rdma.OpRDMARead {
					t.Fatalf("read completion %+v", c)
				}
				if !bytes.Equal(dst[10:1010], src[50:1050]) || !bytes.Equal(dst[2000:3900], src[1050:2950]) {
					t.Fatal("read data differs")
				}

				// Zero-length WRITE with STag 0 and zero-length READ.
				if err := p.client.PostSend(rdma.SendWR{ID: 5, Op: rdma.OpRDMAWrite, Signaled: true},
					rdma.SendWR{ID: 6, Op: rdma.OpRDMARead, Signaled: true}); err != nil {
					t.Fatal(err)
				}
				if c := pollOne(t, p.client); c.ID != 5 || c.Status != rdma.StatusSuccess {
					t.Fatalf("zero write completion %+v", c)
				}
				if c := pollOne(t, p.client); c.ID != 6 || c.Status != rdma.StatusSuccess || c.ByteLen != 0 {
					t.Fatalf("zero read completion %+v", c)
				}
				if err := p.client.(*conn).Err(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestNegotiation: CRC is used when either side asks (RFC 5044 §7.1); a
// revision 1 responder answers a revision 2 request with revision 1 and no
// IRD/ORD word; IRD/ORD follow RFC 6581 §5.
func TestNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name         string
		client, srv  Config
		cq, sq       rdma.QPConfig
		crc          bool
		cCaps, sCaps [2]int // IRD, ORD
	}{
		{"responder asks CRC", Config{}, Config{CRC: true}, rdma.QPConfig{IRD: 3, ORD: 5}, rdma.QPConfig{IRD: 4, ORD: 2}, true, [2]int{2, 4}, [2]int{4, 2}},
		{"v1 responder", Config{}, Config{MPARevision: 1}, rdma.QPConfig{IRD: 3, ORD: 5}, rdma.QPConfig{IRD: 4, ORD: 2}, false, [2]int{3, 5}, [2]int{4, 2}},
		{"ORD cut to peer IRD", Config{}, Config{}, rdma.QPConfig{IRD: 8, ORD: 8}, rdma.QPConfig{IRD: 2, ORD: 6}, false, [2]int{6, 2}, [2]int{2, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			sdev, cdev := NewDevice(tc.srv), NewDevice(tc.client)
			defer sdev.Close()
			defer cdev.Close()
			ln, err := sdev.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ch := make(chan rdma.Conn, 1)
			go func() {
				r, err := ln.Accept(ctx)
				if err != nil {
					ch <- nil
					return
				}
				c, _ := r.Accept(ctx, tc.sq, []byte("r"))
				ch <- c
			}()
			cc, pd, err := cdev.Dial(ctx, ln.Addr().String(), tc.cq, []byte("q"))
			if err != nil {
				t.Fatal(err)
			}
			sc := <-ch
			if sc == nil {
				t.Fatal("accept failed")
			}
			if string(pd) != "r" {
				t.Fatalf("reply private data %q", pd)
			}
			if cc.(*conn).crc != tc.crc || sc.(*conn).crc != tc.crc {
				t.Fatalf("CRC client %v server %v, want %v", cc.(*conn).crc, sc.(*conn).crc, tc.crc)
			}
			if g := cc.Caps(); [2]int{g.IRD, g.ORD} != tc.cCaps {
				t.Errorf("client IRD/ORD %d/%d, want %v", g.IRD, g.ORD, tc.cCaps)
			}
			if g := sc.Caps(); [2]int{g.IRD, g.ORD} != tc.sCaps {
				t.Errorf("server IRD/ORD %d/%d, want %v", g.IRD, g.ORD, tc.sCaps)
			}
			// Data still flows.
			rb := mustReg(t, sc, sdev, make([]byte, 8), rdma.AccessLocalWrite)
			sc.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rb, Length: 8}})
			sb := mustReg(t, cc, cdev, []byte("payload!"), 0)
			if err := cc.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpSend, Local: []rdma.SGE{{MR: sb, Length: 8}}}); err != nil {
				t.Fatal(err)
			}
			if c := pollOne(t, sc); c.Status != rdma.StatusSuccess || string(rb.Bytes()) != "payload!" {
				t.Fatalf("completion %+v", c)
			}
			cc.Close()
			sc.Close()
		})
	}
}

func TestCloseFlushesAndNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		p := connect(t, Config{}, Config{}, "[::1]:0", rdma.QPConfig{})
		sdev := p.server.(*conn).dev
		buf := make([]byte, 64)
		mr := mustReg(t, p.server, sdev, buf, rdma.AccessLocalWrite)
		for i := range 3 {
			if err := p.server.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: mr, Length: 64}}); err != nil {
				t.Fatal(err)
			}
		}
		p.server.Close()
		for i := range 3 {
			c := pollOne(t, p.server)
			if c.ID != uint64(i) || c.Status != rdma.StatusFlushed {
				t.Fatalf("completion %+v", c)
			}
		}
		if _, err := p.server.Poll(testCtx(t), make([]rdma.Completion, 1)); !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("Poll after drain: %v", err)
		}
		if !errors.Is(p.server.Err(), rdma.ErrClosed) {
			t.Fatalf("Err %v", p.server.Err())
		}
		select {
		case <-p.client.Done():
		case <-testCtx(t).Done():
			t.Fatal("client did not see the close")
		}
		if p.client.Err() == nil {
			t.Fatal("client Err nil")
		}
		p.client.Close()
		p.dev.Close()
	}()
	// Cleanup functions of connect run at test end; the goroutines of the
	// connections themselves are already gone.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines, %d before\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestAcceptRecv: receives posted by AcceptRecv are in place before the
// reply, so a Send right after Dial returns finds one; a bad receive fails
// AcceptRecv with nothing sent and leaves the request answerable.
func TestAcceptRecv(t *testing.T) {
	ctx := testCtx(t)
	sdev, cdev := NewDevice(Config{}), NewDevice(Config{})
	defer sdev.Close()
	defer cdev.Close()
	ln, err := sdev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := mustReg(t, nil, sdev, make([]byte, 16), rdma.AccessLocalWrite)
	noLW := mustReg(t, nil, sdev, make([]byte, 16), 0)
	ch := make(chan rdma.Conn, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- nil
			return
		}
		ra := r.(rdma.RecvFirstAcceptor)
		if _, err := ra.AcceptRecv(ctx, rdma.QPConfig{}, nil, []rdma.RecvWR{{ID: 1, Local: rdma.SGE{MR: noLW, Length: 16}}}); !errors.Is(err, rdma.ErrInvalidWR) {
			t.Errorf("AcceptRecv with a receive lacking local write: %v", err)
		}
		c, err := ra.AcceptRecv(ctx, rdma.QPConfig{}, nil, []rdma.RecvWR{{ID: 1, Local: rdma.SGE{MR: rb, Length: 16}}, {ID: 2, Local: rdma.SGE{MR: rb, Length: 16}}})
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	cc, _, err := cdev.Dial(ctx, ln.Addr().String(), rdma.QPConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sb := mustReg(t, cc, cdev, []byte("first"), 0)
	if err := cc.PostSend(rdma.SendWR{ID: 9, Op: rdma.OpSend, Local: []rdma.SGE{{MR: sb, Length: 5}}}); err != nil {
		t.Fatal(err)
	}
	sc := <-ch
	if sc == nil {
		t.FailNow()
	}
	defer sc.Close()
	if c := pollOne(t, sc); c.ID != 1 || c.Status != rdma.StatusSuccess || c.ByteLen != 5 {
		t.Fatalf("completion %+v", c)
	}
}
