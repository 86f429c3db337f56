package iwarp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Hand-built ULPDUs (RFC 5041 §4.2/§4.3 layouts), independent of ddp.go.

func tagged(c0, c1 byte, stag uint32, to uint64, payload []byte) []byte {
	b := []byte{c0, c1}
	b = binary.BigEndian.AppendUint32(b, stag)
	b = binary.BigEndian.AppendUint64(b, to)
	return append(b, payload...)
}

func untagged(c0, c1 byte, rsvd, qn, msn, mo uint32, payload []byte) []byte {
	b := []byte{c0, c1}
	for _, v := range []uint32{rsvd, qn, msn, mo} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return append(b, payload...)
}

func readReq(msn, sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) []byte {
	var rr []byte
	rr = binary.BigEndian.AppendUint32(rr, sinkSTag)
	rr = binary.BigEndian.AppendUint64(rr, sinkTO)
	rr = binary.BigEndian.AppendUint32(rr, size)
	rr = binary.BigEndian.AppendUint32(rr, srcSTag)
	rr = binary.BigEndian.AppendUint64(rr, srcTO)
	return untagged(0x41, 0x41, 0, 1, msn, 0, rr)
}

// fakePeer is a hand-driven MPA initiator talking to a Device's listener.
type fakePeer struct {
	t      *testing.T
	ctx    context.Context
	dev    *Device
	nc     net.Conn
	crc    bool
	server rdma.Conn
}

// newFakePeer connects to a listener of a fresh Device (cfg) with an MPA v2
// request (flags byte, IRD/ORD word) and returns once the Device accepted
// with qcfg.
func newFakePeer(t *testing.T, cfg Config, qcfg rdma.QPConfig, flags byte) *fakePeer {
	t.Helper()
	ctx := testCtx(t)
	dev := NewDevice(cfg)
	t.Cleanup(func() { dev.Close() })
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{err: err}
			return
		}
		c, err := r.Accept(ctx, qcfg, nil)
		ch <- res{c, err}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	req := append([]byte(mpaKeyRequest), flags|0x10, 2, 0, 4, 0, 4, 0, 4)
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	rep := make([]byte, 24)
	if _, err := io.ReadFull(nc, rep); err != nil {
		t.Fatal(err)
	}
	if string(rep[:16]) != mpaKeyReply || rep[16]&0x20 != 0 {
		t.Fatalf("reply %x", rep)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return &fakePeer{t: t, ctx: ctx, dev: dev, nc: nc, crc: (flags|rep[16])&0x40 != 0, server: r.c}
}

func (p *fakePeer) send(ulpdus ...[]byte) {
	p.t.Helper()
	var b []byte
	for _, u := range ulpdus {
		b = append(b, fpduBytes(u, p.crc)...)
	}
	if _, err := p.nc.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// readFPDU reads one FPDU and returns its ULPDU (CRC checked when on).
func (p *fakePeer) readFPDU() ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(p.nc, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	rest := make([]byte, n+padLen(n)+4)
	if _, err := io.ReadFull(p.nc, rest); err != nil {
		return nil, err
	}
	whole := append(l[:], rest...)
	body := whole[:len(whole)-4]
	got := binary.LittleEndian.Uint32(whole[len(whole)-4:])
	want := uint32(0)
	if p.crc {
		want = crc32cBitwise(body)
	}
	if got != want {
		p.t.Fatalf("FPDU CRC field %#x, want %#x", got, want)
	}
	return rest[:n], nil
}

// expectTerminate reads FPDUs up to a Terminate and checks its control word
// (RFC 5040 §4.8: layer/type in byte 0, code, then the M/D/R flags) and the
// copied header, then that the TCP connection closes and the device reports
// a local *rdma.TerminateError.
func (p *fakePeer) expectTerminate(layer, typ, code, flags byte, hdr []byte) {
	p.t.Helper()
	var u []byte
	for {
		var err error
		u, err = p.readFPDU()
		if err != nil {
			p.t.Fatalf("no Terminate: %v", err)
		}
		if u[0]&0x80 == 0 && u[1]&0x0f == opTerminate {
			break
		}
	}
	wantHdr := untagged(0x41, 0x47, 0, 2, 1, 0, nil)
	if !bytes.Equal(u[:18], wantHdr) {
		p.t.Fatalf("Terminate DDP header %x, want %x", u[:18], wantHdr)
	}
	ctl := u[18:22]
	if want := []byte{layer<<4 | typ, code, flags, 0}; !bytes.Equal(ctl, want) {
		p.t.Fatalf("Terminate control %x, want %x", ctl, want)
	}
	if !bytes.Equal(u[22:], hdr) {
		p.t.Fatalf("Terminate copied header %x, want %x", u[22:], hdr)
	}
	if _, err := p.readFPDU(); !errors.Is(err, io.EOF) && !isReset(err) {
		p.t.Fatalf("after the Terminate: %v, want EOF", err)
	}
	select {
	case <-p.server.Done():
	case <-p.ctx.Done():
		p.t.Fatal("connection not down")
	}
	var te *rdma.TerminateError
	if !errors.As(p.server.Err(), &te) || !te.Local || te.Layer != layer || te.Type != typ || te.Code != code {
		p.t.Fatalf("Err() = %v, want local terminate %d/%d/%#x", p.server.Err(), layer, typ, code)
	}
	if err := p.server.PostSend(rdma.SendWR{Op: rdma.OpSend}); !errors.Is(err, rdma.ErrClosed) {
		p.t.Fatalf("PostSend after Terminate: %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "reset")
}

// fpduHead is the start of the FPDU a ULPDU travels in: length + the first
// n header bytes (what a Terminate copies).
func fpduHead(u []byte, n int) []byte {
	return append([]byte{byte(len(u) >> 8), byte(len(u))}, u[:n]...)
}

func TestTerminateOnViolation(t *testing.T) {
	const (
		md  = termFlagM | termFlagD
		mdr = termFlagM | termFlagD | termFlagR
	)
	type setup struct {
		p  *fakePeer
		rw rdma.MemoryRegion // 16 bytes, local+remote write
		lw rdma.MemoryRegion // 16 bytes, local write only
		rr rdma.MemoryRegion // 16 bytes, remote read
		rb rdma.MemoryRegion // receive buffer, 8 bytes
	}
	cases := []struct {
		name              string
		postRecv          bool
		ulpdu             func(s *setup) []byte
		layer, typ, code  byte
		flags             byte
		hdrLen            int // bytes of the offending ULPDU copied (after the length)
		recvStatus        rdma.Status
		checkRecvStatusOn bool
	}{
		{name: "write bad STag", ulpdu: func(s *setup) []byte { return tagged(0xc1, 0x40, 0xdead0001, 0, []byte("abcd")) },
			layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTInvalidSTag, flags: md, hdrLen: 14},
		{name: "write to the local-region sink STag", ulpdu: func(s *setup) []byte { return tagged(0xc1, 0x40, localSinkSTag, 0, []byte("abcd")) },
			layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTInvalidSTag, flags: md, hdrLen: 14},
		{name: "write past the end", ulpdu: func(s *setup) []byte {
			return tagged(0xc1, 0x40, s.rw.RKey(), s.rw.Addr()+14, []byte("abcd"))
		}, layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTBaseBounds, flags: md, hdrLen: 14},
		{name: "write before the start", ulpdu: func(s *setup) []byte {
			return tagged(0xc1, 0x40, s.rw.RKey(), s.rw.Addr()-1, []byte("abcd"))
		}, layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTBaseBounds, flags: md, hdrLen: 14},
		{name: "write TO wrap", ulpdu: func(s *setup) []byte {
			return tagged(0xc1, 0x40, s.rw.RKey(), ^uint64(0)-1, []byte("abcd"))
		}, layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTBaseBounds, flags: md, hdrLen: 14},
		{name: "write without remote write", ulpdu: func(s *setup) []byte {
			return tagged(0xc1, 0x40, s.lw.RKey(), s.lw.Addr(), []byte("abcd"))
		}, layer: LayerRDMAP, typ: RDMAPRemoteProtection, code: RDMAPAccessRights, flags: md, hdrLen: 14},
		{name: "write deregistered", ulpdu: func(s *setup) []byte {
			s.rw.Deregister()
			return tagged(0xc1, 0x40, s.rw.RKey(), s.rw.Addr(), []byte("abcd"))
		}, layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTInvalidSTag, flags: md, hdrLen: 14},
		{name: "tagged DDP version 2", ulpdu: func(s *setup) []byte {
			return tagged(0xc2, 0x40, s.rw.RKey(), s.rw.Addr(), []byte("abcd"))
		}, layer: LayerDDP, typ: DDPTaggedBuffer, code: DDPTInvalidVersion, flags: md, hdrLen: 14},
		{name: "Read Response with no Read", ulpdu: func(s *setup) []byte {
			return tagged(0xc1, 0x42, s.rw.RKey(), s.rw.Addr(), []byte("abcd"))
		}, layer: LayerRDMAP, typ: RDMAPRemoteOperation, code: RDMAPUnexpectedOpcode, flags: md, hdrLen: 14},
		{name: "send MSN out of range", postRecv: true, ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 0, 2, 0, []byte("x")) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUMSNRange, flags: md, hdrLen: 18},
		{name: "send without receive buffer", ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 0, 1, 0, []byte("x")) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUNoBuffer, flags: md, hdrLen: 18},
		{name: "send too long", postRecv: true, ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 0, 1, 0, []byte("123456789")) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUMessageTooLong, flags: md, hdrLen: 18,
			checkRecvStatusOn: true, recvStatus: rdma.StatusLocalLength},
		{name: "send first MO not 0", postRecv: true, ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 0, 1, 4, []byte("x")) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUInvalidMO, flags: md, hdrLen: 18},
		{name: "invalid QN", ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 3, 1, 0, nil) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUInvalidQN, flags: md, hdrLen: 18},
		{name: "untagged DDP version 0", ulpdu: func(s *setup) []byte { return untagged(0x40, 0x43, 0, 0, 1, 0, nil) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUInvalidVersion, flags: md, hdrLen: 18},
		{name: "RDMAP version 2", ulpdu: func(s *setup) []byte { return untagged(0x41, 0x83, 0, 0, 1, 0, nil) },
			layer: LayerRDMAP, typ: RDMAPRemoteOperation, code: RDMAPInvalidVersion, flags: md, hdrLen: 18},
		{name: "opcode 8", ulpdu: func(s *setup) []byte { return untagged(0x41, 0x48, 0, 0, 1, 0, nil) },
			layer: LayerRDMAP, typ: RDMAPRemoteOperation, code: RDMAPUnexpectedOpcode, flags: md, hdrLen: 18},
		{name: "Send on the Read queue", ulpdu: func(s *setup) []byte { return untagged(0x41, 0x43, 0, 1, 1, 0, nil) },
			layer: LayerRDMAP, typ: RDMAPRemoteOperation, code: RDMAPUnexpectedOpcode, flags: md, hdrLen: 18},
		{name: "send invalidate unknown STag", postRecv: true, ulpdu: func(s *setup) []byte { return untagged(0x41, 0x44, 0xdead0001, 0, 1, 0, []byte("x")) },
			layer: LayerRDMAP, typ: RDMAPRemoteOperation, code: RDMAPCannotInvalidate, flags: md, hdrLen: 18},
		{name: "read bad source STag", ulpdu: func(s *setup) []byte { return readReq(1, 0x100, 0, 4, 0xdead0001, 0) },
			layer: LayerRDMAP, typ: RDMAPRemoteProtection, code: RDMAPInvalidSTag, flags: mdr, hdrLen: 46},
		{name: "read without remote read", ulpdu: func(s *setup) []byte { return readReq(1, 0x100, 0, 4, s.rw.RKey(), s.rw.Addr()) },
			layer: LayerRDMAP, typ: RDMAPRemoteProtection, code: RDMAPAccessRights, flags: mdr, hdrLen: 46},
		{name: "read past the end", ulpdu: func(s *setup) []byte { return readReq(1, 0x100, 0, 17, s.rr.RKey(), s.rr.Addr()) },
			layer: LayerRDMAP, typ: RDMAPRemoteProtection, code: RDMAPBaseBounds, flags: mdr, hdrLen: 46},
		{name: "read MSN out of range", ulpdu: func(s *setup) []byte { return readReq(5, 0x100, 0, 4, s.rr.RKey(), s.rr.Addr()) },
			layer: LayerDDP, typ: DDPUntaggedBuffer, code: DDPUMSNRange, flags: md, hdrLen: 18},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePeer(t, Config{}, rdma.QPConfig{IRD: 4}, 0)
			reg := func(n int, a rdma.Access) rdma.MemoryRegion {
				m, err := p.dev.Register(make([]byte, n), a)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			s := &setup{p: p, rw: reg(16, rdma.AccessLocalWrite|rdma.AccessRemoteWrite),
				lw: reg(16, rdma.AccessLocalWrite), rr: reg(16, rdma.AccessRemoteRead), rb: reg(8, rdma.AccessLocalWrite)}
			if tc.postRecv {
				if err := p.server.PostRecv(rdma.RecvWR{ID: 77, Local: rdma.SGE{MR: s.rb, Length: 8}}); err != nil {
					t.Fatal(err)
				}
			}
			u := tc.ulpdu(s)
			p.send(u)
			p.expectTerminate(tc.layer, tc.typ, tc.code, tc.flags, fpduHead(u, tc.hdrLen))
			if tc.postRecv {
				c := pollOne(t, p.server)
				want := rdma.StatusFlushed
				if tc.checkRecvStatusOn {
					want = tc.recvStatus
				}
				if c.ID != 77 || c.Status != want {
					t.Fatalf("receive completion %+v, want status %v", c, want)
				}
			}
		})
	}
}

func TestTerminateCRCError(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{}, mpaFlagCRC)
	if !p.crc {
		t.Fatal("CRC not negotiated")
	}
	b := fpduBytes(tagged(0xc1, 0x40, 0, 0, nil), true)
	b[len(b)-1] ^= 0x01
	if _, err := p.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	// LLP errors carry no copied header.
	p.expectTerminate(LayerLLP, LLPTypeMPA, LLPCRCError, 0, nil)
}

func TestTerminateShortULPDU(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{}, 0)
	p.send([]byte{0xc1, 0x40, 0, 0}) // 4-byte ULPDU, tagged header needs 14
	p.expectTerminate(LayerDDP, DDPLocalCatastrophic, 0, 0, nil)
}

// TestTerminateBeyondIRD: with IRD 1, a second Read Request while the
// first one's response is still queued is refused (RDMAP remote operation,
// catastrophic error localized to the stream, as siw). The writer is kept
// busy with a 32 MiB Send the fake peer does not read, so the first
// response stays queued.
func TestTerminateBeyondIRD(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{IRD: 1}, 0)
	big, err := p.dev.Register(make([]byte, 32<<20), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.server.PostSend(rdma.SendWR{Op: rdma.OpSend, Local: []rdma.SGE{{MR: big, Length: 32 << 20}}}); err != nil {
		t.Fatal(err)
	}
	c := p.server.(*conn)
	for {
		c.mu.Lock()
		taken := c.sqUntx == 0
		c.mu.Unlock()
		if taken {
			break
		}
		select {
		case <-p.ctx.Done():
			t.Fatal("the writer never took the Send")
		case <-time.After(time.Millisecond):
		}
	}
	src, err := p.dev.Register(make([]byte, 64), rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	p.send(readReq(1, 0x100, 0, 4, src.RKey(), src.Addr()), readReq(2, 0x100, 0, 4, src.RKey(), src.Addr()))
	select {
	case <-p.server.Done():
	case <-p.ctx.Done():
		t.Fatal("connection not down")
	}
	var te *rdma.TerminateError
	if !errors.As(p.server.Err(), &te) || !te.Local || te.Layer != LayerRDMAP || te.Type != RDMAPRemoteOperation || te.Code != RDMAPCatastrophicStream {
		t.Fatalf("Err() = %v", p.server.Err())
	}
}

// TestZeroLengthWriteSTag0 is ib_srpt's first FPDU after the handshake: a
// zero-length RDMA Write with STag 0 and TO 0, which must be accepted.
func TestZeroLengthWriteSTag0(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{}, 0)
	rb, _ := p.dev.Register(make([]byte, 8), rdma.AccessLocalWrite)
	if err := p.server.PostRecv(rdma.RecvWR{ID: 5, Local: rdma.SGE{MR: rb, Length: 8}}); err != nil {
		t.Fatal(err)
	}
	p.send(tagged(0xc1, 0x40, 0, 0, nil), untagged(0x41, 0x43, 0, 0, 1, 0, []byte("hi")))
	c := pollOne(t, p.server)
	if c.ID != 5 || c.Status != rdma.StatusSuccess || c.ByteLen != 2 || string(rb.Bytes()[:2]) != "hi" {
		t.Fatalf("completion %+v", c)
	}
	if err := p.server.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPeerTerminate: a Terminate from the peer is reported by Err as a
// remote *rdma.TerminateError and flushes posted work.
func TestPeerTerminate(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{}, 0)
	rb, _ := p.dev.Register(make([]byte, 8), rdma.AccessLocalWrite)
	if err := p.server.PostRecv(rdma.RecvWR{ID: 9, Local: rdma.SGE{MR: rb, Length: 8}}); err != nil {
		t.Fatal(err)
	}
	p.send(untagged(0x41, 0x47, 0, 2, 1, 0, []byte{0x12, 0x05, 0x00, 0x00}))
	c := pollOne(t, p.server)
	if c.ID != 9 || c.Status != rdma.StatusFlushed {
		t.Fatalf("completion %+v", c)
	}
	var te *rdma.TerminateError
	if !errors.As(p.server.Err(), &te) || te.Local || te.Layer != LayerDDP || te.Type != DDPUntaggedBuffer || te.Code != DDPUMessageTooLong {
		t.Fatalf("Err() = %#v", p.server.Err())
	}
}

// rawListen is a TCP listener whose single connection the test drives.
func rawListen(t *testing.T) (net.Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(ch)
			return
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		ch <- nc
	}()
	return ln, ch
}

// TestDialRequestBytes: the MPA request Dial sends is siw's, byte for byte.
func TestDialRequestBytes(t *testing.T) {
	ln, ch := rawListen(t)
	ctx := testCtx(t)
	dev := NewDevice(Config{})
	defer dev.Close()
	login := bytes.Repeat([]byte{0x5a}, 56)
	type res struct {
		c   rdma.Conn
		pd  []byte
		err error
	}
	dr := make(chan res, 1)
	go func() {
		c, pd, err := dev.Dial(ctx, ln.Addr().String(), rdma.QPConfig{IRD: 4, ORD: 4}, login)
		dr <- res{c, pd, err}
	}()
	nc := <-ch
	got := make([]byte, 80)
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	want := unhex(t, hexKeyReq+"10 02 00 3c 00 04 00 04"+strings.Repeat("5a", 56))
	if !bytes.Equal(got, want) {
		t.Fatalf("request\n got %x\nwant %x", got, want)
	}
	// siw's reply: IRD 4, ORD 4, a 52-byte login response.
	rep := unhex(t, hexKeyRep+"10 02 00 38 00 04 00 04"+strings.Repeat("a5", 52))
	nc.Write(rep)
	r := <-dr
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if !bytes.Equal(r.pd, bytes.Repeat([]byte{0xa5}, 52)) {
		t.Fatalf("reply private data %x", r.pd)
	}
	if caps := r.c.Caps(); caps.ORD != 4 || caps.IRD != 4 {
		t.Fatalf("caps %+v", caps)
	}
	// ib_srpt's first FPDU: a zero-length RDMA Write, STag 0, TO 0.
	nc.Write(fpduBytes(tagged(0xc1, 0x40, 0, 0, nil), false))
	// Then a Send; the initiator must still be up to take it.
	rb, _ := dev.Register(make([]byte, 4), rdma.AccessLocalWrite)
	if err := r.c.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rb, Length: 4}}); err != nil {
		t.Fatal(err)
	}
	nc.Write(fpduBytes(untagged(0x41, 0x43, 0, 0, 1, 0, []byte("rsp!")), false))
	if c := pollOne(t, r.c); c.Status != rdma.StatusSuccess || c.ByteLen != 4 {
		t.Fatalf("completion %+v", c)
	}
}

// TestDialRejected: an MPA reply with the R bit and private data.
func TestDialRejected(t *testing.T) {
	ln, ch := rawListen(t)
	dev := NewDevice(Config{})
	defer dev.Close()
	errc := make(chan error, 1)
	go func() {
		_, _, err := dev.Dial(testCtx(t), ln.Addr().String(), rdma.QPConfig{}, []byte("login"))
		errc <- err
	}()
	nc := <-ch
	io.ReadFull(nc, make([]byte, 20+4+5))
	nc.Write(unhex(t, hexKeyRep+"30 02 00 08 00 04 00 04 6e 6f 70 65"))
	var re *rdma.RejectError
	if err := <-errc; !errors.As(err, &re) || string(re.PrivateData) != "nope" {
		t.Fatalf("Dial: %v", err)
	}
}

// TestDialBadReplies: markers, a PD_Length over 512, a wrong key.
func TestDialBadReplies(t *testing.T) {
	for name, rep := range map[string]string{
		"markers":     hexKeyRep + "90 02 00 04 00 04 00 04",
		"PD too long": hexKeyRep + "10 02 ff ff 00 04 00 04",
		"request key": hexKeyReq + "10 02 00 04 00 04 00 04",
		"revision 3":  hexKeyRep + "10 03 00 04 00 04 00 04",
	} {
		t.Run(name, func(t *testing.T) {
			ln, ch := rawListen(t)
			dev := NewDevice(Config{})
			defer dev.Close()
			errc := make(chan error, 1)
			go func() {
				c, _, err := dev.Dial(testCtx(t), ln.Addr().String(), rdma.QPConfig{}, nil)
				if c != nil {
					c.Close()
				}
				errc <- err
			}()
			nc := <-ch
			io.ReadFull(nc, make([]byte, 24))
			nc.Write(unhex(t, rep))
			if err := <-errc; err == nil {
				t.Fatal("Dial succeeded")
			}
		})
	}
}

// TestListenerRefuses: requests for markers, an over-long PD_Length or an
// unknown revision get an MPA reply with the R bit and a closed connection;
// a wrong key or silence gets the connection closed. None reaches Accept.
func TestListenerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		req    string
		reject bool
	}{
		{"markers", hexKeyReq + "90 02 00 04 00 04 00 04", true},
		{"PD too long", hexKeyReq + "10 02 ff ff", true},
		{"revision 3", hexKeyReq + "10 03 00 00", true},
		{"reply key", hexKeyRep + "10 02 00 00", false},
		{"silence", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dev := NewDevice(Config{HandshakeTimeout: 300 * time.Millisecond})
			defer dev.Close()
			ln, err := dev.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			nc.Write(unhex(t, tc.req))
			b, _ := io.ReadAll(nc)
			if tc.reject {
				if len(b) < 20 || string(b[:16]) != mpaKeyReply || b[16]&mpaFlagReject == 0 {
					t.Fatalf("reply %x, want an MPA reject", b)
				}
			} else if len(b) != 0 {
				t.Fatalf("reply %x, want the connection closed", b)
			}
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if r, err := ln.Accept(actx); err == nil {
				t.Fatalf("Accept returned %v", r.RemoteAddr())
			}
		})
	}
}

// TestPeerToPeerRTR: in RFC 6581 peer-to-peer mode the request offers the
// Write and Read RTRs (80 04 c0 04 with IRD 4, ORD 4), and after the reply's
// choice the first FPDU is that RTR: a zero-length RDMA Write (STag 0, TO 0)
// or a zero-length RDMA Read Request, whose zero-length Read Response the
// initiator consumes.
func TestPeerToPeerRTR(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		rtr   []byte
	}{
		{"write", "80 04 80 04", tagged(0xc1, 0x40, 0, 0, nil)},
		{"read", "80 04 40 04", readReq(1, 0, 0, 0, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, ch := rawListen(t)
			dev := NewDevice(Config{PeerToPeer: true})
			defer dev.Close()
			type res struct {
				c   rdma.Conn
				err error
			}
			dr := make(chan res, 1)
			go func() {
				c, _, err := dev.Dial(testCtx(t), ln.Addr().String(), rdma.QPConfig{IRD: 4, ORD: 4}, nil)
				dr <- res{c, err}
			}()
			nc := <-ch
			req := make([]byte, 24)
			io.ReadFull(nc, req)
			if want := unhex(t, hexKeyReq+"10 02 00 04 80 04 c0 04"); !bytes.Equal(req, want) {
				t.Fatalf("request %x, want %x", req, want)
			}
			nc.Write(unhex(t, hexKeyRep+"10 02 00 04"+tc.reply))
			got := make([]byte, len(fpduBytes(tc.rtr, false)))
			if _, err := io.ReadFull(nc, got); err != nil {
				t.Fatal(err)
			}
			if want := fpduBytes(tc.rtr, false); !bytes.Equal(got, want) {
				t.Fatalf("RTR %x, want %x", got, want)
			}
			if tc.name == "read" {
				nc.Write(fpduBytes(tagged(0xc1, 0x42, 0, 0, nil), false))
			}
			r := <-dr
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.c.Close()
			rb, _ := dev.Register(make([]byte, 4), rdma.AccessLocalWrite)
			if err := r.c.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rb, Length: 4}}); err != nil {
				t.Fatal(err)
			}
			nc.Write(fpduBytes(untagged(0x41, 0x43, 0, 0, 1, 0, []byte("ok")), false))
			if c := pollOne(t, r.c); c.Status != rdma.StatusSuccess || c.ByteLen != 2 {
				t.Fatalf("completion %+v (err %v)", c, r.c.Err())
			}
		})
	}
}

// TestAcceptSiwPeerToPeer: siw's peer-to-peer request (80 04 c0 01: IRD 4,
// ORD 1, Write and Read RTR offered) gets the reply siw's own responder
// sends (80 04 80 04: Write RTR chosen), and Accept returns once the
// zero-length Write RTR arrived.
func TestAcceptSiwPeerToPeer(t *testing.T) {
	ctx := testCtx(t)
	dev := NewDevice(Config{PeerToPeer: true})
	defer dev.Close()
	ln, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- err
			return
		}
		c, err := r.Accept(ctx, rdma.QPConfig{IRD: 4, ORD: 4}, nil)
		if err == nil {
			if caps := c.Caps(); caps.ORD != 4 || caps.IRD != 1 {
				err = fmt.Errorf("caps %+v", caps)
			}
			c.Close()
		}
		ch <- err
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	nc.Write(unhex(t, hexKeyReq+"10 02 00 04 80 04 c0 01"))
	rep := make([]byte, 24)
	if _, err := io.ReadFull(nc, rep); err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, hexKeyRep+"10 02 00 04 80 04 80 04"); !bytes.Equal(rep, want) {
		t.Fatalf("reply %x, want %x", rep, want)
	}
	select {
	case err := <-ch:
		t.Fatalf("Accept returned before the RTR: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	nc.Write(fpduBytes(tagged(0xc1, 0x40, 0, 0, nil), false))
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}
