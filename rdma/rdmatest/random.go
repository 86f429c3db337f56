package rdmatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// testRandomOps drives both ends of a connection with random, valid work
// (receives, SENDs, RDMA WRITEs and READs, some unsignaled, and polls) and
// checks it against a model:
//   - PostSend and PostRecv return rdma.ErrQueueFull exactly when the
//     modelled held slots reach SendDepth, RecvDepth or ORD;
//   - completions of each queue come in posting order, only for signaled or
//     failed requests, all successful;
//   - receives carry the peer's SENDs in order;
//   - every RDMA READ returns what the model's region held when the READ was
//     posted (the effect of all WRITEs posted before it, RC ordering) or a
//     later state of it: a WRITE posted after a READ may be placed before the
//     READ's data is fetched (RFC 5040 §5.5; IB needs the fence flag to
//     prevent it, and the contract has none);
//   - after Close, the receives never matched by a SEND are flushed.
//
// A SEND is only posted when the peer has a receive for it (no RNR).
func testRandomOps(t *testing.T, f Factory) {
	for seed := range uint64(4) {
		e := newEnv(t, f)
		randomOps(t, e, seed, 300)
	}
}

const (
	rndSlot  = 16 // bytes per message, WRITE and READ
	rndSlots = 64 // buffer slots per region (more than any queue depth)
	rndDepth = 8
	rndORD   = 4
	rndTgt   = 16 * rndSlot // bytes of each side's RDMA target at the peer
)

// readWant is what a READ may return: any value of target slot slot from
// hist[slot][from] on.
type readWant struct {
	slot, from int
}

type rndSide struct {
	name         string
	c            rdma.Conn
	sbuf         rdma.MemoryRegion          // SEND and WRITE sources, READ sinks; slot = send ID % rndSlots
	rbuf         rdma.MemoryRegion          // receive buffers; slot = receive ID % rndSlots
	tgt          rdma.MemoryRegion          // this side's RDMA target, on the peer's device
	model        []byte                     // tgt as this side's WRITEs have left it
	hist         [rndTgt / rndSlot][][]byte // each target slot's successive values
	nextSend     uint64
	released     uint64 // send IDs below this have released their slots
	lastSend     int64  // last send completion ID, -1 before
	signaled     map[uint64]bool
	ops          map[uint64]rdma.Opcode
	readWant     map[uint64]readWant
	reads        []uint64 // READs holding an ORD credit
	sends        []uint64 // SEND IDs in posting order
	nextRecv     uint64
	recvs        []uint64 // posted receives not yet completed
	recvHeld     int
	recvsUnmatch int // posted receives no SEND of the peer has been aimed at
	okRecvs      int
}

func randomOps(t *testing.T, e *env, seed uint64, n int) {
	cfg := rdma.QPConfig{SendDepth: rndDepth, RecvDepth: rndDepth, ORD: rndORD, IRD: rndORD}
	d, a := e.connect(cfg, cfg)
	for _, c := range []rdma.Conn{d, a} {
		if cp := c.Caps(); cp.SendDepth != rndDepth || cp.RecvDepth != rndDepth || cp.ORD != rndORD {
			t.Skipf("provider rounds the queue sizes (%+v); the model needs them exact", cp)
		}
	}
	sides := [2]*rndSide{{name: "dialer", c: d}, {name: "acceptor", c: a}}
	devs := [2]rdma.Device{e.b, e.a}
	for i, s := range sides {
		s.sbuf = e.reg(devs[i], rndSlots*rndSlot, lw, 0)
		s.rbuf = e.reg(devs[i], rndSlots*rndSlot, lw, 0)
		s.tgt = e.reg(devs[1-i], rndTgt, all, 50+i)
		s.model = pattern(rndTgt, 50+i)
		s.signaled = map[uint64]bool{}
		s.ops = map[uint64]rdma.Opcode{}
		s.readWant = map[uint64]readWant{}
		for k := range s.hist {
			s.hist[k] = [][]byte{bytes.Clone(s.model[k*rndSlot : (k+1)*rndSlot])}
		}
		s.lastSend = -1
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	canceled, cancel := context.WithCancel(e.ctx)
	cancel()
	for range n {
		i := int(r.UintN(2))
		s, peer := sides[i], sides[1-i]
		switch k := r.UintN(10); {
		case k < 2:
			s.postRecv(t)
		case k < 4:
			if peer.recvsUnmatch > 0 {
				s.postSend(t, peer, rdma.OpSend, r)
			}
		case k < 6:
			s.postSend(t, peer, rdma.OpRDMAWrite, r)
		case k < 7:
			s.postSend(t, peer, rdma.OpRDMARead, r)
		default:
			s.poll(t, canceled, peer)
		}
	}
	// Collect everything still due: signaled sends, and receives the peer
	// aimed a SEND at.
	for i, s := range sides {
		peer := sides[1-i]
		for s.pendingSignaled() || s.okRecvs < len(peer.sends) {
			s.poll(t, e.ctx, peer)
		}
	}
	// A final READ of each whole target must match the model.
	for i, s := range sides {
		sink := e.reg(devs[i], rndTgt, lw, 0)
		if err := s.c.PostSend(rdmaWR(1<<40, rdma.OpRDMARead, sge(sink, 0, rndTgt), s.tgt, 0)); err != nil {
			t.Fatalf("seed %d: %s final READ: %v", seed, s.name, err)
		}
		want(t, e.pollN(s.c, 1)[0], 1<<40, rdma.OpRDMARead, rdma.StatusSuccess)
		if !bytes.Equal(sink.Bytes(), s.model) || !bytes.Equal(s.tgt.Bytes(), s.model) {
			t.Fatalf("seed %d: %s's target region differs from the effect of its WRITEs", seed, s.name)
		}
	}
	d.Close()
	for i, s := range sides {
		left := append([]uint64(nil), s.recvs...)
		var got []uint64
		for _, c := range e.drain(s.c) {
			if c.Op != rdma.OpRecv || c.Status != rdma.StatusFlushed {
				t.Fatalf("seed %d: %s: completion %+v after close, want only flushed receives", seed, s.name, c)
			}
			got = append(got, c.ID)
		}
		if len(got) != len(left) || (len(got) > 0 && !equalIDs(got, left)) {
			t.Fatalf("seed %d: side %d flushed receives %v, want %v", seed, i, got, left)
		}
	}
}

func equalIDs(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *rndSide) pendingSignaled() bool {
	for id := s.released; id < s.nextSend; id++ {
		if s.signaled[id] {
			return true
		}
	}
	return false
}

func (s *rndSide) postRecv(t *testing.T) {
	t.Helper()
	id := s.nextRecv
	err := s.c.PostRecv(recv(id, s.rbuf, int(id%rndSlots)*rndSlot, rndSlot))
	if s.recvHeld >= rndDepth {
		if !errors.Is(err, rdma.ErrQueueFull) {
			t.Fatalf("%s: PostRecv with %d receives held of RecvDepth %d: %v, want rdma.ErrQueueFull", s.name, s.recvHeld, rndDepth, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: PostRecv with %d of %d held: %v", s.name, s.recvHeld, rndDepth, err)
	}
	s.nextRecv++
	s.recvHeld++
	s.recvsUnmatch++
	s.recvs = append(s.recvs, id)
}

func (s *rndSide) postSend(t *testing.T, peer *rndSide, op rdma.Opcode, r *rand.Rand) {
	t.Helper()
	id := s.nextSend
	slot := s.sbuf.Bytes()[int(id%rndSlots)*rndSlot:][:rndSlot]
	off := uint64(r.UintN(rndTgt/rndSlot)) * rndSlot
	signaled := op == rdma.OpRDMARead || r.UintN(2) == 0
	// The last free slot always gets a signaled request: slots held only by
	// unsignaled requests are never released (as on verbs), and the queue
	// would stay full for the rest of the run.
	if int(s.nextSend-s.released) == rndDepth-1 {
		signaled = true
	}
	wr := rdma.SendWR{ID: id, Op: op, Signaled: signaled,
		Local: sge(s.sbuf, int(id%rndSlots)*rndSlot, rndSlot)}
	if op != rdma.OpSend {
		wr.Remote = rdma.RemoteAddr{Addr: s.tgt.Addr() + off, RKey: s.tgt.RKey()}
	}
	held := int(s.nextSend - s.released)
	full := held >= rndDepth || (op == rdma.OpRDMARead && len(s.reads) >= rndORD)
	// Fill the source only when the slot is free (its last user released).
	if !full {
		switch op {
		case rdma.OpSend:
			binary.BigEndian.PutUint64(slot, id)
			binary.BigEndian.PutUint64(slot[8:], ^id)
		case rdma.OpRDMAWrite:
			for j := range slot {
				slot[j] = byte(r.UintN(256))
			}
		}
	}
	err := s.c.PostSend(wr)
	if full {
		if !errors.Is(err, rdma.ErrQueueFull) {
			t.Fatalf("%s: %v with %d sends held (%d READs) of SendDepth %d, ORD %d: %v, want rdma.ErrQueueFull",
				s.name, op, held, len(s.reads), rndDepth, rndORD, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v with %d of %d slots held: %v", s.name, op, held, rndDepth, err)
	}
	s.nextSend++
	s.signaled[id] = wr.Signaled
	s.ops[id] = op
	switch op {
	case rdma.OpSend:
		s.sends = append(s.sends, id)
		peer.recvsUnmatch--
	case rdma.OpRDMAWrite:
		copy(s.model[off:], slot)
		k := off / rndSlot
		s.hist[k] = append(s.hist[k], append([]byte(nil), slot...))
	case rdma.OpRDMARead:
		s.reads = append(s.reads, id)
		k := int(off / rndSlot)
		s.readWant[id] = readWant{slot: k, from: len(s.hist[k]) - 1}
	}
}

// poll takes what completions are ready (ctx ended) or at least one.
func (s *rndSide) poll(t *testing.T, ctx context.Context, peer *rndSide) {
	t.Helper()
	var out [4]rdma.Completion
	n, err := s.c.Poll(ctx, out[:])
	if err != nil && ctx.Err() == nil {
		t.Fatalf("%s: Poll: %v", s.name, err)
	}
	for _, c := range out[:n] {
		if c.Status != rdma.StatusSuccess {
			t.Fatalf("%s: completion %+v on a healthy connection", s.name, c)
		}
		if c.Op == rdma.OpRecv {
			if len(s.recvs) == 0 || c.ID != s.recvs[0] {
				t.Fatalf("%s: receive completion %d, want the oldest posted receive of %v", s.name, c.ID, s.recvs)
			}
			s.recvs = s.recvs[1:]
			s.recvHeld--
			b := s.rbuf.Bytes()[int(c.ID%rndSlots)*rndSlot:]
			got := binary.BigEndian.Uint64(b)
			if s.okRecvs >= len(peer.sends) || got != peer.sends[s.okRecvs] || binary.BigEndian.Uint64(b[8:]) != ^got || c.ByteLen != rndSlot {
				t.Fatalf("%s: receive %d holds SEND %d (%d bytes), want SEND %v",
					s.name, c.ID, got, c.ByteLen, peer.sends[min(s.okRecvs, len(peer.sends)-1)])
			}
			s.okRecvs++
			continue
		}
		if int64(c.ID) <= s.lastSend || c.ID >= s.nextSend || c.Op != s.ops[c.ID] || !s.signaled[c.ID] {
			t.Fatalf("%s: send completion {ID %d, %v} after ID %d (posted up to %d): out of order, unknown or unsignaled",
				s.name, c.ID, c.Op, s.lastSend, s.nextSend)
		}
		if c.Op == rdma.OpRDMARead {
			sink := s.sbuf.Bytes()[int(c.ID%rndSlots)*rndSlot:][:rndSlot]
			w := s.readWant[c.ID]
			ok := false
			for _, v := range s.hist[w.slot][w.from:] {
				ok = ok || bytes.Equal(sink, v)
			}
			if c.ByteLen != rndSlot || !ok {
				t.Fatalf("%s: READ %d returned %x (%d bytes), want %x or a later value: it missed a WRITE posted before it",
					s.name, c.ID, sink, c.ByteLen, s.hist[w.slot][w.from])
			}
			delete(s.readWant, c.ID)
		}
		s.lastSend = int64(c.ID)
		s.released = c.ID + 1
		for len(s.reads) > 0 && s.reads[0] <= c.ID {
			s.reads = s.reads[1:]
		}
	}
}
