package rdmatest

import (
	"errors"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Queue limits: full send and receive queues, ORD, invalid work requests.

func testSendQueueFull(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{SendDepth: 8}, rdma.QPConfig{})
	depth := d.Caps().SendDepth
	if depth > maxQueueTest {
		t.Skipf("SendDepth %d too large to fill", depth)
	}
	tgt := e.reg(e.a, 64, all, 0)
	src := e.reg(e.b, 64, 0, 1)
	for i := range depth {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); err != nil {
			t.Fatalf("post %d of SendDepth %d: %v", i, depth, err)
		}
	}
	if err := d.PostSend(rdmaWR(999, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("post beyond SendDepth %d with no completion polled: %v, want rdma.ErrQueueFull", depth, err)
	}
	for i, c := range e.pollN(d, depth) {
		want(t, c, uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
	}
	if err := d.PostSend(rdmaWR(1000, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 8)); err != nil {
		t.Fatalf("post after polling: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 1000, rdma.OpRDMAWrite, rdma.StatusSuccess)
	pingPong(e, d, a)
}

func testSendQueueFullBatch(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, _ := e.connect(rdma.QPConfig{SendDepth: 4}, rdma.QPConfig{})
	depth := d.Caps().SendDepth
	if depth > maxQueueTest {
		t.Skipf("SendDepth %d too large to fill", depth)
	}
	tgt := e.reg(e.a, 64, all, 0)
	src := e.reg(e.b, 64, 0, 1)
	wrs := make([]rdma.SendWR, depth+2)
	for i := range wrs {
		wrs[i] = rdmaWR(uint64(i), rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 0)
	}
	if err := d.PostSend(wrs...); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("posting %d work requests at once into SendDepth %d: %v, want rdma.ErrQueueFull", len(wrs), depth, err)
	}
	for i, c := range e.pollN(d, depth) {
		want(t, c, uint64(i), rdma.OpRDMAWrite, rdma.StatusSuccess)
	}
	if err := d.PostSend(rdmaWR(500, rdma.OpRDMAWrite, sge(src, 0, 8), tgt, 0)); err != nil {
		t.Fatal(err)
	}
	// Exactly SendDepth of the batch were posted: the next completion is 500's.
	want(t, e.pollN(d, 1)[0], 500, rdma.OpRDMAWrite, rdma.StatusSuccess)
}

func testRecvQueueFull(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{RecvDepth: 8})
	depth := a.Caps().RecvDepth
	if depth > maxQueueTest {
		t.Skipf("RecvDepth %d too large to fill", depth)
	}
	rb := e.reg(e.a, 16, lw, 0)
	for i := range depth {
		if err := a.PostRecv(recv(uint64(i), rb, 0, 16)); err != nil {
			t.Fatalf("post %d of RecvDepth %d: %v", i, depth, err)
		}
	}
	if err := a.PostRecv(recv(999, rb, 0, 16)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("post beyond RecvDepth %d: %v, want rdma.ErrQueueFull", depth, err)
	}
	sb := e.reg(e.b, 16, 0, 0)
	if err := d.PostSend(send(1, sb, 0, 16)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pollN(a, 1)[0], 0, rdma.OpRecv, rdma.StatusSuccess)
	if err := a.PostRecv(recv(1000, rb, 0, 16)); err != nil {
		t.Fatalf("post after a receive completed and was polled: %v", err)
	}
}

func testORD(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, _ := e.connect(rdma.QPConfig{ORD: 2, SendDepth: 16}, rdma.QPConfig{IRD: 4})
	ord := d.Caps().ORD
	if ord < 1 || ord > 2 {
		t.Fatalf("ORD %d, want 1..2 as requested", ord)
	}
	tgt := e.reg(e.a, 64, all, 0)
	sink := e.reg(e.b, 64, lw, 0)
	for i := range ord {
		if err := d.PostSend(rdmaWR(uint64(i), rdma.OpRDMARead, sge(sink, 8*i, 8), tgt, 0)); err != nil {
			t.Fatalf("READ %d of ORD %d: %v", i, ord, err)
		}
	}
	if err := d.PostSend(rdmaWR(99, rdma.OpRDMARead, sge(sink, 0, 8), tgt, 0)); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("READ beyond ORD %d: %v, want rdma.ErrQueueFull", ord, err)
	}
	// Other work is not limited by ORD.
	if err := d.PostSend(rdmaWR(100, rdma.OpRDMAWrite, sge(sink, 0, 8), tgt, 0)); err != nil {
		t.Fatalf("WRITE with ORD READs outstanding: %v", err)
	}
	cs := e.pollN(d, ord+1)
	for i := range ord {
		want(t, cs[i], uint64(i), rdma.OpRDMARead, rdma.StatusSuccess)
	}
	want(t, cs[ord], 100, rdma.OpRDMAWrite, rdma.StatusSuccess)
	if err := d.PostSend(rdmaWR(101, rdma.OpRDMARead, sge(sink, 0, 8), tgt, 0)); err != nil {
		t.Fatalf("READ after polling: %v", err)
	}
	want(t, e.pollN(d, 1)[0], 101, rdma.OpRDMARead, rdma.StatusSuccess)
}

func testInvalidWR(t *testing.T, f Factory) {
	e := newEnv(t, f)
	d, a := e.connect(rdma.QPConfig{MaxSGE: 2}, rdma.QPConfig{})
	maxSGE := d.Caps().MaxSGE
	m := e.reg(e.b, 64, lw, 0)
	ro := e.reg(e.b, 64, 0, 0)
	tgt := e.reg(e.a, 64, all, 0)
	many := make([]rdma.SGE, maxSGE+1)
	for i := range many {
		many[i] = rdma.SGE{MR: m, Offset: i % 64, Length: 0}
	}
	cases := []struct {
		name string
		wr   rdma.SendWR
	}{
		{"opcode 0", rdma.SendWR{ID: 1, Signaled: true}},
		{"opcode RECV", rdma.SendWR{ID: 1, Op: rdma.OpRecv, Signaled: true}},
		{"SGE past its region", send(1, m, 60, 5)},
		{"SGE negative offset", send(1, m, -1, 2)},
		{"too many SGEs", rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: many, Signaled: true}},
		{"READ into a region without local write", rdmaWR(1, rdma.OpRDMARead, sge(ro, 0, 8), tgt, 0)},
		{"SGE without region", rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: []rdma.SGE{{Length: 1}}, Signaled: true}},
	}
	if maxSGE > maxQueueTest {
		cases = cases[:4]
	}
	for _, tc := range cases {
		if err := d.PostSend(tc.wr); !errors.Is(err, rdma.ErrInvalidWR) {
			t.Errorf("PostSend %s: %v, want rdma.ErrInvalidWR", tc.name, err)
		}
	}
	if err := d.PostRecv(recv(1, ro, 0, 8)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostRecv into a region without local write: %v, want rdma.ErrInvalidWR", err)
	}
	if err := d.PostRecv(recv(1, m, 32, 33)); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("PostRecv past the region: %v, want rdma.ErrInvalidWR", err)
	}
	pingPong(e, d, a) // nothing was posted, the connection is fine
}
