//go:build verbs && cgo

package verbs

// #include "verbs.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gosrp/gosrp/rdma"
)

const recvBit = uint64(1) << 63

// conn is one RC QP on an rdma_cm_id with its own CQ and completion channel.
type conn struct {
	d    *Device
	id   *C.struct_rdma_cm_id
	qp   *C.struct_ibv_qp
	cq   *C.struct_ibv_cq
	cch  *C.struct_ibv_comp_channel
	cchF *os.File
	// armed is set once ibv_req_notify_cq armed the CQ, cleared when the
	// completion goroutine takes the event it raised. Guarded by mu.
	armed C.int
	// notify is Notify's channel (one token); hook is the CQHook.
	notify  chan struct{}
	hook    atomic.Pointer[func()]
	polling atomic.Bool // a Poll waits on notify
	caps    rdma.Caps
	local   net.Addr
	peer    net.Addr
	srq     *srq // where its receives come from, or nil

	cmEvents chan cmEvent

	mu           sync.Mutex
	sendSeq      uint64 // next send sequence number
	sendDone     uint64 // every send sequence below this has completed
	sendIDs      []uint64
	sendOps      []rdma.Opcode
	reads        int // RDMA READs posted and not yet completed (against ORD)
	recvSeq      uint64
	recvDone     uint64
	recvIDs      []uint64
	closing      bool
	disconnected bool // rdma_disconnect called
	destroyed    bool
	err          error
	done         chan struct{}
	doneOnce     sync.Once
	wcs          [64]C.gs_wc
	sges         []C.struct_ibv_sge
	wrs          []C.gs_wr
	// Work posted deferred (rdma.Doorbeller), in posting order, until the
	// doorbell: as passed to ibv_post_send, and the caller's IDs and
	// opcodes; its sequence numbers follow sendSeq.
	pwrs  []C.gs_wr
	psges []C.struct_ibv_sge
	pIDs  []uint64
	pOps  []rdma.Opcode
}

func (d *Device) newConn(id *C.struct_rdma_cm_id, cfg rdma.QPConfig) (*conn, error) {
	send := pick(cfg.SendDepth, 256, d.lim.maxQPWR)
	recv := pick(cfg.RecvDepth, 256, d.lim.maxQPWR)
	sge := pick(cfg.MaxSGE, 16, d.lim.maxSGE)
	c := &conn{d: d, id: id, cmEvents: make(chan cmEvent, 8), done: make(chan struct{}), notify: make(chan struct{}, 1)}
	var csrq *C.struct_ibv_srq
	if cfg.SRQ != nil {
		s, ok := cfg.SRQ.(*srq)
		if !ok || s == nil || s.d != d {
			return nil, fmt.Errorf("verbs: QPConfig.SRQ is not a shared receive queue of %s", d.info.Name)
		}
		if !s.attach(c) {
			return nil, fmt.Errorf("verbs: shared receive queue: %w", rdma.ErrClosed)
		}
		// The CQ takes this QP's receive completions too: at most the
		// SRQ's depth are outstanding.
		c.srq, csrq, recv = s, s.s, s.depth
	}
	undo := func() {
		if c.srq != nil {
			c.srq.detach(c)
		}
	}
	if c.cch = C.ibv_create_comp_channel(d.ctx); c.cch == nil {
		undo()
		return nil, errors.New("verbs: ibv_create_comp_channel failed")
	}
	if c.cq = C.ibv_create_cq(d.ctx, C.int(send+recv), nil, c.cch, 0); c.cq == nil {
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, fmt.Errorf("verbs: ibv_create_cq of %d entries failed", send+recv)
	}
	var osend, orecv, osge, oinl C.int
	if rc := C.gs_create_qp(id, d.pd, c.cq, csrq, C.int(send), C.int(recv), C.int(sge), &osend, &orecv, &osge, &oinl); rc != 0 {
		C.ibv_destroy_cq(c.cq)
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, fmt.Errorf("verbs: rdma_create_qp (send %d, recv %d, sge %d, SRQ %v): %w", send, recv, sge, c.srq != nil, syscall.Errno(rc))
	}
	c.qp = C.gs_id_qp(id)
	c.caps = rdma.Caps{SendDepth: send, RecvDepth: recv, MaxSGE: int(osge), MaxInline: int(oinl)}
	c.sendIDs = make([]uint64, send)
	c.sendOps = make([]rdma.Opcode, send)
	if c.srq == nil {
		c.recvIDs = make([]uint64, recv)
	}
	var err error
	if c.cchF, err = pollFile(C.gs_comp_fd(c.cch), "ibv_comp_channel"); err != nil {
		C.rdma_destroy_qp(id)
		C.ibv_destroy_cq(c.cq)
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, err
	}
	if !c.d.cfg.BusyPoll {
		C.gs_req_notify(c.cq)
		c.armed = 1
	}
	d.mu.Lock()
	d.conns[c] = struct{}{}
	d.mu.Unlock()
	d.setHandler(id, c.event)
	go c.waitCQ()
	return c, nil
}

func (c *conn) event(e cmEvent) {
	switch e.typ {
	case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL, C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
		c.fail(fmt.Errorf("verbs: %s", cmEventName(e.typ)))
	}
	select {
	case c.cmEvents <- e:
	default:
	}
}

func (c *conn) waitEstablished(ctx context.Context) ([]byte, error) {
	for {
		select {
		case e := <-c.cmEvents:
			switch e.typ {
			case C.RDMA_CM_EVENT_ESTABLISHED:
				c.local = sockAddr(C.rdma_get_local_addr(c.id))
				c.peer = sockAddr(C.rdma_get_peer_addr(c.id))
				// RDMA/CM programmed the QP with the negotiated depths.
				var ord, ird C.int
				if C.gs_query_rd(c.qp, &ord, &ird) == 0 {
					if ord > 0 {
						c.caps.ORD = int(ord)
					}
					if ird > 0 {
						c.caps.IRD = int(ird)
					}
				}
				return e.pd, nil
			case C.RDMA_CM_EVENT_REJECTED:
				return nil, &rdma.RejectError{PrivateData: e.pd, Reason: fmt.Sprintf("RDMA/CM reject status %d", e.status)}
			default:
				return nil, fmt.Errorf("verbs: connection not established: %s (status %d)", cmEventName(e.typ), e.status)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fail moves the connection down: the QP goes to the error state so that
// outstanding work flushes, Done closes and Poll is woken.
func (c *conn) fail(err error) {
	c.mu.Lock()
	c.closing = true
	if c.err == nil {
		c.err = err
	}
	// Under c.mu, so that destroy cannot free the cm_id in between (the
	// RDMA/CM event loop calls fail for DISCONNECTED while Poll may be
	// destroying the drained connection).
	if !c.disconnected && !c.destroyed {
		c.disconnected = true
		C.rdma_disconnect(c.id)
	}
	c.mu.Unlock()
	c.doneOnce.Do(func() { close(c.done) })
	c.signal()
}

func (c *conn) Close() error {
	c.fail(rdma.ErrClosed)
	return nil
}

// destroy frees the QP, CQ, channel and cm_id. Called once drained (from
// TryPoll or Poll) or at Device.Close. The completion goroutine ends: it
// checks destroyed under mu before each call on the channel, and closing
// cchF wakes it.
func (c *conn) destroy() {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return
	}
	c.destroyed = true
	c.closing = true
	c.mu.Unlock()
	c.doneOnce.Do(func() { close(c.done) })
	c.d.setHandler(c.id, nil)
	c.signal()
	c.cchF.Close()
	C.rdma_destroy_qp(c.id)
	if c.srq != nil {
		c.srq.detach(c)
	}
	C.ibv_destroy_cq(c.cq)
	C.ibv_destroy_comp_channel(c.cch)
	C.rdma_destroy_id(c.id)
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
}

func (c *conn) Caps() rdma.Caps       { return c.caps }
func (c *conn) LocalAddr() net.Addr   { return c.local }
func (c *conn) RemoteAddr() net.Addr  { return c.peer }
func (c *conn) Done() <-chan struct{} { return c.done }
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// maxChunk is how many work requests one call into C posts: the size of the
// ibv_*_wr arrays gs_post_send and gs_post_recv build on their stack.
const maxChunk = 64

// inChunks hands wrs to post in order, maxChunk at a time, and stops at the
// first error (the chunks before it stay posted, as does whatever post
// posted of the failing chunk).
func inChunks[T any](wrs []T, post func([]T) error) error {
	for len(wrs) > 0 {
		n := min(len(wrs), maxChunk)
		if err := post(wrs[:n]); err != nil {
			return err
		}
		wrs = wrs[n:]
	}
	return nil
}

func (c *conn) PostSend(wrs ...rdma.SendWR) error {
	c.mu.Lock()
	err := c.ringLocked()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return inChunks(wrs, c.postSend)
}

// PostSendDeferred implements rdma.Doorbeller: the work requests are
// checked and converted now, and handed to ibv_post_send (one system call
// on providers whose doorbell is one, such as rxe) by Doorbell, 64 at a
// time.
func (c *conn) PostSendDeferred(wrs ...rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return rdma.ErrClosed
	}
	room := len(c.sendIDs) - int(c.sendSeq-c.sendDone) - len(c.pIDs)
	reads := c.reads
	for _, w := range c.pOps {
		if w == rdma.OpRDMARead {
			reads++
		}
	}
	for i, w := range wrs {
		if i >= room {
			return rdma.ErrQueueFull
		}
		if w.Op == rdma.OpRDMARead {
			if reads >= c.caps.ORD {
				return rdma.ErrQueueFull
			}
			reads++
		}
	}
	for _, w := range wrs {
		g, err := c.convert(w, c.sendSeq+uint64(len(c.pIDs)), &c.psges)
		if err != nil {
			return err
		}
		c.pwrs = append(c.pwrs, g)
		c.pIDs = append(c.pIDs, w.ID)
		c.pOps = append(c.pOps, w.Op)
		if len(c.pwrs) == maxChunk {
			if err := c.ringLocked(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Doorbell implements rdma.Doorbeller. A failing ibv_post_send takes the
// connection down: the work it did not post never completes, and the
// consumer sees the connection go.
func (c *conn) Doorbell() {
	c.mu.Lock()
	err := c.ringLocked()
	c.mu.Unlock()
	if err != nil {
		c.fail(err)
	}
}

// ringLocked posts the deferred work requests. c.mu is held.
func (c *conn) ringLocked() error {
	if len(c.pwrs) == 0 {
		return nil
	}
	if c.closing || c.destroyed {
		// The queue pair is going: what was never posted never completes.
		c.pwrs, c.psges, c.pIDs, c.pOps = c.pwrs[:0], c.psges[:0], c.pIDs[:0], c.pOps[:0]
		return rdma.ErrClosed
	}
	var sgp *C.struct_ibv_sge
	if len(c.psges) > 0 {
		sgp = &c.psges[0]
	}
	var posted C.int
	rc := C.gs_post_send(c.qp, &c.pwrs[0], C.int(len(c.pwrs)), sgp, &posted)
	for i := 0; i < int(posted); i++ {
		slot := (c.sendSeq + uint64(i)) % uint64(len(c.sendIDs))
		c.sendIDs[slot], c.sendOps[slot] = c.pIDs[i], c.pOps[i]
		if c.pOps[i] == rdma.OpRDMARead {
			c.reads++
		}
	}
	c.sendSeq += uint64(posted)
	c.pwrs, c.psges, c.pIDs, c.pOps = c.pwrs[:0], c.psges[:0], c.pIDs[:0], c.pOps[:0]
	return postErr(rc, "ibv_post_send")
}

// convert checks w and converts it for gs_post_send with sequence number
// seq, appending its SGEs to *sges.
func (c *conn) convert(w rdma.SendWR, seq uint64, sges *[]C.struct_ibv_sge) (C.gs_wr, error) {
	var g C.gs_wr
	if len(w.Local) > c.caps.MaxSGE {
		return g, fmt.Errorf("%w: %d SGEs, QP allows %d", rdma.ErrInvalidWR, len(w.Local), c.caps.MaxSGE)
	}
	g = C.gs_wr{id: C.uint64_t(seq), nsge: C.uint32_t(len(w.Local)), sge_off: C.uint32_t(len(*sges))}
	switch w.Op {
	case rdma.OpSend:
		g.op = 0
	case rdma.OpSendInvalidate:
		g.op, g.inv = 1, C.uint32_t(w.InvalidateRKey)
	case rdma.OpRDMAWrite:
		g.op = 2
	case rdma.OpRDMARead:
		g.op = 3
	default:
		return g, fmt.Errorf("%w: opcode %v", rdma.ErrInvalidWR, w.Op)
	}
	if g.op >= 2 {
		g.raddr, g.rkey = C.uint64_t(w.Remote.Addr), C.uint32_t(w.Remote.RKey)
	}
	if w.Signaled {
		g.flags |= C.IBV_SEND_SIGNALED
	}
	if w.Solicited {
		g.flags |= C.IBV_SEND_SOLICITED
	}
	total := 0
	for _, s := range w.Local {
		if m, ok := s.MR.(*mr); ok && w.Op == rdma.OpRDMARead && m.access&(rdma.AccessLocalWrite|rdma.AccessRemoteWrite) == 0 {
			return g, fmt.Errorf("%w: RDMA READ into a region without local write access", rdma.ErrInvalidWR)
		}
		cs, err := c.sge(s)
		if err != nil {
			return g, err
		}
		*sges = append(*sges, cs)
		total += s.Length
	}
	if g.op <= 1 && total > 0 && total <= c.caps.MaxInline {
		// A small SEND (an SRP_RSP, a login IU) is copied into the work
		// queue entry at post time: the adapter reads no registered
		// memory for it.
		g.flags |= C.IBV_SEND_INLINE
	}
	return g, nil
}

func (c *conn) postSend(wrs []rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return rdma.ErrClosed
	}
	// Post what fits; the rest fails with ErrQueueFull.
	room := len(c.sendIDs) - int(c.sendSeq-c.sendDone)
	reads := c.reads
	full := false
	for i, w := range wrs {
		if i >= room {
			full = true
		} else if w.Op == rdma.OpRDMARead {
			if reads >= c.caps.ORD {
				full = true
			}
			reads++
		}
		if full {
			wrs = wrs[:i]
			break
		}
	}
	if len(wrs) == 0 {
		return rdma.ErrQueueFull
	}
	c.wrs = c.wrs[:0]
	c.sges = c.sges[:0]
	for i, w := range wrs {
		g, err := c.convert(w, c.sendSeq+uint64(i), &c.sges)
		if err != nil {
			return err
		}
		c.wrs = append(c.wrs, g)
	}
	var sgp *C.struct_ibv_sge
	if len(c.sges) > 0 {
		sgp = &c.sges[0]
	}
	var posted C.int
	rc := C.gs_post_send(c.qp, &c.wrs[0], C.int(len(c.wrs)), sgp, &posted)
	for i := 0; i < int(posted); i++ {
		slot := (c.sendSeq + uint64(i)) % uint64(len(c.sendIDs))
		c.sendIDs[slot], c.sendOps[slot] = wrs[i].ID, wrs[i].Op
		if wrs[i].Op == rdma.OpRDMARead {
			c.reads++
		}
	}
	c.sendSeq += uint64(posted)
	if err := postErr(rc, "ibv_post_send"); err != nil {
		return err
	}
	if full {
		return rdma.ErrQueueFull
	}
	return nil
}

func (c *conn) PostRecv(wrs ...rdma.RecvWR) error {
	if c.srq != nil && len(wrs) > 0 {
		return fmt.Errorf("%w: the queue pair receives through a shared receive queue", rdma.ErrInvalidWR)
	}
	return inChunks(wrs, c.postRecv)
}

func (c *conn) postRecv(wrs []rdma.RecvWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return rdma.ErrClosed
	}
	if int(c.recvSeq-c.recvDone)+len(wrs) > len(c.recvIDs) {
		return rdma.ErrQueueFull
	}
	var ids [maxChunk]C.uint64_t
	var sges [maxChunk]C.struct_ibv_sge
	for i, w := range wrs {
		s, err := c.d.recvSGE(w)
		if err != nil {
			return err
		}
		ids[i], sges[i] = C.uint64_t((c.recvSeq+uint64(i))|recvBit), s
	}
	var posted C.int
	rc := C.gs_post_recv(c.qp, nil, &ids[0], &sges[0], C.int(len(wrs)), &posted)
	for i := 0; i < int(posted); i++ {
		c.recvIDs[(c.recvSeq+uint64(i))%uint64(len(c.recvIDs))] = wrs[i].ID
	}
	c.recvSeq += uint64(posted)
	return postErr(rc, "ibv_post_recv")
}

// postErr is the error of a post call that returned rc: rdma.ErrQueueFull
// for ENOMEM (the queue is full), the errno otherwise.
func postErr(rc C.int, call string) error {
	switch rc {
	case 0:
		return nil
	case C.ENOMEM:
		return rdma.ErrQueueFull
	}
	return fmt.Errorf("verbs: %s: %w", call, syscall.Errno(rc))
}

var wcStatus = map[C.uint32_t]rdma.Status{
	C.IBV_WC_SUCCESS:            rdma.StatusSuccess,
	C.IBV_WC_LOC_LEN_ERR:        rdma.StatusLocalLength,
	C.IBV_WC_LOC_QP_OP_ERR:      rdma.StatusLocalQPOperation,
	C.IBV_WC_LOC_PROT_ERR:       rdma.StatusLocalProtection,
	C.IBV_WC_WR_FLUSH_ERR:       rdma.StatusFlushed,
	C.IBV_WC_REM_INV_REQ_ERR:    rdma.StatusRemoteInvalidRequest,
	C.IBV_WC_REM_ACCESS_ERR:     rdma.StatusRemoteAccess,
	C.IBV_WC_REM_OP_ERR:         rdma.StatusRemoteOperation,
	C.IBV_WC_RETRY_EXC_ERR:      rdma.StatusRetryExceeded,
	C.IBV_WC_RNR_RETRY_EXC_ERR:  rdma.StatusRNRRetryExceeded,
	C.IBV_WC_FATAL_ERR:          rdma.StatusFatal,
	C.IBV_WC_GENERAL_ERR:        rdma.StatusFatal,
	C.IBV_WC_LOC_ACCESS_ERR:     rdma.StatusLocalProtection,
	C.IBV_WC_BAD_RESP_ERR:       rdma.StatusRemoteOperation,
	C.IBV_WC_REM_ABORT_ERR:      rdma.StatusRemoteOperation,
	C.IBV_WC_RESP_TIMEOUT_ERR:   rdma.StatusRetryExceeded,
	C.IBV_WC_INV_EECN_ERR:       rdma.StatusFatal,
	C.IBV_WC_INV_EEC_STATE_ERR:  rdma.StatusFatal,
	C.IBV_WC_LOC_EEC_OP_ERR:     rdma.StatusFatal,
	C.IBV_WC_LOC_RDD_VIOL_ERR:   rdma.StatusFatal,
	C.IBV_WC_REM_INV_RD_REQ_ERR: rdma.StatusRemoteInvalidRequest,
	C.IBV_WC_MW_BIND_ERR:        rdma.StatusLocalProtection,
}

// TryPoll implements rdma.CQNotifier: it takes the completions on the CQ
// now, up to 64 per call into the library. When it finds fewer than
// len(out), it arms the CQ (ibv_req_notify_cq) unless armed already and
// polls once more, so that a completion arriving after it returned raises
// a completion channel event (arm, then poll again: the sequence
// ibv_get_cq_event(3) gives to lose no completion).
// After the connection went down and every outstanding work request has
// completed, it frees the QP and returns rdma.ErrClosed.
func (c *conn) TryPoll(out []rdma.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	n, drained, err := c.pollOnce(out)
	if drained {
		c.destroy()
		return 0, rdma.ErrClosed
	}
	return n, err
}

// Notify implements rdma.CQNotifier: the channel receives after a
// completion channel event (with a hook set: only once the connection is
// down) and when the connection goes down.
func (c *conn) Notify() <-chan struct{} { return c.notify }

// SetCQHook implements rdma.CQHook: fn runs on the connection's
// completion goroutine each time it takes completion channel events (with
// Config.BusyPoll: in its every turn), with no lock held.
func (c *conn) SetCQHook(fn func()) { c.hook.Store(&fn) }

// signal makes Notify's channel ready.
func (c *conn) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// announce tells the consumer there may be completions: the hook if one is
// set, Notify's channel if not, or if the connection is down, or if a
// Poll is waiting.
func (c *conn) announce() {
	h := c.hook.Load()
	if h != nil {
		(*h)()
	}
	if h == nil || c.polling.Load() || c.isClosing() {
		c.signal()
	}
}

func (c *conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// waitCQ is the connection's completion goroutine: it sleeps on the
// completion channel's descriptor in Go's poller, takes the pending event
// (there is at most one: the CQ is armed again only after it) and
// announces it. With
// Config.BusyPoll it announces in a loop instead. It ends once the
// connection is destroyed.
func (c *conn) waitCQ() {
	raw, err := c.cchF.SyscallConn()
	if err != nil {
		c.fail(fmt.Errorf("verbs: completion channel: %w", err))
		return
	}
	if c.d.cfg.BusyPoll {
		for !c.isDestroyed() {
			c.announce()
			runtime.Gosched()
		}
		return
	}
	for {
		stop := false
		var cerr error
		err := raw.Read(func(uintptr) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.destroyed {
				stop = true
				return true
			}
			n := C.gs_cq_event(c.cch)
			if n < 0 {
				cerr = syscall.Errno(-n)
				return true
			}
			if n > 0 {
				c.armed = 0 // an event disarms the CQ
			}
			return n > 0
		})
		if stop || err != nil {
			return // the descriptor was closed by destroy
		}
		if cerr != nil {
			c.fail(fmt.Errorf("verbs: ibv_get_cq_event: %w", cerr))
			return
		}
		c.announce()
	}
}

func (c *conn) isDestroyed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.destroyed
}

// Poll returns completions; when there are none it waits for the
// completion goroutine's announcement (or, with Config.BusyPoll, spins).
// After the connection went down and every outstanding work request has
// completed, it frees the QP and returns rdma.ErrClosed.
func (c *conn) Poll(ctx context.Context, out []rdma.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	c.polling.Store(true)
	defer c.polling.Store(false)
	for {
		n, err := c.TryPoll(out)
		if n > 0 || err != nil {
			return n, err
		}
		if c.d.cfg.BusyPoll {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			runtime.Gosched()
			continue
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (c *conn) pollOnce(out []rdma.Completion) (n int, drained bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return 0, false, rdma.ErrClosed
	}
	var got int
	if c.d.cfg.BusyPoll {
		got = int(C.gs_poll(c.cq, &c.wcs[0], C.int(min(len(out), len(c.wcs)))))
	} else {
		got = int(C.gs_poll_arm(c.cq, &c.wcs[0], C.int(min(len(out), len(c.wcs))), &c.armed))
	}
	if got < 0 {
		return 0, false, errors.New("verbs: ibv_poll_cq failed")
	}
	for i := 0; i < got; i++ {
		w := &c.wcs[i]
		st, ok := wcStatus[w.status]
		if !ok {
			st = rdma.StatusFatal
		}
		comp := rdma.Completion{Status: st, ByteLen: int(w.byte_len)}
		id := uint64(w.id)
		if id&recvBit != 0 && id&srqBit != 0 {
			comp.ID, comp.Op = c.srq.complete(id&^(recvBit|srqBit)), rdma.OpRecv
			if w.flags&C.IBV_WC_WITH_INV != 0 {
				comp.Invalidated, comp.InvalidatedRKey = true, uint32(w.inv)
			}
		} else if id&recvBit != 0 {
			seq := id &^ recvBit
			comp.ID = c.recvIDs[seq%uint64(len(c.recvIDs))]
			comp.Op = rdma.OpRecv
			c.recvDone = seq + 1
			if w.flags&C.IBV_WC_WITH_INV != 0 {
				comp.Invalidated, comp.InvalidatedRKey = true, uint32(w.inv)
			}
		} else {
			slot := id % uint64(len(c.sendIDs))
			comp.ID, comp.Op = c.sendIDs[slot], c.sendOps[slot]
			// A completion implies every earlier send WR completed: release
			// their slots and ORD credits.
			for ; c.sendDone <= id; c.sendDone++ {
				if c.sendOps[c.sendDone%uint64(len(c.sendIDs))] == rdma.OpRDMARead {
					c.reads--
				}
			}
		}
		if st != rdma.StatusSuccess {
			comp.Err = fmt.Errorf("verbs: %v (vendor error %#x)", st, uint32(w.vendor_err))
			if !c.closing {
				c.closing = true
				if c.err == nil {
					c.err = comp.Err
				}
				go c.fail(comp.Err)
			}
		}
		out[i] = comp
	}
	empty := c.sendDone == c.sendSeq && c.recvDone == c.recvSeq
	if c.closing && empty && got > 0 {
		// The last completions of a closing connection: the consumer
		// comes back for rdma.ErrClosed.
		c.signal()
	}
	return got, got == 0 && c.closing && empty, nil
}
