package iwarp

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestRxReaderSplits streams FPDU-like records (a 4-byte header naming the
// payload length, the payload, a 4-byte trailer) over loopback TCP in
// random write sizes and reads them back with Read (headers) and
// readPayload (payload and trailer), on the readv path and the plain one.
func TestRxReaderSplits(t *testing.T) {
	for _, readv := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		var stream bytes.Buffer
		var sizes []int
		for range 300 {
			n := rng.IntN(70000)
			if rng.IntN(3) == 0 {
				n = rng.IntN(64)
			}
			sizes = append(sizes, n)
			stream.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
			for i := range n + 4 {
				stream.WriteByte(byte(rng.Uint32() + uint32(i)))
			}
		}
		data := stream.Bytes()
		go func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return
			}
			defer c.Close()
			r := rand.New(rand.NewPCG(3, 4))
			for off := 0; off < len(data); {
				k := min(len(data)-off, 1+r.IntN(90000))
				if _, err := c.Write(data[off : off+k]); err != nil {
					return
				}
				off += k
				if r.IntN(4) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		rxReadv = readv
		b := newRxReader(c, 32<<10)
		rxReadv = true
		if (b.rc != nil) != readv {
			t.Fatalf("readv path %v, want %v", b.rc != nil, readv)
		}
		off := 0
		for i, n := range sizes {
			var h [4]byte
			if _, err := io.ReadFull(b, h[:]); err != nil {
				t.Fatalf("record %d header: %v", i, err)
			}
			if got := int(h[0])<<24 | int(h[1])<<16 | int(h[2])<<8 | int(h[3]); got != n {
				t.Fatalf("record %d: length %d, want %d", i, got, n)
			}
			off += 4
			p, tr := make([]byte, n), make([]byte, 4)
			if err := b.readPayload(p, tr); err != nil {
				t.Fatalf("record %d payload: %v", i, err)
			}
			if !bytes.Equal(p, data[off:off+n]) || !bytes.Equal(tr, data[off+n:off+n+4]) {
				t.Fatalf("record %d (%d bytes, readv %v): payload or trailer differs", i, n, readv)
			}
			off += n + 4
		}
		if _, err := b.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("after the stream: %v, want EOF", err)
		}
		c.Close()
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	s.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestRxReaderAheadAfterLargePayload: after a payload of the buffer's size
// or more, readPayload gathers only the next FPDU's header (rxAhead bytes)
// into the buffer, so the next large payload is read into its own memory
// rather than half through the buffer; after a smaller one it reads ahead
// as far as the buffer holds.
func TestRxReaderAheadAfterLargePayload(t *testing.T) {
	client, server := tcpPair(t)
	const bufSize = 32 << 10
	b := newRxReader(server, bufSize)
	record := func(n int) []byte {
		r := make([]byte, 4+n+4)
		r[0], r[1], r[2], r[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		for i := range n {
			r[4+i] = byte(i)
		}
		return r
	}
	read := func(n int) {
		t.Helper()
		var h [4]byte
		if _, err := io.ReadFull(b, h[:]); err != nil {
			t.Fatal(err)
		}
		if got := int(h[0])<<24 | int(h[1])<<16 | int(h[2])<<8 | int(h[3]); got != n {
			t.Fatalf("record of %d bytes, want %d", got, n)
		}
		p := make([]byte, n)
		if err := b.readPayload(p, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		for i := range p {
			if p[i] != byte(i) {
				t.Fatalf("byte %d of a %d-byte record differs", i, n)
			}
		}
	}
	for _, tc := range []struct {
		n        int
		maxAhead int
	}{{64 << 10, rxAhead}, {bufSize, rxAhead}, {12 << 10, bufSize}} {
		// A large record, this one and another large one, all queued
		// before the reads.
		var stream []byte
		stream = append(stream, record(64<<10)...)
		stream = append(stream, record(tc.n)...)
		stream = append(stream, record(64<<10)...)
		if _, err := client.Write(stream); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		read(64 << 10)
		read(tc.n)
		if got := b.w - b.r; got > tc.maxAhead {
			t.Errorf("after a %d-byte payload: %d bytes buffered, want at most %d", tc.n, got, tc.maxAhead)
		}
		if tc.maxAhead > rxAhead && b.w-b.r <= rxAhead {
			t.Errorf("after a %d-byte payload: %d bytes buffered, want a full read ahead", tc.n, b.w-b.r)
		}
		read(64 << 10)
	}
}

// TestRxReaderLoneWait: with the connection's lone wait set, a reader
// that finds the socket empty waits in ppoll(2) (eagerWait) and reads what
// arrives there, record after record; without it, it waits in Go's poller
// only. Either way every byte arrives in order.
func TestRxReaderLoneWait(t *testing.T) {
	for _, lone := range []bool{true, false} {
		client, server := tcpPair(t)
		var on atomic.Bool
		on.Store(lone)
		b := newRxReader(server, 32<<10)
		b.lone = &on
		const records = 20
		go func() {
			for i := range records {
				time.Sleep(200 * time.Microsecond) // the reader waits first
				if _, err := client.Write(bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
					return
				}
			}
		}()
		for i := range records {
			p := make([]byte, 100)
			if _, err := io.ReadFull(b, p); err != nil {
				t.Fatalf("lone %v, record %d: %v", lone, i, err)
			}
			if !bytes.Equal(p, bytes.Repeat([]byte{byte(i)}, 100)) {
				t.Fatalf("lone %v, record %d: % x...", lone, i, p[:4])
			}
		}
		hits := b.eagerHits.Load()
		if lone && hits == 0 {
			t.Errorf("lone wait set: no record came through ppoll")
		}
		if !lone && hits != 0 {
			t.Errorf("lone wait off: %d records came through ppoll", hits)
		}
	}
}
