package loopback

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// pair is one connection: two Conns sharing one mutex, which guards every
// mutable field of both.
type pair struct {
	mu   sync.Mutex
	ends [2]*Conn
	down bool
	// With asynchronous execution: kick (capacity 1) wakes the worker,
	// stop (closed at shutdown) ends it.
	kick chan struct{}
	stop chan struct{}
}

// run is the worker of a pair with asynchronous execution: it executes both
// send queues whenever kicked, until the connection goes down.
func (p *pair) run() {
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			return
		}
		p.mu.Lock()
		for _, c := range p.ends {
			c.execQueue()
		}
		p.mu.Unlock()
	}
}

// sendEntry is a posted send work request.
type sendEntry struct {
	wr  rdma.SendWR
	seq uint64 // position in the send queue, from 0

	faultChecked bool
	fault        *Fault      // the fault hitting this request, if any
	delayDone    bool        // the fault's delay has passed
	timer        *time.Timer // delay or RNR timer while stalled at the head
}

// cqEntry is a completion waiting for Poll.
type cqEntry struct {
	c    rdma.Completion
	send bool   // a send queue completion: releases slots up to seq
	seq  uint64 // the send entry's seq
}

// Conn is one end of a loopback connection, implementing rdma.Conn. Post*,
// Close, Done, Err and InjectFault may be called from any goroutine; Poll from
// one goroutine at a time.
type Conn struct {
	p      *pair
	side   int
	dev    *Device
	caps   rdma.Caps
	local  Addr
	remote Addr
	notify chan struct{} // capacity 1: the CQ or the connection state changed
	done   chan struct{}
	srq    *srq // the shared receive queue its receives come from, or nil

	// Guarded by p.mu.
	sq         []*sendEntry // posted, not yet executed, in order
	nextSeq    uint64
	released   uint64   // every seq below this has released its slot (as of the last held call)
	reads      []uint64 // seqs of RDMA READs holding an ORD credit, ascending
	rq         []rdma.RecvWR
	recvPosted uint64 // receives ever posted
	err        error
	faults     []*faultState

	// Guarded by cqMu, which is taken after p.mu, never before. Poll takes
	// only cqMu, so with asynchronous execution polling does not order the
	// caller's later buffer accesses before the worker's.
	cqMu       sync.Mutex
	cq         []cqEntry
	polledSeq  uint64 // send seqs below this have been released by Poll
	polledRecv uint64 // receive completions returned by Poll
	cqDown     bool   // the connection is down: every completion is in cq
}

var _ rdma.Conn = (*Conn)(nil)

func newPair(dd, ad *Device, dcfg, acfg rdma.QPConfig, daddr, aaddr Addr) (dialer, acceptor *Conn) {
	p := &pair{}
	if dd.async || ad.async {
		p.kick = make(chan struct{}, 1)
		p.stop = make(chan struct{})
	}
	mk := func(side int, dev *Device, cfg, peer rdma.QPConfig, local, remote Addr) *Conn {
		ord := min(cfg.ORD, peer.IRD)
		c := &Conn{
			p: p, side: side, dev: dev, local: local, remote: remote,
			caps: rdma.Caps{
				SendDepth: cfg.SendDepth, RecvDepth: cfg.RecvDepth, MaxSGE: cfg.MaxSGE,
				ORD: ord,
				IRD: min(peer.ORD, cfg.IRD), // the peer's negotiated ORD
			},
			notify: make(chan struct{}, 1),
			done:   make(chan struct{}),
		}
		if s, ok := cfg.SRQ.(*srq); ok && s != nil {
			c.srq = s
			c.caps.RecvDepth = s.depth
		}
		return c
	}
	dialer = mk(0, dd, dcfg, acfg, daddr, aaddr)
	acceptor = mk(1, ad, acfg, dcfg, aaddr, daddr)
	p.ends = [2]*Conn{dialer, acceptor}
	return dialer, acceptor
}

func (c *Conn) peer() *Conn { return c.p.ends[1-c.side] }

// Caps returns the negotiated limits. MaxInline is 0: every SEND's data is
// read from its SGEs when it executes.
func (c *Conn) Caps() rdma.Caps { return c.caps }

// LocalAddr is the listener's address on the accepting side and a generated
// "device:N" address on the dialling side.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the peer's LocalAddr.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// Done is closed when the connection has gone down.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up, then why it went down (see the
// package documentation).
func (c *Conn) Err() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.err
}

// Close takes the connection down on both sides, flushing all outstanding
// work. Err becomes rdma.ErrClosed here and ErrPeerClosed at the peer. Safe to
// call more than once; always returns nil.
func (c *Conn) Close() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if !c.p.down {
		errs := [2]error{}
		errs[c.side] = rdma.ErrClosed
		errs[1-c.side] = ErrPeerClosed
		c.p.shutdown(errs)
	}
	return nil
}

// Drop takes the connection down on both sides as a lost transport would:
// outstanding work flushes and Err becomes ErrConnectionLost on both sides.
func (c *Conn) Drop() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if !c.p.down {
		c.p.shutdown([2]error{ErrConnectionLost, ErrConnectionLost})
	}
}

// PostSend validates and posts wrs in order, executing each as far as RC
// ordering allows before returning (with WithAsyncExecution, soon after, on
// the connection's goroutine). It stops at the first request that
// cannot be posted, leaving it and the rest unposted, with: rdma.ErrInvalidWR
// (unknown opcode, more SGEs than MaxSGE, an SGE outside its region or of
// another device, an RDMA READ sink without AccessLocalWrite; wrapping
// rdma.ErrDeregistered for a deregistered region), rdma.ErrQueueFull
// (SendDepth slots held, or ORD RDMA READs outstanding), or rdma.ErrClosed.
func (c *Conn) PostSend(wrs ...rdma.SendWR) error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for i := range wrs {
		if c.p.down {
			return rdma.ErrClosed
		}
		wr := wrs[i]
		if err := c.validateSend(&wr); err != nil {
			return fmt.Errorf("loopback: send WR %d (ID %d): %w", i, wr.ID, err)
		}
		if held, _ := c.held(); held >= c.caps.SendDepth {
			return rdma.ErrQueueFull
		}
		isRead := wr.Op == rdma.OpRDMARead
		if isRead && !c.dev.uncheckedORD && len(c.reads) >= c.caps.ORD {
			return rdma.ErrQueueFull
		}
		wr.Local = append([]rdma.SGE(nil), wr.Local...)
		e := &sendEntry{wr: wr, seq: c.nextSeq}
		c.nextSeq++
		if isRead {
			c.reads = append(c.reads, e.seq)
		}
		c.sq = append(c.sq, e)
		c.pump()
	}
	return nil
}

func (c *Conn) validateSend(wr *rdma.SendWR) error {
	switch wr.Op {
	case rdma.OpSend, rdma.OpSendInvalidate, rdma.OpRDMAWrite, rdma.OpRDMARead:
	default:
		return fmt.Errorf("opcode %v: %w", wr.Op, rdma.ErrInvalidWR)
	}
	if len(wr.Local) > c.caps.MaxSGE {
		return fmt.Errorf("%d SGEs, MaxSGE %d: %w", len(wr.Local), c.caps.MaxSGE, rdma.ErrInvalidWR)
	}
	need := rdma.Access(0)
	if wr.Op == rdma.OpRDMARead {
		need = rdma.AccessLocalWrite
	}
	for j, s := range wr.Local {
		if err := c.validateSGE(s, need); err != nil {
			return fmt.Errorf("SGE %d: %w", j, err)
		}
	}
	return nil
}

func (c *Conn) validateSGE(s rdma.SGE, need rdma.Access) error {
	return c.dev.validateSGE(s, need)
}

// validateSGE checks that s lies in a usable region of d granting need.
func (d *Device) validateSGE(s rdma.SGE, need rdma.Access) error {
	m, ok := s.MR.(*memoryRegion)
	if !ok || m == nil || m.dev != d {
		return fmt.Errorf("region not registered on this device: %w", rdma.ErrInvalidWR)
	}
	if !m.usable() {
		return fmt.Errorf("%w: %w", rdma.ErrInvalidWR, rdma.ErrDeregistered)
	}
	if s.Offset < 0 || s.Length < 0 || s.Offset > len(m.buf) || s.Length > len(m.buf)-s.Offset {
		return fmt.Errorf("[%d, +%d) outside the %d-byte region: %w", s.Offset, s.Length, len(m.buf), rdma.ErrInvalidWR)
	}
	if m.access&need != need {
		return fmt.Errorf("region lacks %v: %w", need, rdma.ErrInvalidWR)
	}
	return nil
}

// PostRecv posts receive buffers in order. Errors as PostSend: rdma.ErrInvalidWR
// (bad SGE, region without AccessLocalWrite, or a connection whose receives
// come from a shared receive queue), rdma.ErrQueueFull (RecvDepth slots
// held), rdma.ErrClosed. A SEND of the peer waiting for a receive executes
// before PostRecv returns (unless WithAsyncExecution).
func (c *Conn) PostRecv(wrs ...rdma.RecvWR) error {
	if c.srq != nil && len(wrs) > 0 {
		return fmt.Errorf("loopback: the connection receives through a shared receive queue: %w", rdma.ErrInvalidWR)
	}
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for i, wr := range wrs {
		if c.p.down {
			return rdma.ErrClosed
		}
		if err := c.validateSGE(wr.Local, rdma.AccessLocalWrite); err != nil {
			return fmt.Errorf("loopback: recv WR %d (ID %d): %w", i, wr.ID, err)
		}
		if _, held := c.held(); held >= c.caps.RecvDepth {
			return rdma.ErrQueueFull
		}
		c.recvPosted++
		c.rq = append(c.rq, wr)
		c.peer().pump()
	}
	return nil
}

// Poll returns completions in the order they were generated (so in order per
// queue), waiting for at least one. Returning a completion releases its queue
// slot (and, for a send completion, the slots of the unsignaled requests
// before it). After the connection has gone down and every completion has
// been returned, Poll returns rdma.ErrClosed. With an empty out it returns
// (0, nil) at once. It returns ctx.Err() if ctx ends first.
func (c *Conn) Poll(ctx context.Context, out []rdma.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	for {
		if n, err := c.TryPoll(out); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// TryPoll implements rdma.CQNotifier.
func (c *Conn) TryPoll(out []rdma.Completion) (int, error) {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	if len(c.cq) == 0 {
		if c.cqDown {
			return 0, rdma.ErrClosed
		}
		return 0, nil
	}
	n := min(len(out), len(c.cq))
	for i, e := range c.cq[:n] {
		out[i] = e.c
		switch {
		case !e.send:
			c.polledRecv++
		case e.seq >= c.polledSeq:
			c.polledSeq = e.seq + 1
		}
	}
	// Shift the rest down so the backing array is reused.
	rest := copy(c.cq, c.cq[n:])
	clear(c.cq[rest:])
	c.cq = c.cq[:rest]
	return n, nil
}

// Notify implements rdma.CQNotifier.
func (c *Conn) Notify() <-chan struct{} { return c.notify }

// held returns the send and receive slots held, after taking in what Poll
// has released (which also returns the ORD credits of released READs).
// Called with p.mu held.
func (c *Conn) held() (send, recv int) {
	c.cqMu.Lock()
	ps, pr := c.polledSeq, c.polledRecv
	c.cqMu.Unlock()
	if ps > c.released {
		c.released = ps
		i := 0
		for i < len(c.reads) && c.reads[i] < ps {
			i++
		}
		c.reads = c.reads[i:]
	}
	return int(c.nextSeq - c.released), int(c.recvPosted - pr)
}

// push queues a completion for Poll. Called with p.mu held.
func (c *Conn) push(e cqEntry) {
	c.cqMu.Lock()
	c.cq = append(c.cq, e)
	c.cqMu.Unlock()
	c.wake()
}

func (c *Conn) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *Conn) completeSend(e *sendEntry, st rdma.Status, byteLen int, err error) {
	if st == rdma.StatusSuccess && !e.wr.Signaled {
		return
	}
	c.push(cqEntry{
		c:    rdma.Completion{ID: e.wr.ID, Op: e.wr.Op, Status: st, ByteLen: byteLen, Err: err},
		send: true,
		seq:  e.seq,
	})
}

// failure describes how a work request broke the connection.
type failure struct {
	status     rdma.Status // the failing send work request's status
	recv       *rdma.RecvWR
	recvStatus rdma.Status // status of recv, a peer receive the failing SEND consumed
	// Who detected it: the requester (local) or the responder (peer). The
	// detecting side's Err is a local TerminateError, the other's a remote one.
	byPeer           bool
	layer, typ, code uint8
	detail           string
	dropped          bool // transport lost rather than terminated
}

// pump executes the send queue from its head until it is empty, stalls or
// the connection goes down. Called with p.mu held.
//
// With asynchronous execution it only wakes the pair's worker.
func (c *Conn) pump() {
	if c.p.kick != nil {
		select {
		case c.p.kick <- struct{}{}:
		default:
		}
		return
	}
	c.execQueue()
}

// execQueue is pump's synchronous body. Called with p.mu held.
func (c *Conn) execQueue() {
	for len(c.sq) > 0 && !c.p.down {
		e := c.sq[0]
		stalled, f := c.execute(e)
		if stalled {
			return
		}
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		c.sq[0] = nil
		c.sq = c.sq[1:]
		if f != nil {
			c.fail(e, f)
			return
		}
	}
}

// execute runs e, the head of the send queue. It reports stalled when e must
// wait (RNR, injected delay); otherwise e is finished, successfully or with
// the failure f.
func (c *Conn) execute(e *sendEntry) (stalled bool, f *failure) {
	peer := c.peer()
	if !e.faultChecked {
		e.faultChecked = true
		e.fault = c.matchFault(e.wr.Op)
	}
	if ft := e.fault; ft != nil {
		if ft.Drop {
			return false, &failure{status: rdma.StatusRetryExceeded, dropped: true}
		}
		if ft.Delay > 0 && !e.delayDone {
			if e.timer == nil {
				e.timer = time.AfterFunc(ft.Delay, func() { c.delayExpired(e) })
			}
			return true, nil
		}
		if ft.Status != rdma.StatusSuccess {
			return false, &failure{status: ft.Status, layer: 0, typ: 0, code: 0xff,
				detail: "injected fault: " + ft.Status.String()}
		}
	}
	for _, s := range e.wr.Local {
		if !s.MR.(*memoryRegion).usable() {
			return false, &failure{status: rdma.StatusLocalProtection, layer: 0, typ: 0, code: 0xff,
				detail: "local region deregistered before the work request executed"}
		}
	}
	total := 0
	for _, s := range e.wr.Local {
		total += s.Length
	}
	switch e.wr.Op {
	case rdma.OpSend, rdma.OpSendInvalidate:
		var r rdma.RecvWR
		ok := len(peer.rq) > 0
		if peer.srq != nil {
			if r, ok = peer.srq.take(c); ok {
				peer.recvPosted++ // the consumed buffer holds a slot of peer's CQ until polled
			}
		} else if ok {
			r = peer.rq[0]
			peer.rq = peer.rq[1:]
		}
		if !ok {
			if e.timer == nil && c.dev.rnrTimeout > 0 {
				e.timer = time.AfterFunc(c.dev.rnrTimeout, func() { c.rnrExpired(e) })
			}
			return true, nil
		}
		f := &failure{recv: &r, byPeer: true}
		if ft := peer.matchFault(rdma.OpRecv); ft != nil {
			if ft.Drop {
				f.status, f.recvStatus, f.dropped = rdma.StatusRetryExceeded, rdma.StatusFlushed, true
			} else {
				f.status, f.recvStatus = rdma.StatusRemoteOperation, ft.Status
				f.layer, f.typ, f.code = 0, 0, 0xff
				f.detail = "injected receive fault: " + ft.Status.String()
			}
			return false, f
		}
		switch {
		case !r.Local.MR.(*memoryRegion).usable():
			f.status, f.recvStatus = rdma.StatusRemoteOperation, rdma.StatusLocalProtection
			f.layer, f.typ, f.code = 1, 2, 0x02 // DDP untagged buffer error: no buffer
			f.detail = "receive buffer region deregistered"
			return false, f
		case total > r.Local.Length:
			f.status, f.recvStatus = rdma.StatusRemoteInvalidRequest, rdma.StatusLocalLength
			f.layer, f.typ, f.code = 1, 2, 0x05 // DDP untagged: message too long
			f.detail = fmt.Sprintf("%d-byte SEND into a %d-byte receive buffer", total, r.Local.Length)
			return false, f
		}
		rc := rdma.Completion{ID: r.ID, Op: rdma.OpRecv, ByteLen: total, Solicited: e.wr.Solicited}
		if e.wr.Op == rdma.OpSendInvalidate {
			if !peer.dev.invalidate(e.wr.InvalidateRKey) {
				f.status, f.recvStatus = rdma.StatusRemoteOperation, rdma.StatusLocalProtection
				f.layer, f.typ, f.code = 0, 1, 0x09 // RDMAP remote protection: STag cannot be invalidated
				f.detail = fmt.Sprintf("cannot invalidate STag %#x", e.wr.InvalidateRKey)
				return false, f
			}
			rc.Invalidated, rc.InvalidatedRKey = true, e.wr.InvalidateRKey
		}
		gather(r.Local.Bytes(), e.wr.Local)
		peer.push(cqEntry{c: rc})
		c.completeSend(e, rdma.StatusSuccess, 0, nil)
	case rdma.OpRDMAWrite:
		if total > 0 {
			dst, chk := peer.dev.lookupRemote(e.wr.Remote.Addr, e.wr.Remote.RKey, total, rdma.AccessRemoteWrite)
			if chk != remoteOK {
				// Tagged placement checks are DDP's (RFC 5041 §7.2), rights RDMAP's.
				f := &failure{status: rdma.StatusRemoteAccess, byPeer: true, layer: 1, typ: 1,
					code: remoteCheckDetail[chk].code, detail: "RDMA WRITE: " + remoteCheckDetail[chk].detail}
				if chk == remoteRights {
					f.layer, f.typ = 0, 1
				}
				return false, f
			}
			gather(dst, e.wr.Local)
		}
		c.completeSend(e, rdma.StatusSuccess, 0, nil)
	case rdma.OpRDMARead:
		c.held() // drop the READs Poll has released
		inflight := 0
		for _, s := range c.reads {
			if s < e.seq {
				inflight++
			}
		}
		if inflight >= peer.caps.IRD {
			return false, &failure{status: rdma.StatusRemoteInvalidRequest, byPeer: true,
				layer: 1, typ: 2, code: 0x03, // DDP untagged, queue 1: MSN out of range
				detail: fmt.Sprintf("RDMA READ request beyond IRD %d", peer.caps.IRD)}
		}
		if total > 0 {
			src, chk := peer.dev.lookupRemote(e.wr.Remote.Addr, e.wr.Remote.RKey, total, rdma.AccessRemoteRead)
			if chk != remoteOK {
				return false, &failure{status: rdma.StatusRemoteAccess, byPeer: true, layer: 0, typ: 1,
					code: remoteCheckDetail[chk].code, detail: "RDMA READ: " + remoteCheckDetail[chk].detail}
			}
			scatter(e.wr.Local, src)
		}
		c.completeSend(e, rdma.StatusSuccess, total, nil)
	}
	return false, nil
}

// gather copies the SGEs' bytes, in order, to dst (which holds them all).
func gather(dst []byte, sges []rdma.SGE) {
	for _, s := range sges {
		dst = dst[copy(dst, s.Bytes()):]
	}
}

// scatter copies src, in order, into the SGEs (which hold it exactly).
func scatter(sges []rdma.SGE, src []byte) {
	for _, s := range sges {
		src = src[copy(s.Bytes(), src):]
	}
}

func (c *Conn) delayExpired(e *sendEntry) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.down || len(c.sq) == 0 || c.sq[0] != e {
		return
	}
	e.delayDone = true
	e.timer = nil
	c.pump()
}

func (c *Conn) rnrExpired(e *sendEntry) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.down || len(c.sq) == 0 || c.sq[0] != e {
		return
	}
	e.timer = nil
	c.sq[0] = nil
	c.sq = c.sq[1:]
	c.fail(e, &failure{status: rdma.StatusRNRRetryExceeded, byPeer: true,
		layer: 1, typ: 2, code: 0x02, // DDP untagged: no buffer available
		detail: fmt.Sprintf("no receive posted within %v", c.dev.rnrTimeout)})
}

// fail completes e with f's status and takes the connection down. Called
// with p.mu held, e already removed from the send queue.
func (c *Conn) fail(e *sendEntry, f *failure) {
	peer := c.peer()
	var errs [2]error
	if f.dropped {
		errs = [2]error{ErrConnectionLost, ErrConnectionLost}
	} else {
		mine := &rdma.TerminateError{Local: !f.byPeer, Layer: f.layer, Type: f.typ, Code: f.code, Detail: f.detail}
		theirs := *mine
		theirs.Local = f.byPeer
		errs[c.side], errs[peer.side] = mine, &theirs
	}
	if f.byPeer && f.status != rdma.StatusRNRRetryExceeded && c.dev.completeOnTransmit && e.wr.Op != rdma.OpRDMARead {
		c.completeSend(e, rdma.StatusSuccess, 0, nil) // transmitted before the peer refused it
	} else {
		c.completeSend(e, f.status, 0, errs[c.side])
	}
	if f.recv != nil {
		peer.push(cqEntry{c: rdma.Completion{ID: f.recv.ID, Op: rdma.OpRecv, Status: f.recvStatus, Err: errs[peer.side]}})
	}
	c.dev.log.Debug("loopback QP error", "local", string(c.local), "op", e.wr.Op, "status", f.status, "err", errs[c.side])
	c.p.shutdown(errs)
}

// shutdown flushes both ends and marks the connection down. Called with
// p.mu held.
func (p *pair) shutdown(errs [2]error) {
	p.down = true
	if p.stop != nil {
		close(p.stop)
	}
	for i, c := range p.ends {
		for _, e := range c.sq {
			if e.timer != nil {
				e.timer.Stop()
				e.timer = nil
			}
			c.push(cqEntry{
				c:    rdma.Completion{ID: e.wr.ID, Op: e.wr.Op, Status: rdma.StatusFlushed, Err: errs[i]},
				send: true,
				seq:  e.seq,
			})
		}
		c.sq = nil
		for _, r := range c.rq {
			c.push(cqEntry{c: rdma.Completion{ID: r.ID, Op: rdma.OpRecv, Status: rdma.StatusFlushed, Err: errs[i]}})
		}
		c.rq = nil
		if c.srq != nil {
			c.srq.detach(c, c.peer())
		}
		c.err = errs[i]
		c.cqMu.Lock()
		c.cqDown = true
		c.cqMu.Unlock()
		close(c.done)
		c.wake()
		c.dev.removeConn(c)
	}
}
