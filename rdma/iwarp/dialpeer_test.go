package iwarp

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// TestDialNotATarget: Dial to a TCP port that is no iWARP target says
// which peer and what it did instead of sending an MPA reply (RFC 5044
// §7.1: the 20-byte reply starts with the key "MPA ID Rep Frame"). Bytes
// no MPA reply begins with fail the dial at once, even fewer than a
// header's worth, with the bytes quoted and the protocol they look like;
// silence fails after the handshake timeout, naming it; a close before a
// whole reply says so.
func TestDialNotATarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		peer    func(nc net.Conn) // runs on the accepted connection
		want    []string
		is      error
		fast    bool // fails well before the handshake timeout
	}{
		{"HTTP server", 30 * time.Second, func(nc net.Conn) {
			nc.Read(make([]byte, 512))
			nc.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		}, []string{` sent "HTTP/1.1 400 Bad Req" (an HTTP server?), not an MPA reply frame`}, ErrMPAFrame, true},
		{"SSH banner", 30 * time.Second, func(nc net.Conn) {
			// 12 bytes, then silence: fewer than an MPA header.
			nc.Write([]byte("SSH-2.0-Go\r\n"))
		}, []string{` sent "SSH-2.0-Go\r\n" (an SSH server?), not an MPA reply frame`}, ErrMPAFrame, true},
		{"another initiator", 30 * time.Second, func(nc net.Conn) {
			nc.Write([]byte(mpaKeyRequest))
		}, []string{` sent "MPA ID Req`, `" (an MPA request: an iWARP initiator, not a target?), not an MPA reply frame`}, ErrMPAFrame, true},
		{"silence", 300 * time.Millisecond, func(nc net.Conn) {}, []string{"iwarp: no MPA reply from ", " within ", "(is it an iWARP SRP target?)"}, os.ErrDeadlineExceeded, false},
		{"half a reply", 300 * time.Millisecond, func(nc net.Conn) {
			nc.Write([]byte(mpaKeyReply[:10]))
		}, []string{"iwarp: no MPA reply from ", `: only 10 bytes of one arrived, "MPA ID Rep"`}, os.ErrDeadlineExceeded, false},
		{"close", 30 * time.Second, func(nc net.Conn) {
			// The request read first: the close is a FIN, not a reset.
			nc.Read(make([]byte, 512))
			nc.Close()
		}, []string{" closed the connection without an MPA reply (is it an iWARP SRP target?)"}, io.EOF, true},
		{"reset", 30 * time.Second, func(nc net.Conn) {
			nc.Read(make([]byte, 512))     // the dial is done: it sent its request
			nc.(*net.TCPConn).SetLinger(0) // close sends RST
			nc.Close()
		}, []string{" reset the connection without an MPA reply (is it an iWARP SRP target?)"}, syscall.ECONNRESET, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, ch := rawListen(t)
			go func() {
				if nc, ok := <-ch; ok {
					tc.peer(nc)
				}
			}()
			dev := NewDevice(Config{HandshakeTimeout: tc.timeout})
			defer dev.Close()
			addr := ln.Addr().String()
			start := time.Now()
			c, _, err := dev.Dial(testCtx(t), addr, rdma.QPConfig{}, nil)
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant %q in it", err, w)
				}
			}
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("error %q does not name %s", err, addr)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			if tc.fast && took > 5*time.Second {
				t.Errorf("Dial failed after %v, want at once (handshake timeout %v)", took, tc.timeout)
			}
			if !tc.fast && took < tc.timeout {
				t.Errorf("Dial failed after %v, before the handshake timeout %v", took, tc.timeout)
			}
		})
	}
}
