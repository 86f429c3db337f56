package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// readerBufSize is the receive buffer of a connection, in bytes. Payloads of
// a quarter of it or more are read straight into the target region (see
// rxReader).
const readerBufSize = 32 << 10

// terminateWriteTimeout bounds sending the final Terminate to a peer that
// does not read.
const terminateWriteTimeout = 2 * time.Second

// Send queue entry states.
const (
	sqQueued = iota // waiting for or being transmitted
	sqSent          // RDMA Read Request transmitted, response not complete
	sqDone          // finished (State in status)
)

// sqEntry is one posted send work request.
type sqEntry struct {
	wr     rdma.SendWR // Local is not used: sgl holds a copy
	sgl    []rdma.SGE
	length int // bytes (sum of the SGEs)
	state  uint8
	sent   bool // transmitted by the writer
	status rdma.Status
	err    error
	seq    uint64 // post order, for queue slot accounting
	msn    uint32 // MSN of a Send or Read Request, assigned when taken for transmission
	// RDMA Read: the Data Sink advertised in the request, and the bytes
	// placed so far (reader goroutine only).
	sinkSTag uint32
	sinkTO   uint64
	placed   int
}

// inboundRead is an RDMA Read Request from the peer awaiting its response
// (the IRD queue, answered in order).
type inboundRead struct {
	sinkSTag uint32
	sinkTO   uint64
	data     []byte // the source bytes, checked at request time
	counted  bool   // counts against the IRD (all but the RTR Read)
}

// conn is an established iWARP connection (QP, its CQ and the TCP stream).
type conn struct {
	dev        *Device
	nc         net.Conn
	lone       atomic.Bool // rdma.LoneWaiter (SetLoneWait), read by the reader
	log        *slog.Logger
	caps       rdma.Caps
	crc        bool
	maxPayload int
	// irdLimit is the IRD we advertised: Read Requests beyond it get a
	// Terminate (caps.IRD may be lower, the peer's negotiated ORD).
	irdLimit int

	br *rxReader
	rx rxState // reader goroutine only (after start)
	tx txState // writer goroutine only (after start)

	mu       sync.Mutex
	sq       []sqEntry // ring, SendDepth entries
	sqHead   int
	sqLen    int      // entries posted and not completed
	sqNext   int      // ring index of the next entry to transmit
	sqUntx   int      // entries not yet taken by the writer
	sqSeq    uint64   // sequence number of the next send work request
	sqHeld   int      // send slots held: posted and completion not yet polled
	released uint64   // send work with seq below this has released its slot
	reads    []uint64 // seqs of RDMA Reads holding a slot (ORD accounting)
	rqHeld   int      // receive slots held: posted and completion not yet polled
	// srq, when set, supplies the receive buffers (QPConfig.SRQ); rq is
	// then unused.
	srq *srq
	// orq is the ring of RDMA Read Requests on the wire, in order: user
	// Reads and completion fences; at most caps.ORD.
	orq     []orqEntry
	orqHead int
	orqLen  int
	// rxPlacing: the reader is placing a Read Response into the sink of
	// send queue entry rxPlacingIdx, which a flush leaves for the reader
	// to complete once it no longer writes there (placed), so a flushed
	// Read's sink is no longer written when its completion is seen.
	rxPlacing    bool
	rxPlacingIdx int
	// confirm: SEND and RDMA WRITE complete only once a later Read
	// Response proves the peer processed them (see Config.CompleteOnTransmit).
	confirm bool
	txSeq   uint64 // seq+1 of the last send work request taken for transmission
	fenced  uint64 // txSeq covered by the last Read (user's or fence) sent
	// fencesOut fences are on the wire, at most maxFences: 2 after an
	// RFC 6581 IRD/ORD exchange (one in flight while the next batch goes
	// out, leaving the rest of ORD to the consumer's Reads), 1 otherwise
	// (the peer's IRD is unknown).
	fencesOut, maxFences int
	rq                   []rdma.RecvWR // ring, RecvDepth entries
	rqHead               int
	rqLen                int
	rxBusy               bool   // a receive WR is taken by a multi-segment Send in progress
	rxBusyID             uint64 // ... its ID
	irq                  []inboundRead
	irqHead              int
	irqLen               int
	irqTx                int // entries of irq taken by the writer
	// irqCounted is the Read Requests counted against irdLimit: those not
	// yet taken by the writer. A response leaves the count when the writer
	// takes it, before the peer can have it, so a peer keeping to its ORD
	// never finds us over IRD; the ring holds the responses being written
	// besides (2*IRD+1 entries: one more for the RTR Read).
	irqCounted int
	cq         []cqEntry
	err        error
	term       *termInfo // Terminate the writer sends before closing

	// Transmission ownership (see txRun): held by the writer or a poster;
	// txHandoff: the poster left a batch for the writer to finish;
	// txWanted: the writer waits for the owner to let go.
	txOwned, txHandoff, txWanted bool

	txWake chan struct{}
	cqWake chan struct{}
	// hook is the consumer's completion hook (rdma.CQHook); cqNew tells
	// that completions were queued since it last ran; inHook counts the
	// connection's goroutines running it.
	hook      atomic.Pointer[func()]
	cqNew     atomic.Bool
	inHook    atomic.Int32
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var (
	_ rdma.Conn       = (*conn)(nil)
	_ rdma.CQNotifier = (*conn)(nil)
	_ rdma.Doorbeller = (*conn)(nil)
	_ rdma.CQHook     = (*conn)(nil)
)

// orqEntry is an RDMA Read Request on the wire: a user Read (sq index) or a
// completion fence (zero-length Read) covering send work below upTo.
type orqEntry struct {
	idx   int // sq ring index, or -1 for a fence
	upTo  uint64
	fence bool
}

// cqEntry is a completion and the queue slot it releases when polled.
type cqEntry struct {
	c    rdma.Completion
	send bool
	seq  uint64
}

// ErrPeerClosed is a connection's Err after the peer closed its TCP
// connection without a Terminate. It matches rdma.ErrClosed under errors.Is.
var ErrPeerClosed = fmt.Errorf("iwarp: peer closed the connection: %w", rdma.ErrClosed)

func newConn(d *Device, nc net.Conn, q rdma.QPConfig, o mpaOutcome) *conn {
	caps := o.Caps
	c := &conn{
		dev: d, nc: nc, log: d.log, caps: caps, crc: o.CRC, maxPayload: d.cfg.MaxFPDUPayload, irdLimit: o.IRDLimit,
		br:  newRxReader(nc, readerBufSize),
		sq:  make([]sqEntry, q.SendDepth),
		orq: make([]orqEntry, max(caps.ORD, 1)),
		// Fences need a Read slot at the peer.
		confirm:   !d.cfg.CompleteOnTransmit && caps.ORD > 0,
		maxFences: 1,
		rq:        make([]rdma.RecvWR, q.RecvDepth),
		// One more than IRD: the RTR Read in peer-to-peer mode.
		irq:    make([]inboundRead, 2*o.IRDLimit+1),
		txWake: make(chan struct{}, 1),
		cqWake: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if o.Negotiated {
		c.maxFences = min(caps.ORD, 2)
	}
	if s, ok := q.SRQ.(*srq); ok {
		c.srq = s
	}
	c.br.idle = c.readerIdle
	c.br.lone = &c.lone
	c.rx.init()
	c.tx.init(c)
	return c
}

// SetLoneWait implements rdma.LoneWaiter: with on, the reader waits for
// input in ppoll(2) before Go's poller (rxReader.eagerWait).
func (c *conn) SetLoneWait(on bool) {
	if c.lone.Load() != on {
		c.lone.Store(on)
	}
}

// start runs the reader and writer goroutines.
func (c *conn) start() {
	c.wg.Add(2)
	go c.reader()
	go c.writer()
	c.kickWriter()
}

func (c *conn) Caps() rdma.Caps       { return c.caps }
func (c *conn) LocalAddr() net.Addr   { return c.nc.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr  { return c.nc.RemoteAddr() }
func (c *conn) Done() <-chan struct{} { return c.done }

func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close tears the connection down (TCP FIN), flushes outstanding work and
// waits for the connection's goroutines to end (in the background when
// one of them is running the completion hook, which may be the caller).
func (c *conn) Close() error {
	c.fail(rdma.ErrClosed, nil)
	if c.inHook.Load() > 0 {
		go c.closeOnce.Do(c.finishClose)
		return nil
	}
	c.closeOnce.Do(c.finishClose)
	return nil
}

func (c *conn) finishClose() {
	c.wg.Wait()
	c.dev.removeConn(c)
	if c.srq != nil {
		c.srq.detach()
	}
}

func (c *conn) kickWriter() {
	select {
	case c.txWake <- struct{}{}:
	default:
	}
}

// kickPoller tells the consumer that completions were queued: through
// Notify's channel, or for the hook's next run (announce).
func (c *conn) kickPoller() {
	if c.hook.Load() != nil {
		c.cqNew.Store(true)
		return
	}
	c.signalCQ()
}

func (c *conn) signalCQ() {
	select {
	case c.cqWake <- struct{}{}:
	default:
	}
}

// SetCQHook implements rdma.CQHook.
func (c *conn) SetCQHook(fn func()) {
	c.hook.Store(&fn)
}

// announce runs the completion hook if completions were queued since its
// last run. The reader calls it before it waits for input, the writer after
// each batch; nothing is locked.
func (c *conn) announce() {
	h := c.hook.Load()
	if h == nil || !c.cqNew.Load() || !c.cqNew.CompareAndSwap(true, false) {
		return
	}
	c.inHook.Add(1)
	(*h)()
	c.inHook.Add(-1)
}

// fail takes the connection down with err (the first error wins). With a
// Terminate, the writer sends it and then closes TCP; otherwise TCP is closed
// now. Outstanding work completes with StatusFlushed.
func (c *conn) fail(err error, term *termInfo) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.term = term
	c.flushLocked()
	close(c.done)
	c.mu.Unlock()
	c.kickPoller()
	c.signalCQ()
	c.announce()
	if term != nil {
		c.nc.SetWriteDeadline(time.Now().Add(terminateWriteTimeout))
		c.kickWriter()
	} else {
		c.closeTCP()
	}
	if !errors.Is(err, rdma.ErrClosed) {
		c.log.Debug("iwarp: connection down", "remote", c.nc.RemoteAddr(), "err", err)
	}
}

// terminateLinger is how long a connection that sent a Terminate keeps
// reading (and discarding) for the peer's FIN before closing: closing with
// unread data would send a RST that may overtake the Terminate.
const terminateLinger = 500 * time.Millisecond

// lingerClose half-closes TCP after a Terminate, drains the input until the
// peer closes or terminateLinger passes, then closes. Only the writer calls
// it, after the reader has stopped.
func (c *conn) lingerClose() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
		tc.SetReadDeadline(time.Now().Add(terminateLinger))
		io.Copy(io.Discard, tc)
	}
	c.nc.Close()
}

func (c *conn) closeTCP() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	c.nc.Close()
}

// terminate reports a protocol violation found on receive: a Terminate goes
// to the peer and the connection goes down with a local *TerminateError.
func (c *conn) terminate(t *termInfo) {
	if t.Detail == "" {
		t.Detail = termName(t.Layer, t.Type, t.Code)
	} else {
		t.Detail = termName(t.Layer, t.Type, t.Code) + ": " + t.Detail
	}
	c.fail(t.err(true), t)
}

// flushLocked completes everything outstanding with StatusFlushed.
func (c *conn) flushLocked() {
	for i := 0; i < c.sqLen; i++ {
		idx := (c.sqHead + i) % len(c.sq)
		e := &c.sq[idx]
		if c.rxPlacing && idx == c.rxPlacingIdx {
			continue
		}
		if e.state != sqDone {
			e.state = sqDone
			e.status = rdma.StatusFlushed
			e.err = c.err
		}
	}
	c.sqUntx = 0
	c.advanceSQLocked()
	if c.rxBusy {
		c.rxBusy = false
		st := rdma.StatusFlushed
		if c.term != nil && c.term.recvStatus != rdma.StatusSuccess {
			st = c.term.recvStatus
		}
		c.cq = append(c.cq, cqEntry{c: rdma.Completion{ID: c.rxBusyID, Op: rdma.OpRecv, Status: st, Err: c.err}})
	}
	for c.rqLen > 0 {
		wr := c.rq[c.rqHead]
		c.rq[c.rqHead] = rdma.RecvWR{}
		c.rqHead = (c.rqHead + 1) % len(c.rq)
		c.rqLen--
		c.cq = append(c.cq, cqEntry{c: rdma.Completion{ID: wr.ID, Op: rdma.OpRecv, Status: rdma.StatusFlushed, Err: c.err}})
	}
	// The irq entries are left alone: the writer may be sending from them.
	c.irqLen, c.irqTx, c.irqCounted = 0, 0, 0
}

// confirmLocked completes the SEND and RDMA WRITE work below seq bound: a
// Read Response arrived for a Read sent after them, so the peer has processed
// them (RFC 5040 §5.5 ordering: a Read Request is processed after every
// message before it).
func (c *conn) confirmLocked(bound uint64) {
	for i := 0; i < c.sqLen; i++ {
		e := &c.sq[(c.sqHead+i)%len(c.sq)]
		if e.seq >= bound {
			break
		}
		if e.state != sqDone && e.wr.Op != rdma.OpRDMARead {
			e.state = sqDone
		}
	}
}

// advanceSQLocked reports finished send work in post order.
func (c *conn) advanceSQLocked() {
	n := 0
	for c.sqLen > 0 {
		e := &c.sq[c.sqHead]
		if e.state != sqDone {
			break
		}
		if e.wr.Signaled || e.status != rdma.StatusSuccess {
			// ByteLen is the bytes read for an RDMA Read, 0 otherwise.
			bl := 0
			if e.status == rdma.StatusSuccess && e.wr.Op == rdma.OpRDMARead {
				bl = e.length
			}
			c.cq = append(c.cq, cqEntry{c: rdma.Completion{ID: e.wr.ID, Op: e.wr.Op, Status: e.status, ByteLen: bl, Err: e.err}, send: true, seq: e.seq})
			n++
		}
		if e.sent && c.err == nil {
			// The writer and the reader are done with it (else either may
			// still be reading the list: the slot keeps it until reused).
			clear(e.sgl)
			e.sgl = e.sgl[:0]
		}
		e.err = nil
		c.sqHead = (c.sqHead + 1) % len(c.sq)
		c.sqLen--
	}
	if n > 0 {
		c.kickPoller()
	}
}

// checkSGE validates a local SGE: a live region of this device, in bounds,
// with LocalWrite when the provider writes into it.
func (c *conn) checkSGE(s rdma.SGE, write bool) error { return c.dev.checkSGE(s, write) }

func (d *Device) checkSGE(s rdma.SGE, write bool) error {
	m, ok := s.MR.(*memoryRegion)
	if !ok || m.dev != d {
		return fmt.Errorf("iwarp: SGE region not registered on this device: %w", rdma.ErrInvalidWR)
	}
	if !m.usable() {
		return fmt.Errorf("iwarp: SGE region: %w: %w", rdma.ErrInvalidWR, rdma.ErrDeregistered)
	}
	if s.Offset < 0 || s.Length < 0 || s.Offset > len(m.buf) || s.Length > len(m.buf)-s.Offset {
		return fmt.Errorf("iwarp: SGE [%d,+%d) outside the %d-byte region: %w", s.Offset, s.Length, len(m.buf), rdma.ErrInvalidWR)
	}
	if write && m.access&rdma.AccessLocalWrite == 0 {
		return fmt.Errorf("iwarp: SGE region lacks local write: %w", rdma.ErrInvalidWR)
	}
	return nil
}

// PostSend queues send work requests (see rdma.Conn). The SGE list is
// copied, the data is not: the writer sends straight from the registered
// buffers, which must stay untouched until the completion (as in verbs).
// Caps.MaxInline is 0. Safe for concurrent use.
func (c *conn) PostSend(wrs ...rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	posted, err := c.postSendLocked(wrs)
	if posted > 0 {
		c.kickWriter()
	}
	return err
}

// PostSendDeferred implements rdma.Doorbeller.
func (c *conn) PostSendDeferred(wrs ...rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.postSendLocked(wrs)
	return err
}

// Doorbell implements rdma.Doorbeller: the caller transmits itself when
// the writer is idle and the connection is a TCP socket (see txRun).
func (c *conn) Doorbell() {
	c.mu.Lock()
	inline := c.tx.rc != nil && !c.txOwned && c.err == nil && c.sqUntx > 0
	c.mu.Unlock()
	if inline {
		c.txRun(false)
		return
	}
	c.kickWriter()
}

// postSendLocked queues wrs; it returns how many were queued and why the
// rest were not.
func (c *conn) postSendLocked(wrs []rdma.SendWR) (posted int, err error) {
	for i := range wrs {
		wr := &wrs[i]
		if c.err != nil {
			return posted, rdma.ErrClosed
		}
		switch wr.Op {
		case rdma.OpSend, rdma.OpSendInvalidate, rdma.OpRDMAWrite, rdma.OpRDMARead:
		default:
			return posted, fmt.Errorf("iwarp: opcode %v: %w", wr.Op, rdma.ErrInvalidWR)
		}
		if len(wr.Local) > c.caps.MaxSGE {
			return posted, fmt.Errorf("iwarp: %d SGEs, max %d: %w", len(wr.Local), c.caps.MaxSGE, rdma.ErrInvalidWR)
		}
		total := 0
		for _, s := range wr.Local {
			if err := c.checkSGE(s, wr.Op == rdma.OpRDMARead); err != nil {
				return posted, err
			}
			total += s.Length
		}
		if total > math.MaxInt32 {
			return posted, fmt.Errorf("iwarp: %d-byte message: %w", total, rdma.ErrInvalidWR)
		}
		if c.sqHeld >= len(c.sq) {
			return posted, rdma.ErrQueueFull
		}
		if wr.Op == rdma.OpRDMARead && len(c.reads) >= c.caps.ORD {
			return posted, rdma.ErrQueueFull
		}
		idx := (c.sqHead + c.sqLen) % len(c.sq)
		e := &c.sq[idx]
		sgl := append(e.sgl[:0], wr.Local...)
		*e = sqEntry{wr: *wr, sgl: sgl, length: total, seq: c.sqSeq}
		c.sqSeq++
		c.sqHeld++
		e.wr.Local = nil
		if wr.Op == rdma.OpRDMARead {
			if len(sgl) > 0 {
				m := sgl[0].MR.(*memoryRegion)
				e.sinkSTag = m.stag
				if m.stag == 0 {
					e.sinkSTag = localSinkSTag
				}
				e.sinkTO = m.addr + uint64(sgl[0].Offset)
			}
			c.reads = append(c.reads, e.seq)
		}
		c.sqLen++
		c.sqUntx++
		posted++
	}
	return posted, nil
}

// PostRecv posts receive buffers, each for one incoming Send message. A
// connection on a shared receive queue has no receive queue of its own:
// rdma.ErrInvalidWR.
func (c *conn) PostRecv(wrs ...rdma.RecvWR) error {
	if c.srq != nil && len(wrs) > 0 {
		return fmt.Errorf("iwarp: PostRecv on a queue pair using an SRQ: %w", rdma.ErrInvalidWR)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, wr := range wrs {
		if c.err != nil {
			return rdma.ErrClosed
		}
		if err := c.checkSGE(wr.Local, true); err != nil {
			return err
		}
		if c.rqHeld >= len(c.rq) {
			return rdma.ErrQueueFull
		}
		c.rq[(c.rqHead+c.rqLen)%len(c.rq)] = wr
		c.rqLen++
		c.rqHeld++
	}
	return nil
}

// releaseLocked frees the queue slots of a polled completion: a receive
// slot, or the send slots up to and including its work request (unsignaled
// work before it holds its slot until then, as on verbs hardware).
func (c *conn) releaseLocked(e cqEntry) {
	if !e.send {
		if c.srq != nil {
			c.srq.release()
		} else {
			c.rqHeld--
		}
		return
	}
	if e.seq < c.released {
		return
	}
	c.sqHeld -= int(e.seq + 1 - c.released)
	c.released = e.seq + 1
	i := 0
	for i < len(c.reads) && c.reads[i] <= e.seq {
		i++
	}
	c.reads = c.reads[:copy(c.reads, c.reads[i:])]
}

// Poll returns completions (see rdma.Conn).
func (c *conn) Poll(ctx context.Context, out []rdma.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	for {
		if n, err := c.TryPoll(out); n > 0 || err != nil {
			return n, err
		}
		done := c.done
		if c.placingAfterFail() {
			// The reader flushes the Read it places, then signals.
			done = nil
		}
		select {
		case <-c.cqWake:
		case <-done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// placingAfterFail reports whether the connection failed while the reader
// was placing a Read Response: that Read's flush is still to come
// (flushLocked left it to the reader).
func (c *conn) placingAfterFail() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil && c.rxPlacing
}

// TryPoll implements rdma.CQNotifier.
func (c *conn) TryPoll(out []rdma.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cq) == 0 {
		if c.err != nil && !c.rxPlacing {
			return 0, rdma.ErrClosed
		}
		return 0, nil
	}
	n := min(len(out), len(c.cq))
	for i, e := range c.cq[:n] {
		out[i] = e.c
		c.releaseLocked(e)
	}
	rest := copy(c.cq, c.cq[n:])
	clear(c.cq[rest:])
	c.cq = c.cq[:rest]
	return n, nil
}

// Notify implements rdma.CQNotifier.
func (c *conn) Notify() <-chan struct{} { return c.cqWake }
