package rdmatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// SEND and receive: polling, sizes, gather, ordering, solicited and
// unsignaled sends, both directions.

func testPollContext(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if n, err := a.Poll(ctx, make([]rdma.Completion, 4)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll on an idle connection = %d, %v; want 0, context.DeadlineExceeded", n, err)
	}
	if e.ctx.Err() != nil {
		t.Fatal("Poll ignored its context")
	}
	pingPong(e, d, a) // the connection survives an abandoned Poll
}

// pingPong checks that d and a can exchange a SEND each way.
func pingPong(e *env, d, a rdma.Conn) {
	e.t.Helper()
	for i, pair := range [][2]rdma.Conn{{d, a}, {a, d}} {
		s, r := pair[0], pair[1]
		sdev, rdev := e.b, e.a
		if i == 1 {
			sdev, rdev = e.a, e.b
		}
		rb := e.reg(rdev, 64, lw, 0)
		sb := e.reg(sdev, 64, 0, 10+i)
		if err := r.PostRecv(recv(100, rb, 0, 64)); err != nil {
			e.t.Fatalf("PostRecv: %v", err)
		}
		if err := s.PostSend(send(200, sb, 0, 64)); err != nil {
			e.t.Fatalf("PostSend: %v", err)
		}
		want(e.t, e.pollN(s, 1)[0], 200, rdma.OpSend, rdma.StatusSuccess)
		c := e.pollN(r, 1)[0]
		want(e.t, c, 100, rdma.OpRecv, rdma.StatusSuccess)
		if c.ByteLen != 64 || !bytes.Equal(rb.Bytes(), sb.Bytes()) {
			e.t.Fatalf("ping-pong data: %d bytes %x, want %x", c.ByteLen, rb.Bytes(), sb.Bytes())
		}
	}
}

// ---- SEND / RECV ----

func testSendRecvSizes(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	sizes := []int{0, 1, 7, 64, 4096, 65536, 1 << 20}
	var rbufs, sbufs []rdma.MemoryRegion
	for i, n := range sizes {
		rb := e.reg(e.a, n+13, lw, 0) // room to spare, at an offset
		rbufs = append(rbufs, rb)
		if err := a.PostRecv(recv(uint64(1000+i), rb, 5, n+8)); err != nil {
			t.Fatalf("PostRecv %d: %v", i, err)
		}
		sbufs = append(sbufs, e.reg(e.b, n+3, 0, 20+i))
	}
	for i, n := range sizes {
		if err := d.PostSend(send(uint64(i), sbufs[i], 3, n)); err != nil {
			t.Fatalf("PostSend %d bytes: %v", n, err)
		}
	}
	for i, c := range e.pollN(d, len(sizes)) {
		want(t, c, uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
	for i, c := range e.pollN(a, len(sizes)) {
		want(t, c, uint64(1000+i), rdma.OpRecv, rdma.StatusSuccess)
		n := sizes[i]
		if c.ByteLen != n {
			t.Errorf("recv %d: ByteLen %d, want %d", i, c.ByteLen, n)
		}
		got := rbufs[i].Bytes()
		if !bytes.Equal(got[5:5+n], sbufs[i].Bytes()[3:3+n]) {
			t.Errorf("recv %d: %d bytes differ from those sent", i, n)
		}
		if !bytes.Equal(got[:5], pattern(n+13, 0)[:5]) || !bytes.Equal(got[5+n:], pattern(n+13, 0)[5+n:]) {
			t.Errorf("recv %d: bytes outside the received range changed", i)
		}
	}
}

func testSendGather(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{MaxSGE: 3}, rdma.QPConfig{})
	m1, m2 := e.reg(e.b, 100, 0, 1), e.reg(e.b, 300, lw, 2)
	rb := e.reg(e.a, 512, lw, 0)
	if err := a.PostRecv(recv(9, rb, 0, 512)); err != nil {
		t.Fatal(err)
	}
	wr := rdma.SendWR{ID: 1, Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{
		{MR: m1, Offset: 10, Length: 50}, {MR: m2, Offset: 0, Length: 0}, {MR: m2, Offset: 200, Length: 100}}}
	if err := d.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(d, 1)[0], 1, rdma.OpSend, rdma.StatusSuccess)
	c := e.pollN(a, 1)[0]
	want(t, c, 9, rdma.OpRecv, rdma.StatusSuccess)
	exp := append(append([]byte{}, m1.Bytes()[10:60]...), m2.Bytes()[200:300]...)
	if c.ByteLen != 150 || !bytes.Equal(rb.Bytes()[:150], exp) {
		t.Fatalf("gathered SEND: ByteLen %d, data %x, want 150 bytes %x", c.ByteLen, rb.Bytes()[:c.ByteLen], exp)
	}
}

func testSendFIFO(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const n = 100
	d, a := e.connect(rdma.QPConfig{SendDepth: n}, rdma.QPConfig{RecvDepth: n})
	rb := e.reg(e.a, 8*n, lw, 0)
	for i := range n {
		if err := a.PostRecv(recv(uint64(i), rb, 8*i, 8)); err != nil {
			t.Fatal(err)
		}
	}
	sb := e.reg(e.b, 8*n, 0, 0)
	for i := range n {
		binary.BigEndian.PutUint64(sb.Bytes()[8*i:], uint64(i)*3+1)
	}
	for i := range n {
		wr := send(uint64(i), sb, 8*i, 8)
		wr.Signaled = i%10 == 9
		if err := d.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range e.pollN(d, n/10) {
		want(t, c, uint64(10*i+9), rdma.OpSend, rdma.StatusSuccess)
	}
	for i, c := range e.pollN(a, n) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if got := binary.BigEndian.Uint64(rb.Bytes()[8*i:]); got != uint64(i)*3+1 || c.ByteLen != 8 {
			t.Fatalf("receive %d holds message %d (ByteLen %d): SENDs consumed receives out of order", i, (got-1)/3, c.ByteLen)
		}
	}
}

func testSolicited(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 16, lw, 0)
	sb := e.reg(e.b, 16, 0, 1)
	for i := range 3 {
		if err := a.PostRecv(recv(uint64(i), rb, 0, 16)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sol := range []bool{false, true, false} {
		wr := send(uint64(i), sb, 0, 4)
		wr.Solicited = sol
		if err := d.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	e.pollN(d, 3)
	for i, c := range e.pollN(a, 3) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
		if c.Solicited != (i == 1) {
			t.Errorf("receive %d: Solicited %v, want %v", i, c.Solicited, i == 1)
		}
	}
}

func testUnsignaled(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	rb := e.reg(e.a, 16, lw, 0)
	sb := e.reg(e.b, 16, 0, 1)
	tgt := e.reg(e.a, 16, all, 2)
	for i := range 2 {
		if err := a.PostRecv(recv(uint64(i), rb, 8*i, 8)); err != nil {
			t.Fatal(err)
		}
	}
	s0 := send(10, sb, 0, 8)
	s0.Signaled = false
	w := rdmaWR(11, rdma.OpRDMAWrite, sge(sb, 0, 8), tgt, 0)
	w.Signaled = false
	if err := d.PostSend(s0, w, send(12, sb, 8, 8)); err != nil {
		t.Fatal(err)
	}
	// The first completion on the dialer must be the signaled SEND's.
	want(t, e.pollN(d, 1)[0], 12, rdma.OpSend, rdma.StatusSuccess)
	for i, c := range e.pollN(a, 2) {
		want(t, c, uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	if !bytes.Equal(rb.Bytes(), sb.Bytes()) || !bytes.Equal(tgt.Bytes()[:8], sb.Bytes()[:8]) {
		t.Fatal("data of unsignaled work requests not delivered")
	}
}

func testBidirectional(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	for range 3 {
		pingPong(e, d, a)
	}
}
