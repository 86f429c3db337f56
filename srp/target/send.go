package target

import (
	"errors"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

// Send contexts reserved for target-initiated IUs, after the RQSize
// response contexts.
const (
	sendCredReq = iota // SRP_CRED_REQ
	sendLogout         // SRP_T_LOGOUT, or the login response/reject of an IU-form login
	nReserved
)

// Work request ID spaces: receive WR IDs are the receive slot; send queue
// WR IDs carry wrSendBit, the index of the signaled work request's record
// in channel.wrRing (bits 32..62) and a sequence number (bits 0..31).
const wrSendBit = 1 << 63

// sendBatch is a group of send-queue work requests posted together; the last
// one is signaled and completes the batch.
type sendBatch struct {
	wrs  []rdma.SendWR
	rec  wrRec
	cost int
}

// fifo is a first-in first-out queue that reuses its storage.
type fifo[T any] struct {
	buf  []T
	head int
}

func (q *fifo[T]) len() int { return len(q.buf) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		// Slide the live entries down before growing.
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, v)
}

// front returns the oldest entry; the queue must not be empty.
func (q *fifo[T]) front() *T { return &q.buf[q.head] }

func (q *fifo[T]) pop() {
	var zero T
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}

// unpop puts v back at the front.
func (q *fifo[T]) unpop(v T) {
	if q.head > 0 {
		q.head--
		q.buf[q.head] = v
		return
	}
	var zero T
	q.buf = append(q.buf, zero)
	copy(q.buf[1:], q.buf)
	q.buf[0] = v
}

// reset empties the queue.
func (q *fifo[T]) reset() {
	clear(q.buf)
	q.buf, q.head = q.buf[:0], 0
}

type wrKind uint8

const (
	wrRead wrKind = iota + 1
	wrRsp
	wrTMFRsp
	wrCredReq
	wrLogout
	wrWrites // a chunk of RDMA WRITEs ahead of an SRP_RSP
)

type wrRec struct {
	id   uint64 // the work request ID; 0 for a free ring entry
	gen  uint32 // cmd.gen when posted (RDMA READs)
	kind wrKind
	cost int // send queue slots freed by the completion
	cmd  *command
	tmf  *tmfOp
	send int // send context to free (-1 none)
}

func (c *channel) sendSlot(i int) []byte {
	off := i * c.cfg.MaxRspSize
	return c.sendMR.Bytes()[off : off+c.cfg.MaxRspSize : off+c.cfg.MaxRspSize]
}

// sendTLogout queues SRP_T_LOGOUT on the reserved send context; the channel
// closes when it completes (or the logout timer fires).
func (c *channel) sendTLogout(reason srp.TLogoutReason) {
	b := c.sendSlot(c.cfg.RQSize + sendLogout)
	iu, _ := (&srp.TLogout{SolNot: solBit(c.loginFlags&srp.LoginLOSOLNT != 0), Reason: reason}).AppendTo(b[:0])
	c.queueSend(c.cfg.RQSize+sendLogout, len(iu), c.loginFlags&srp.LoginLOSOLNT != 0, wrRec{kind: wrLogout, send: -1}, c.ctxWRs(c.cfg.RQSize+sendLogout))
}

func solBit(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (c *channel) onCompletion(wc *rdma.Completion) {
	if wc.ID&wrSendBit == 0 {
		c.onRecv(wc)
		return
	}
	idx := int(wc.ID&^wrSendBit) >> 32
	var e *wrRec
	if idx < len(c.wrRing) && c.wrRing[idx].id == wc.ID && wc.ID != wrSendBit {
		e = &c.wrRing[idx]
	}
	if e == nil {
		if wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed {
			c.stats.errors.Add(1)
			c.log.Warn("work request failed", "op", wc.Op, "status", wc.Status, "err", wc.Err)
			c.closeNow("work request failed")
		} else if wc.ID != wrSendBit {
			c.log.Warn("completion for unknown work request", "id", wc.ID, "op", wc.Op)
		}
		return
	}
	rec := *e
	*e = wrRec{}
	c.wrFree = append(c.wrFree, int32(idx))
	c.sqAvail += rec.cost
	if rec.kind == wrRead {
		c.ordAvail++
	}
	if wc.Status != rdma.StatusSuccess {
		if wc.Status != rdma.StatusFlushed {
			c.stats.errors.Add(1)
			c.log.Warn("work request failed", "op", wc.Op, "status", wc.Status, "err", wc.Err)
		}
		c.closeNow("work request failed")
	}
	ok := wc.Status == rdma.StatusSuccess
	switch rec.kind {
	case wrRead:
		if rec.cmd.gen == rec.gen {
			c.onReadDone(rec.cmd, ok)
		}
	case wrRsp:
		c.freeCommand(rec.cmd)
	case wrTMFRsp:
		c.freeTMF(rec.tmf)
	case wrCredReq:
		c.credReqOut = ok && c.credReqOut
		if !ok {
			c.credReqOut = false
		}
	case wrLogout:
		if c.pendClose {
			c.transition(evLogoutSent)
		}
	case wrWrites:
	}
}

// freeSendCtx returns a response send context to the free list (the
// caller replays parked IUs with runWait).
func (c *channel) freeSendCtx(i int) {
	if i >= 0 && i < c.cfg.RQSize {
		c.freeSend = append(c.freeSend, i)
		c.nCmds--
	}
}

// maybeCredReq sends SRP_CRED_REQ when credit has accumulated and no
// request is outstanding whose response could carry it (T10 SRP r16a §6.10).
func (c *channel) maybeCredReq() {
	if c.state != stateLive || c.credReqOut || c.cred.owed == 0 || c.nCmds > 0 || c.wait.len() > 0 {
		return
	}
	c.credReqOut = true
	c.credTag++
	delta := c.cred.credReq()
	b := c.sendSlot(c.cfg.RQSize + sendCredReq)
	sol := c.loginFlags&srp.LoginCRSOLNT != 0
	iu, _ := (&srp.CredReq{SolNot: solBit(sol), ReqLimDelta: uint32(delta), Tag: c.credTag}).AppendTo(b[:0])
	i := c.cfg.RQSize + sendCredReq
	c.queueSend(i, len(iu), sol, wrRec{kind: wrCredReq, send: -1}, c.ctxWRs(i))
}

// ctxWRs is the empty work request list of send context i, with room for
// its SEND.
func (c *channel) ctxWRs(i int) []rdma.SendWR { return c.ctxWR[i : i : i+1] }

// queueSend queues a SEND of n bytes of send context i after the RDMA
// WRITEs in wrs (unsignaled, so RC ordering places the data before the
// response), and pumps the send queue. The SEND is appended to wrs, whose
// storage stays the caller's until the batch completes.
func (c *channel) queueSend(i, n int, solicited bool, rec wrRec, wrs []rdma.SendWR) {
	c.ctxSGE[i] = rdma.SGE{MR: c.sendMR, Offset: i * c.cfg.MaxRspSize, Length: n}
	send := rdma.SendWR{
		Op:        rdma.OpSend,
		Local:     c.ctxSGE[i : i+1 : i+1],
		Signaled:  true,
		Solicited: solicited,
	}
	// Long write lists go in chunks whose last write is signaled, so that
	// no batch needs more than half the send queue.
	chunk := c.sqDepth() / 2
	if chunk < 1 {
		chunk = 1
	}
	writes := wrs
	for len(writes) >= chunk {
		w := writes[:chunk:chunk]
		writes = writes[chunk:]
		w[len(w)-1].Signaled = true
		c.sendQ.push(sendBatch{wrs: w, rec: wrRec{kind: wrWrites, cost: len(w), send: -1}, cost: len(w)})
	}
	all := append(writes, send)
	rec.cost = len(all)
	c.sendQ.push(sendBatch{wrs: all, rec: rec, cost: len(all)})
	c.pump()
}

func (c *channel) sqDepth() int {
	d := c.conn.Caps().SendDepth
	if d <= 0 {
		d = c.cfg.SQSize
	}
	return d
}

// pump posts queued RDMA READs (bounded by the send queue and ORD) and
// send batches (bounded by the send queue), in order.
func (c *channel) pump() {
	if c.state >= stateDraining || c.state == stateDisconnecting && !c.pendClose {
		return
	}
	for c.readQ.len() > 0 && c.sqAvail > 0 && c.ordAvail > 0 && c.state == stateLive {
		r := c.readQ.front()
		if r.cmd.gen != r.gen || r.cmd.readErr {
			c.readQ.pop()
			continue
		}
		id, ok := c.nextID()
		if !ok {
			break
		}
		r.wr.ID = id
		if err := c.post(r.wr); err != nil {
			c.releaseID(id)
			if errors.Is(err, rdma.ErrQueueFull) {
				break
			}
			c.log.Warn("post RDMA READ failed", "err", err)
			c.closeNow("post failed")
			return
		}
		c.wrRing[int(id&^wrSendBit)>>32] = wrRec{id: id, kind: wrRead, cost: 1, cmd: r.cmd, gen: r.gen, send: -1}
		c.readQ.pop()
		c.sqAvail--
		c.ordAvail--
	}
	for c.sendQ.len() > 0 && c.sqAvail >= c.sendQ.front().cost {
		b := c.sendQ.front()
		id, ok := c.nextID()
		if !ok {
			break
		}
		for i := range b.wrs {
			b.wrs[i].ID = wrSendBit // unsignaled: only an error or a flush completes it
		}
		b.wrs[len(b.wrs)-1].ID = id
		if err := c.post(b.wrs...); err != nil {
			c.releaseID(id)
			if errors.Is(err, rdma.ErrQueueFull) {
				break
			}
			c.log.Warn("post send failed", "err", err)
			c.closeNow("post failed")
			return
		}
		rec := b.rec
		rec.id = id
		c.wrRing[int(id&^wrSendBit)>>32] = rec
		c.sqAvail -= b.cost
		c.sendQ.pop() // b is gone from here on
	}
}

// post posts send queue work: held until the loop rings the doorbell when
// the provider batches (rdma.Doorbeller).
func (c *channel) post(wrs ...rdma.SendWR) error {
	if c.bell == nil {
		return c.conn.PostSend(wrs...)
	}
	if err := c.bell.PostSendDeferred(wrs...); err != nil {
		return err
	}
	c.rang = true
	return nil
}

// doorbell transmits the work posted since the last one: once per turn of
// the loop, so the responses of a batch of completions go out together.
func (c *channel) doorbell() {
	if c.rang {
		c.rang = false
		c.stats.doorbells.Add(1)
		c.bell.Doorbell()
	}
}

// nextID takes a free record of c.wrRing for the next signaled work
// request and returns its ID; the caller stores the record there once the
// post succeeded, and gives the index back with releaseID if it failed.
// Every signaled work request holds a send queue slot, so with the ring
// sized to the send queue a record is always free; false (post later)
// only guards that invariant.
func (c *channel) nextID() (uint64, bool) {
	n := len(c.wrFree)
	if n == 0 {
		return 0, false
	}
	idx := c.wrFree[n-1]
	c.wrFree = c.wrFree[:n-1]
	c.nextWR++
	if c.nextWR&0xFFFFFFFF == 0 {
		c.nextWR++ // sequence 0 with record 0 would be the bare wrSendBit
	}
	return wrSendBit | uint64(idx)<<32 | c.nextWR&0xFFFFFFFF, true
}

// releaseID gives back the record of an ID whose post failed.
func (c *channel) releaseID(id uint64) {
	c.wrFree = append(c.wrFree, int32(id&^wrSendBit>>32))
}
