package rdmatest

import (
	"bytes"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Data movement beyond SEND: local length errors, send with invalidate,
// RDMA WRITE and READ, their ordering with SEND, zero-length operations.

func testLocalLength(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { localLength(t, f, opts) }
}

func localLength(t *testing.T, f Factory, opts Options) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 64, lw, 0)
	sb := e.reg(e.b, 64, 0, 1)
	if err := a.PostRecv(recv(1, rb, 0, 16), recv(2, rb, 16, 16)); err != nil {
		t.Fatal(err)
	}
	if err := d.PostRecv(recv(3, e.reg(e.b, 16, lw, 0), 0, 16)); err != nil {
		t.Fatal(err)
	}
	if err := d.PostSend(send(5, sb, 0, 17)); err != nil {
		t.Fatal(err)
	}
	ac := e.drain(a)
	if len(ac) != 2 {
		t.Fatalf("acceptor completions %v, want receive 1 local length error, receive 2 flushed", ac)
	}
	want(t, ac[0], 1, rdma.OpRecv, rdma.StatusLocalLength)
	want(t, ac[1], 2, rdma.OpRecv, rdma.StatusFlushed)
	dcs := e.drain(d)
	var sendC, recvC []rdma.Completion
	for _, c := range dcs {
		if c.Op == rdma.OpRecv {
			recvC = append(recvC, c)
		} else {
			sendC = append(sendC, c)
		}
	}
	okStatus := func(st rdma.Status) bool {
		return st == rdma.StatusRemoteInvalidRequest || st == rdma.StatusRemoteOperation ||
			(opts.CompletesOnTransmit && st == rdma.StatusSuccess)
	}
	if len(sendC) != 1 || sendC[0].ID != 5 || !okStatus(sendC[0].Status) {
		t.Fatalf("sender completions %v, want SEND 5 with remote invalid request or remote operation error", sendC)
	}
	if len(recvC) != 1 {
		t.Fatalf("sender receive completions %v, want receive 3 flushed", recvC)
	}
	want(t, recvC[0], 3, rdma.OpRecv, rdma.StatusFlushed)
	e.waitDone(d, "sender")
	e.waitDone(a, "receiver")
}

func testSendInvalidate(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { sendInvalidate(t, f, opts) }
}

func sendInvalidate(t *testing.T, f Factory, opts Options) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	// The dialer (an SRP initiator) exposes a buffer; the acceptor (target)
	// writes it and invalidates the key with its response.
	ib := e.reg(e.b, 64, all, 0)
	rb := e.reg(e.b, 64, lw, 0)
	tb := e.reg(e.a, 64, 0, 7)
	if err := d.PostRecv(recv(1, rb, 0, 64)); err != nil {
		t.Fatal(err)
	}
	wr := rdmaWR(2, rdma.OpRDMAWrite, sge(tb, 0, 64), ib, 0)
	wr.Signaled = false
	inv := rdma.SendWR{ID: 3, Op: rdma.OpSendInvalidate, Local: sge(tb, 0, 36), Signaled: true, InvalidateRKey: ib.RKey()}
	if err := a.PostSend(wr, inv); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 3, rdma.OpSendInvalidate, rdma.StatusSuccess)
	c := e.pollN(d, 1)[0]
	want(t, c, 1, rdma.OpRecv, rdma.StatusSuccess)
	if !c.Invalidated || c.InvalidatedRKey != ib.RKey() || c.ByteLen != 36 {
		t.Fatalf("receive of SEND with Invalidate: Invalidated %v key %#x ByteLen %d, want true %#x 36",
			c.Invalidated, c.InvalidatedRKey, c.ByteLen, ib.RKey())
	}
	if !bytes.Equal(ib.Bytes(), tb.Bytes()) {
		t.Fatal("RDMA WRITE before the SEND with Invalidate not placed")
	}
	// The key no longer grants remote access.
	if err := a.PostSend(rdmaWR(4, rdma.OpRDMAWrite, sge(tb, 0, 8), ib, 0)); err != nil {
		t.Fatal(err)
	}
	c = e.pollN(a, 1)[0]
	if opts.CompletesOnTransmit && c.Status == rdma.StatusSuccess {
		e.waitDone(a, "requester of a WRITE with an invalidated key")
		return
	}
	if c.ID != 4 || c.Op != rdma.OpRDMAWrite || !opts.remoteAccessOK(c.Status) {
		t.Fatalf("WRITE with an invalidated key: %+v, want a remote access error", c)
	}
}

// ---- RDMA WRITE / READ ----

// testWriteRead runs RDMA WRITE and READ from the dialer into the acceptor's
// memory and, as an SRP target does, from the acceptor into the dialer's.
func testWriteRead(opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) { writeReadBothWays(t, f, opts) }
}

func writeReadBothWays(t *testing.T, f Factory, opts Options) {
	for _, dialerRequests := range []bool{true, false} {
		name := "AcceptorRequests"
		if dialerRequests {
			name = "DialerRequests"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, f)
			cfg := rdma.QPConfig{MaxSGE: 4}
			d, a := e.connect(cfg, cfg)
			if dialerRequests {
				writeRead(t, e, opts, d, a, e.b, e.a)
			} else {
				writeRead(t, e, opts, a, d, e.a, e.b)
			}
			pingPong(e, d, a)
		})
	}
}

// writeRead: req (on device rdev) writes and reads memory of device tdev,
// the device of resp.
func writeRead(t *testing.T, e *env, opts Options, req, resp rdma.Conn, rdev, tdev rdma.Device) {
	d := req
	const size = 256 << 10
	tgt := e.reg(tdev, size, all, 0)
	src1, src2 := e.reg(rdev, size, 0, 1), e.reg(rdev, 1000, 0, 2)
	cases := []struct {
		off  uint64
		sges []rdma.SGE
	}{
		{0, sge(src1, 0, size)},       // whole region
		{size - 1, sge(src2, 999, 1)}, // last byte
		{4093, sge(src1, 17, 8192)},   // unaligned, crossing pages
		{100, []rdma.SGE{{MR: src2, Offset: 0, Length: 1000}, {MR: src1, Offset: 5, Length: 3000}, {MR: src2, Offset: 500, Length: 1}}},
	}
	expect := pattern(size, 0)
	fence := e.reg(rdev, 1, lw, 0)
	for i, tc := range cases {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMAWrite, tc.sges, tgt, tc.off)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		want(t, e.pollN(d, 1)[0], uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
		if opts.CompletesOnTransmit {
			// The completion says nothing of placement; a READ behind the
			// WRITE returns only after it (RC ordering).
			if err := d.PostSend(rdmaWR(50, rdma.OpRDMARead, sge(fence, 0, 1), tgt, 0)); err != nil {
				t.Fatalf("fence READ: %v", err)
			}
			want(t, e.pollN(d, 1)[0], 50, rdma.OpRDMARead, rdma.StatusSuccess)
		}
		o := int(tc.off)
		for _, s := range tc.sges {
			o += copy(expect[o:], s.Bytes())
		}
		if !bytes.Equal(tgt.Bytes(), expect) {
			t.Fatalf("write %d (%d bytes at offset %d): target memory differs", i, o-int(tc.off), tc.off)
		}
	}
	// Read back ranges, scattering into several sinks.
	fill(tgt.Bytes(), 9) // the acceptor's own update, visible to later READs
	sink1, sink2 := e.reg(rdev, size, lw, 3), e.reg(rdev, 4096, lw, 4)
	reads := []struct {
		off  uint64
		sges []rdma.SGE
	}{
		{0, sge(sink1, 0, size)},
		{size - 1, sge(sink2, 4095, 1)},
		{777, []rdma.SGE{{MR: sink2, Offset: 1, Length: 100}, {MR: sink1, Offset: 9, Length: 5000}}},
	}
	// A region granting only remote read (no local write) is readable.
	ro := e.reg(tdev, 100, rdma.AccessRemoteRead, 11)
	if err := d.PostSend(rdmaWR(99, rdma.OpRDMARead, sge(sink2, 0, 100), ro, 0)); err != nil {
		t.Fatalf("read of a remote-read-only region: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 99, rdma.OpRDMARead, rdma.StatusSuccess)
	if !bytes.Equal(sink2.Bytes()[:100], ro.Bytes()) {
		t.Fatal("read of a remote-read-only region: data differs")
	}
	for i, tc := range reads {
		if err := d.PostSend(rdmaWR(uint64(100+i), rdma.OpRDMARead, tc.sges, tgt, tc.off)); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		c := e.pollN(d, 1)[0]
		want(t, c, uint64(100+i), rdma.OpRDMARead, rdma.StatusSuccess)
		o := int(tc.off)
		for _, s := range tc.sges {
			if !bytes.Equal(s.Bytes(), tgt.Bytes()[o:o+s.Length]) {
				t.Fatalf("read %d: sink differs from the target's bytes at offset %d", i, o)
			}
			o += s.Length
		}
		if c.ByteLen != o-int(tc.off) {
			t.Errorf("read %d: ByteLen %d, want %d", i, c.ByteLen, o-int(tc.off))
		}
	}
}

func testWriteSendOrdering(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	const size = 64 << 10
	tgt := e.reg(e.a, size, all, 0)
	rb := e.reg(e.a, 8, lw, 0)
	src := e.reg(e.b, size, 0, 0)
	note := e.reg(e.b, 8, 0, 0)
	for i := range 50 {
		fill(src.Bytes(), 100+i)
		if err := a.PostRecv(recv(uint64(i), rb, 0, 8)); err != nil {
			t.Fatal(err)
		}
		w := rdmaWR(0, rdma.OpRDMAWrite, sge(src, 0, size), tgt, 0)
		w.Signaled = false
		if err := d.PostSend(w, send(uint64(i), note, 0, 8)); err != nil {
			t.Fatal(err)
		}
		want(t, e.pollN(a, 1)[0], uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if !bytes.Equal(tgt.Bytes(), pattern(size, 100+i)) {
			t.Fatalf("round %d: SEND arrived before the preceding RDMA WRITE's data", i)
		}
		want(t, e.pollN(d, 1)[0], uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
}

func testZeroLength(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	tgt := e.reg(e.a, 16, all, 0)
	wrs := []rdma.SendWR{
		{ID: 1, Op: rdma.OpRDMAWrite, Signaled: true},                                                       // STag 0, TO 0, as ib_srpt sends
		{ID: 2, Op: rdma.OpRDMARead, Signaled: true},                                                        // no SGE
		{ID: 3, Op: rdma.OpRDMAWrite, Signaled: true, Remote: rdma.RemoteAddr{Addr: 1 << 60, RKey: 0x5eed}}, // bogus key
		{ID: 4, Op: rdma.OpRDMARead, Signaled: true, Local: sge(e.reg(e.b, 4, lw, 0), 2, 0),
			Remote: rdma.RemoteAddr{Addr: tgt.Addr() + 1000, RKey: tgt.RKey()}}, // empty SGE, out of bounds
	}
	if err := d.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for i, c := range e.pollN(d, len(wrs)) {
		want(t, c, wrs[i].ID, wrs[i].Op, rdma.StatusSuccess)
		if c.ByteLen != 0 {
			t.Errorf("zero-length %v: ByteLen %d", c.Op, c.ByteLen)
		}
	}
	pingPong(e, d, a) // still up
}
