package iwarp

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
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
