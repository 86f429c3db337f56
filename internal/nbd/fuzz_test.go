package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzServeConn feeds arbitrary client bytes (handshake and requests) to a
// server: it must neither panic nor hang, whatever they are.
func FuzzServeConn(f *testing.F) {
	hello := []byte{0, 0, 0, 3}
	opt := func(o uint32, d []byte) []byte {
		b := binary.BigEndian.AppendUint64(nil, magicIHaveOpt)
		b = binary.BigEndian.AppendUint32(b, o)
		b = binary.BigEndian.AppendUint32(b, uint32(len(d)))
		return append(b, d...)
	}
	req := func(typ uint16, off uint64, n uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, magicRequest)
		b = binary.BigEndian.AppendUint16(b, 0)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint64(b, 1)
		b = binary.BigEndian.AppendUint64(b, off)
		return binary.BigEndian.AppendUint32(b, n)
	}
	f.Add(append(append(hello, opt(optList, nil)...), opt(optGo, infoData("lun0"))...))
	f.Add(append(append(hello, opt(optExportName, []byte("lun1"))...), req(cmdRead, 0, 4096)...))
	f.Add(append(append(append(hello, opt(optGo, infoData(""))...), req(cmdWrite, 512, 4)...), "abcd"...))
	f.Add(append(hello, opt(optInfo, []byte{0, 0, 0, 200})...))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, _, _ := testServer()
		a, b := net.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			_ = s.ServeConn(ctx, b)
			close(done)
		}()
		go func() { _, _ = io.Copy(io.Discard, a) }()
		_, _ = io.Copy(a, bytes.NewReader(in))
		a.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not end after the client closed")
		}
	})
}
