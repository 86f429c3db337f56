package faultproxy

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection until it closes.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		return 0, err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return time.Since(start), nil
}

// TestFaults: delay holds chunks, Down holds data until the link is back
// (and leaves new connections unanswered), Reset gives the client a
// connection reset.
func TestFaults(t *testing.T) {
	p, err := Listen("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := roundTrip(t, c, "hello"); err != nil {
		t.Fatal(err)
	}

	p.Set(Faults{Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond})
	if d, err := roundTrip(t, c, "slow"); err != nil || d < 80*time.Millisecond {
		t.Fatalf("delayed round trip: %v %v, want two 40..60 ms delays", d, err)
	}

	p.Set(Faults{Down: true})
	time.AfterFunc(300*time.Millisecond, func() { p.Set(Faults{}) })
	if d, err := roundTrip(t, c, "down"); err != nil || d < 250*time.Millisecond {
		t.Fatalf("round trip across a 300 ms link down: %v %v", d, err)
	}

	p.Set(Faults{StallToClient: true})
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := roundTrip(t, c, "stalled"); !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
		t.Fatalf("round trip with the client direction stalled: %v, want a timeout", err)
	}
	p.Set(Faults{})
	c.SetDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len("stalled"))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "stalled" {
		t.Fatalf("after the stall: %q %v", got, err)
	}

	p.Reset()
	if _, err := roundTrip(t, c, "reset"); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("after Reset: %v, want connection reset", err)
	}
	if s := p.Stats(); s.Conns != 1 || s.Resets != 2 || s.Bytes == 0 {
		t.Fatalf("stats %+v", s)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
