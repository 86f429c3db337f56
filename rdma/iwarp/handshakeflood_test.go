package iwarp

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination safe for the listener's handshake
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestBadMPARequestsLogBounded: 500 connections that send garbage instead
// of an MPA request (any host that reaches the port can open them) should
// not write 500 Warn lines: the log is the operator's, and one line per
// peer host and interval (with a count of the rest) says the same.
func TestBadMPARequestsLogBounded(t *testing.T) {
	var logs lockedBuffer
	dev := NewDevice(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), HandshakeTimeout: time.Second})
	defer dev.Close()
	ln, err := dev.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 500
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Close()
	}
	time.Sleep(2 * time.Second)
	if got := strings.Count(logs.String(), "bad MPA request"); got > 10 {
		t.Errorf("%d Warn lines for %d bad handshakes from one host; want at most 10", got, n)
	}
}

// TestPendingHandshakesBounded: connections that never send their MPA
// request hold a place each until the handshake timeout; beyond the
// listener's bound a new connection is closed at once, and a place frees
// when a pending one goes.
func TestPendingHandshakesBounded(t *testing.T) {
	dev := NewDevice(Config{Logger: slog.New(slog.DiscardHandler), HandshakeTimeout: 30 * time.Second})
	defer dev.Close()
	ln, err := dev.Listen(testCtx(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := ln.(*listener)
	l.mu.Lock()
	l.maxPending = 4
	l.mu.Unlock()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	pending := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pending() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	closedAtOnce := func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	if !closedAtOnce() {
		t.Fatal("a fifth pending handshake was kept")
	}
	idle[0].Close()
	for pending() > 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if closedAtOnce() {
		t.Fatal("a freed place was not given to a new connection")
	}
}
