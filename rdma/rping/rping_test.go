package rping

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/loopback"
)

func TestInfoWire(t *testing.T) {
	// struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }
	i := Info{Addr: 0x0102030405060708, RKey: 0x0a0b0c0d, Size: 64}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64}
	if got := i.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal = % x, want % x", got, want)
	}
	got, err := ParseInfo(want)
	if err != nil || got != i {
		t.Fatalf("ParseInfo = %+v, %v; want %+v", got, err, i)
	}
	for n := range InfoLen {
		if _, err := ParseInfo(want[:n]); !errors.Is(err, ErrBogus) {
			t.Errorf("ParseInfo of %d bytes: %v, want ErrBogus", n, err)
		}
	}
	if _, err := ParseInfo(append(want, 0)); !errors.Is(err, ErrBogus) {
		t.Errorf("ParseInfo of 17 bytes: %v, want ErrBogus", err)
	}
}

func TestPattern(t *testing.T) {
	// rping_test_client with -S 32: snprintf "rdma-ping-0: " (13 chars),
	// then 'A' onwards, last byte NUL.
	b := make([]byte, 32)
	Pattern(b, 0)
	if want := "rdma-ping-0: ABCDEFGHIJKLMNOPQR\x00"; string(b) != want {
		t.Errorf("ping 0 = %q, want %q", b, want)
	}
	// Ping 1 starts one letter later.
	Pattern(b, 1)
	if want := "rdma-ping-1: BCDEFGHIJKLMNOPQRS\x00"; string(b) != want {
		t.Errorf("ping 1 = %q, want %q", b, want)
	}
	// Ping 57 starts at 'z' (122) and wraps to 'A'; ping 58 starts at 'A'.
	Pattern(b, 57)
	if want := "rdma-ping-57: zABCDEFGHIJKLMNOP\x00"; string(b) != want {
		t.Errorf("ping 57 = %q, want %q", b, want)
	}
	Pattern(b, 58)
	if want := "rdma-ping-58: ABCDEFGHIJKLMNOPQ\x00"; string(b) != want {
		t.Errorf("ping 58 = %q, want %q", b, want)
	}
	// The letters cycle through 58 values 'A'..'z' ('[' .. '`' included).
	b = make([]byte, 13+60+1)
	Pattern(b, 0)
	letters := string(b[13 : 13+60])
	if !strings.HasPrefix(letters, "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzAB") {
		t.Errorf("letters = %q", letters)
	}
	// Truncated (shorter than the text): snprintf's prefix and a NUL.
	b = make([]byte, 8)
	Pattern(b, 3)
	if want := "rdma-pi\x00"; string(b) != want {
		t.Errorf("truncated = %q, want %q", b, want)
	}
	if MinSize != 26 {
		t.Errorf("MinSize = %d, want 26 (sizeof \"2147483647\" + sizeof \"rdma-ping-%%d: \")", MinSize)
	}
}

type provider struct {
	name string
	devs func(t *testing.T) (a, b rdma.Device, addr string)
}

func providers() []provider {
	return []provider{
		{"loopback", func(t *testing.T) (rdma.Device, rdma.Device, string) {
			n := loopback.NewNetwork()
			return n.NewDevice("a"), n.NewDevice("b"), "rping"
		}},
		{"iwarp", func(t *testing.T) (rdma.Device, rdma.Device, string) {
			return iwarp.NewDevice(iwarp.Config{}), iwarp.NewDevice(iwarp.Config{}), "127.0.0.1:0"
		}},
		{"iwarp-crc-rev1", func(t *testing.T) (rdma.Device, rdma.Device, string) {
			cfg := iwarp.Config{CRC: true, MPARevision: 1, MaxFPDUPayload: 1024}
			return iwarp.NewDevice(cfg), iwarp.NewDevice(cfg), "127.0.0.1:0"
		}},
		{"iwarp-complete-on-transmit", func(t *testing.T) (rdma.Device, rdma.Device, string) {
			cfg := iwarp.Config{CompleteOnTransmit: true}
			return iwarp.NewDevice(cfg), iwarp.NewDevice(cfg), "127.0.0.1:0"
		}},
	}
}

func testCtx(t *testing.T) context.Context {
	d, ok := t.Deadline()
	if !ok {
		d = time.Now().Add(60 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), d.Add(-5*time.Second))
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T, p provider) (cdev, sdev rdma.Device, l rdma.Listener, ctx context.Context) {
	ctx = testCtx(t)
	cdev, sdev, addr := p.devs(t)
	t.Cleanup(func() { cdev.Close(); sdev.Close() })
	l, err := sdev.Listen(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return cdev, sdev, l, ctx
}

func TestPingPong(t *testing.T) {
	for _, p := range providers() {
		for _, size := range []int{MinSize, DefaultSize, 4096, MaxSize} {
			t.Run(p.name+"/"+itoa(size), func(t *testing.T) {
				cdev, sdev, l, ctx := setup(t, p)
				var sv, cv bytes.Buffer
				type out struct {
					r   Result
					err error
				}
				done := make(chan out, 1)
				go func() {
					r, err := Server(ctx, sdev, l, Config{Size: size, Count: 5, Validate: true, Verbose: &sv})
					done <- out{r, err}
				}()
				r, err := Client(ctx, cdev, l.Addr().String(), Config{Size: size, Count: 5, Validate: true, Verbose: &cv})
				if err != nil || r.Pings != 5 {
					t.Fatalf("client: %+v, %v", r, err)
				}
				s := <-done
				if s.err != nil || s.r.Pings != 5 {
					t.Fatalf("server: %+v, %v", s.r, s.err)
				}
				// Each side printed each ping's text: the pattern up to the NUL.
				b := make([]byte, size)
				var wantC, wantS strings.Builder
				for i := range 5 {
					Pattern(b, i)
					wantC.WriteString("ping data: " + string(b[:size-1]) + "\n")
					wantS.WriteString("server ping data: " + string(b[:size-1]) + "\n")
				}
				if cv.String() != wantC.String() {
					t.Errorf("client verbose output:\n%q\nwant\n%q", cv.String(), wantC.String())
				}
				if sv.String() != wantS.String() {
					t.Errorf("server verbose output differs:\n%q\nwant\n%q", sv.String(), wantS.String())
				}
			})
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// accept accepts req with the receive posted first where the provider can.
func accept(ctx context.Context, req rdma.ConnRequest, e *endpoint) (rdma.Conn, error) {
	if ra, ok := req.(rdma.RecvFirstAcceptor); ok {
		return ra.AcceptRecv(ctx, qpConfig, nil, []rdma.RecvWR{e.recvWR()})
	}
	c, err := req.Accept(ctx, qpConfig, nil)
	if err == nil {
		err = c.PostRecv(e.recvWR())
	}
	return c, err
}

func mustReg(t *testing.T, dev rdma.Device, n int, a rdma.Access) rdma.MemoryRegion {
	mr, err := dev.Register(make([]byte, n), a)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// badServer is an rping server that writes back the data it read with one
// byte changed on ping 2. It returns when the client disconnects.
func badServer(ctx context.Context, t *testing.T, dev rdma.Device, l rdma.Listener, size int) error {
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	e := &endpoint{recvMR: mustReg(t, dev, InfoLen, rdma.AccessLocalWrite), log: slog.New(slog.DiscardHandler)}
	ga := mustReg(t, dev, InfoLen, 0)
	buf := mustReg(t, dev, size, rdmaAccess)
	if e.conn, err = accept(ctx, req, e); err != nil {
		return err
	}
	defer e.conn.Close()
	for ping := 0; ; ping++ {
		ev, err := e.wait(ctx, rdma.OpRecv)
		if err != nil {
			return err
		}
		src, _ := ParseInfo(ev.data)
		e.conn.PostSend(rdma.SendWR{Op: rdma.OpRDMARead, Signaled: true, Local: []rdma.SGE{{MR: buf, Length: int(src.Size)}},
			Remote: rdma.RemoteAddr{Addr: src.Addr, RKey: src.RKey}})
		if _, err := e.wait(ctx, rdma.OpRDMARead); err != nil {
			return err
		}
		e.conn.PostSend(sendWR(ga))
		if ev, err = e.wait(ctx, rdma.OpRecv); err != nil {
			return err
		}
		sink, _ := ParseInfo(ev.data)
		if ping == 2 {
			buf.Bytes()[size/2] ^= 1
		}
		e.conn.PostSend(rdma.SendWR{Op: rdma.OpRDMAWrite, Signaled: true, Local: []rdma.SGE{{MR: buf, Length: size}},
			Remote: rdma.RemoteAddr{Addr: sink.Addr, RKey: sink.RKey}})
		if _, err := e.wait(ctx, rdma.OpRDMAWrite); err != nil {
			return err
		}
		e.conn.PostSend(sendWR(ga))
	}
}

func TestClientDetectsMismatch(t *testing.T) {
	for _, p := range providers()[:2] {
		t.Run(p.name, func(t *testing.T) {
			cdev, sdev, l, ctx := setup(t, p)
			done := make(chan error, 1)
			go func() { done <- badServer(ctx, t, sdev, l, 100) }()
			r, err := Client(ctx, cdev, l.Addr().String(), Config{Size: 100, Count: 5, Validate: true})
			if !errors.Is(err, ErrMismatch) || r.Pings != 2 {
				t.Fatalf("client: %+v, %v; want 2 pings and ErrMismatch", r, err)
			}
			if err := <-done; !errors.Is(err, ErrDisconnected) {
				t.Fatalf("bad server: %v, want ErrDisconnected", err)
			}
		})
	}
}

// badClient is an rping client whose ping 1 carries the pattern of ping 7,
// or whose first message is not 16 bytes (short).
func badClient(ctx context.Context, t *testing.T, dev rdma.Device, addr string, size int, short bool) error {
	e := &endpoint{recvMR: mustReg(t, dev, InfoLen, rdma.AccessLocalWrite), log: slog.New(slog.DiscardHandler)}
	info := mustReg(t, dev, InfoLen+1, 0)
	start := mustReg(t, dev, size, rdmaAccess)
	conn, _, err := dev.Dial(ctx, addr, qpConfig, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	e.conn = conn
	conn.PostRecv(e.recvWR())
	for ping := 0; ping < 3; ping++ {
		Pattern(start.Bytes(), ping)
		if ping == 1 {
			Pattern(start.Bytes(), 7)
		}
		Info{Addr: start.Addr(), RKey: start.RKey(), Size: uint32(size)}.Put(info.Bytes())
		n := InfoLen
		if short {
			n = InfoLen - 4
		}
		conn.PostSend(rdma.SendWR{Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: info, Length: n}}})
		if _, err := e.wait(ctx, rdma.OpRecv); err != nil {
			return err
		}
		conn.PostSend(sendWR(info)) // sink: the same buffer, never checked
		if _, err := e.wait(ctx, rdma.OpRecv); err != nil {
			return err
		}
	}
	return nil
}

func TestServerDetectsMismatch(t *testing.T) {
	for _, p := range providers()[:2] {
		for _, short := range []bool{false, true} {
			t.Run(p.name+"/short="+strconv.FormatBool(short), func(t *testing.T) {
				cdev, sdev, l, ctx := setup(t, p)
				done := make(chan error, 1)
				go func() { done <- badClient(ctx, t, cdev, l.Addr().String(), 64, short) }()
				r, err := Server(ctx, sdev, l, Config{Size: 64, Validate: true})
				want, pings := ErrMismatch, 1
				if short {
					want, pings = ErrBogus, 0
				}
				if !errors.Is(err, want) || r.Pings != pings {
					t.Fatalf("server: %+v, %v; want %d pings and %v", r, err, pings, want)
				}
				if err := <-done; !errors.Is(err, ErrDisconnected) {
					t.Fatalf("bad client: %v, want ErrDisconnected", err)
				}
			})
		}
	}
}

func TestServerCountShortfall(t *testing.T) {
	cdev, sdev, l, ctx := setup(t, providers()[1])
	done := make(chan error, 1)
	go func() {
		_, err := Client(ctx, cdev, l.Addr().String(), Config{Count: 2})
		done <- err
	}()
	r, err := Server(ctx, sdev, l, Config{Count: 3})
	if !errors.Is(err, ErrDisconnected) || r.Pings != 2 {
		t.Fatalf("server: %+v, %v; want 2 pings and ErrDisconnected", r, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{Size: MinSize - 1}, {Size: MaxSize + 1}, {Count: -1}} {
		if _, err := Client(context.Background(), nil, "", c); err == nil {
			t.Errorf("Client with %+v: no error", c)
		}
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add(Info{Addr: 1, RKey: 2, Size: 3}.Marshal())
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := ParseInfo(b)
		if err != nil {
			if len(b) == InfoLen {
				t.Fatalf("16 bytes refused: %v", err)
			}
			return
		}
		if !bytes.Equal(i.Marshal(), b) {
			t.Fatalf("round trip % x -> %+v -> % x", b, i, i.Marshal())
		}
	})
}
