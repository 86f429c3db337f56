package loopback

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Random operation sequences on one connection, checked against invariants
// the contract states, with queue accounting modelled independently:
//   - PostSend returns ErrQueueFull exactly when the modelled held slots
//     reach SendDepth (or held READs reach ORD); PostRecv likewise;
//   - each queue's completions come in posting order, each at most once;
//     unsignaled requests complete only with an error;
//   - successful receives carry the peer's SENDs in order;
//   - after teardown every receive and signaled send has completed exactly
//     once, and Poll reports rdma.ErrClosed.

const (
	opsSendDepth = 4
	opsRecvDepth = 4
	opsORD       = 2
	opsMsg       = 8 // bytes per SEND: the send ID
)

type opsSide struct {
	c        *Conn
	dev      *Device
	sbuf     rdma.MemoryRegion // SEND sources, READ sinks
	rbuf     rdma.MemoryRegion // receive buffers
	tgt      rdma.MemoryRegion // the peer's RDMA target
	nextSend uint64            // next send ID (= its send queue position)
	released uint64            // send IDs below this have released their slot
	signaled map[uint64]bool
	sendOp   map[uint64]rdma.Opcode
	reads    []uint64 // READ IDs not yet released
	recvs    []uint64 // posted receive IDs, in order
	nextRecv uint64
	recvHeld int
	lastSend int64 // last send completion ID seen, -1 before
	okRecvs  int   // successful receives seen
	sends    []uint64
	sentOK   map[uint64]bool
	done     map[uint64]bool
	closed   bool // Poll reported ErrClosed
}

func runOps(t *testing.T, ops []byte) {
	n := NewNetwork()
	da, db := n.NewDevice("a"), n.NewDevice("b")
	defer da.Close()
	defer db.Close()
	ctx := testCtx(t)
	l, err := da.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rdma.QPConfig{SendDepth: opsSendDepth, RecvDepth: opsRecvDepth, ORD: opsORD, IRD: opsORD}
	acc := make(chan rdma.Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			acc <- nil
			return
		}
		c, _ := r.Accept(ctx, cfg, nil)
		acc <- c
	}()
	dconn, _, err := db.Dial(ctx, l.Addr().String(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	aconn := <-acc
	if aconn == nil {
		t.Fatal("accept failed")
	}
	sides := [2]*opsSide{{c: aconn.(*Conn), dev: da}, {c: dconn.(*Conn), dev: db}}
	for _, s := range sides {
		s.sbuf, _ = s.dev.Register(make([]byte, 64*opsMsg), rdma.AccessLocalWrite)
		s.rbuf, _ = s.dev.Register(make([]byte, 64*opsMsg), rdma.AccessLocalWrite)
		s.signaled = map[uint64]bool{}
		s.sendOp = map[uint64]rdma.Opcode{}
		s.sentOK = map[uint64]bool{}
		s.done = map[uint64]bool{}
		s.lastSend = -1
	}
	for i, s := range sides {
		s.tgt, _ = sides[1-i].dev.Register(make([]byte, 64), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()

	for _, b := range ops {
		side, param := int(b>>3&1), int(b>>4)
		s, peer := sides[side], sides[1-side]
		switch b & 7 {
		case 0: // post a receive (param 15: too small for a SEND)
			size := opsMsg
			if param == 15 {
				size = opsMsg / 2
			}
			id := s.nextRecv
			err := s.c.PostRecv(rdma.RecvWR{ID: id, Local: rdma.SGE{MR: s.rbuf, Offset: int(id%64) * opsMsg, Length: size}})
			s.checkPost(t, "PostRecv", err, s.recvHeld >= opsRecvDepth)
			if err == nil {
				s.nextRecv++
				s.recvHeld++
				s.recvs = append(s.recvs, id)
			}
		case 1, 7: // SEND carrying its ID
			id := s.nextSend
			binary.BigEndian.PutUint64(s.sbuf.Bytes()[int(id%64)*opsMsg:], id)
			wr := rdma.SendWR{ID: id, Op: rdma.OpSend, Signaled: param&1 == 0, Solicited: param&2 != 0,
				Local: []rdma.SGE{{MR: s.sbuf, Offset: int(id%64) * opsMsg, Length: opsMsg}}}
			s.postSend(t, wr)
		case 2, 3: // RDMA WRITE or READ of 8 bytes at param%8
			op := rdma.OpRDMAWrite
			if b&7 == 3 {
				op = rdma.OpRDMARead
			}
			id := s.nextSend
			wr := rdma.SendWR{ID: id, Op: op, Signaled: param&1 == 0,
				Local:  []rdma.SGE{{MR: s.sbuf, Offset: int(id%64) * opsMsg, Length: opsMsg}},
				Remote: rdma.RemoteAddr{Addr: s.tgt.Addr() + uint64(param%8)*8, RKey: s.tgt.RKey()}}
			if param == 15 { // out of bounds
				wr.Remote.Addr += 64
			}
			s.postSend(t, wr)
		case 4, 5: // non-blocking poll
			s.poll(t, canceled, peer, 1+param%4)
		case 6:
			if param == 0 {
				s.c.Close()
			} else {
				s.poll(t, canceled, peer, 1+param%4)
			}
		}
		checkProgress(t, s.c)
		checkProgress(t, peer.c)
	}
	// Tear down and drain both sides.
	sides[0].c.Close()
	for i, s := range sides {
		for !s.closed {
			s.poll(t, ctx, sides[1-i], 4)
		}
		if len(s.recvs) != 0 {
			t.Fatalf("side %d: receives %v never completed", i, s.recvs)
		}
		for id := range s.nextSend {
			if s.signaled[id] && !s.done[id] {
				t.Fatalf("side %d: signaled send %d never completed", i, id)
			}
		}
	}
}

// checkProgress checks that work executes synchronously: a live
// connection's send queue is empty or stalled at a SEND for want of a
// receive at the peer.
func checkProgress(t *testing.T, c *Conn) {
	t.Helper()
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.down || len(c.sq) == 0 {
		return
	}
	if op := c.sq[0].wr.Op; (op != rdma.OpSend && op != rdma.OpSendInvalidate) || len(c.peer().rq) != 0 {
		t.Fatalf("send queue stalled at %v with %d receives posted at the peer", op, len(c.peer().rq))
	}
}

func (s *opsSide) checkPost(t *testing.T, what string, err error, full bool) {
	t.Helper()
	down := s.c.Err() != nil
	switch {
	case down:
		if err != nil && !errors.Is(err, rdma.ErrClosed) && !errors.Is(err, rdma.ErrQueueFull) {
			t.Fatalf("%s on a down connection: %v", what, err)
		}
	case full:
		if !errors.Is(err, rdma.ErrQueueFull) {
			t.Fatalf("%s with the queue full by the model: %v", what, err)
		}
	default:
		if err != nil && !(errors.Is(err, rdma.ErrClosed) && s.c.Err() != nil) {
			t.Fatalf("%s with room by the model: %v", what, err)
		}
	}
}

func (s *opsSide) postSend(t *testing.T, wr rdma.SendWR) {
	t.Helper()
	held := int(s.nextSend - s.released)
	full := held >= opsSendDepth || (wr.Op == rdma.OpRDMARead && len(s.reads) >= opsORD)
	err := s.c.PostSend(wr)
	s.checkPost(t, "PostSend "+wr.Op.String(), err, full)
	if err != nil {
		return
	}
	s.signaled[wr.ID] = wr.Signaled
	s.sendOp[wr.ID] = wr.Op
	if wr.Op == rdma.OpRDMARead {
		s.reads = append(s.reads, wr.ID)
	}
	if wr.Op == rdma.OpSend {
		s.sends = append(s.sends, wr.ID)
	}
	s.nextSend++
}

func (s *opsSide) poll(t *testing.T, ctx context.Context, peer *opsSide, max int) {
	t.Helper()
	out := make([]rdma.Completion, max)
	n, err := s.c.Poll(ctx, out)
	switch {
	case errors.Is(err, rdma.ErrClosed):
		if s.c.Err() == nil {
			t.Fatal("Poll returned ErrClosed on a live connection")
		}
		s.closed = true
	case err != nil && ctx.Err() == nil:
		t.Fatalf("Poll: %v", err)
	}
	for _, c := range out[:n] {
		if c.Status == rdma.StatusFlushed && s.c.Err() == nil {
			t.Fatalf("flush completion %+v on a live connection", c)
		}
		if c.Op == rdma.OpRecv {
			if len(s.recvs) == 0 || c.ID != s.recvs[0] {
				t.Fatalf("receive completion %d, expected the next posted receive of %v", c.ID, s.recvs)
			}
			s.recvs = s.recvs[1:]
			s.recvHeld--
			if c.Status == rdma.StatusSuccess {
				got := binary.BigEndian.Uint64(s.rbuf.Bytes()[int(c.ID%64)*opsMsg:])
				if s.okRecvs >= len(peer.sends) || got != peer.sends[s.okRecvs] || c.ByteLen != opsMsg {
					t.Fatalf("receive %d holds SEND %d (%d bytes); the peer's SENDs in order are %v, this is successful receive #%d",
						c.ID, got, c.ByteLen, peer.sends, s.okRecvs)
				}
				s.okRecvs++
			}
			continue
		}
		if int64(c.ID) <= s.lastSend || c.ID >= s.nextSend {
			t.Fatalf("send completion %d after %d (posted up to %d): out of order or unknown", c.ID, s.lastSend, s.nextSend)
		}
		if c.Op != s.sendOp[c.ID] {
			t.Fatalf("send completion %d has opcode %v, posted %v", c.ID, c.Op, s.sendOp[c.ID])
		}
		if c.Status == rdma.StatusSuccess && !s.signaled[c.ID] {
			t.Fatalf("successful unsignaled send %d completed", c.ID)
		}
		if c.Op == rdma.OpRDMARead && c.Status == rdma.StatusSuccess && c.ByteLen != opsMsg {
			t.Fatalf("READ %d ByteLen %d", c.ID, c.ByteLen)
		}
		s.lastSend = int64(c.ID)
		s.done[c.ID] = true
		s.released = c.ID + 1
		for len(s.reads) > 0 && s.reads[0] <= c.ID {
			s.reads = s.reads[1:]
		}
	}
}

func TestRandomOps(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		ops := make([]byte, 400)
		for i := range ops {
			ops[i] = byte(r.UintN(256))
			// Keep connection-killing operations rare.
			for ops[i]>>4 == 15 && ops[i]&7 != 4 && r.UintN(8) != 0 || ops[i]&7 == 6 && ops[i]>>4 == 0 && r.UintN(8) != 0 {
				ops[i] = byte(r.UintN(256))
			}
		}
		runOps(t, ops)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0x00, 0x08, 0x01, 0x09, 0x04, 0x0c, 0x02, 0x13, 0x04})
	f.Add([]byte{0x01, 0x01, 0x01, 0x01, 0x01, 0x08, 0x08, 0x0c, 0x04, 0x04})
	f.Add([]byte{0x03, 0x03, 0x03, 0x05, 0x03, 0xf2, 0x04})
	f.Add([]byte{0xf8, 0x01, 0x06, 0x04})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 2000 {
			ops = ops[:2000]
		}
		runOps(t, ops)
	})
}
