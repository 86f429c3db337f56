package initiator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// rspHdrLen is the fixed part of SRP_RSP, bytes.
const rspHdrLen = srp.RspSize

// Work request IDs: the kind in bits 32..39, the slot index below.
const (
	wrSend uint64 = 1 << 32
	wrRecv uint64 = 2 << 32
	wrKind uint64 = 0xff << 32
)

// Slot kinds within a channel's send IU array.
const (
	slotCmd = iota
	slotTMF
	slotRsp
)

// respResources is the IRD the initiator offers: how many RDMA READs the
// target may have outstanding against its data-out buffers. Higher than
// ib_srp's 4 so that a target pipelining writes is not throttled (the
// provider negotiates it down to what it supports).
const respResources = 64

// tmfSlots is how many task management functions a channel runs at once.
const tmfSlots = 2

// maxTIIULen bounds the max_ti_iu_len a target may announce, bytes; the
// receive ring holds QueueSize buffers of that size.
const maxTIIULen = 1 << 20

// request is one send IU slot of a channel: an SRP_CMD, SRP_TSK_MGMT or a
// CRED_RSP/AER_RSP. A command slot is reused only after both its SEND has
// completed and its issuer has finished with the response (refs).
type request struct {
	ch    *channel
	idx   int
	kind  int
	iu    []byte // the send buffer, in ch.sendMR (capacity: one IU)
	iuOff int    // offset of iu in ch.sendMR
	sge   [1]rdma.SGE
	wr    [1]rdma.SendWR
	table []byte // this slot's indirect descriptor table, in ch.tableMR
	// cmd is the SRP_CMD being encoded; its descriptor lists keep their
	// capacity from one command to the next.
	cmd srp.Cmd
	// immBuf gathers a multi-segment data-out for immediate data.
	immBuf []byte
	tOff   int
	timer  Timer
	done   chan struct{} // one token per response
	refs   atomic.Int32
	mrs    []rdma.MemoryRegion
	// A submitted command's (Submit): its callback and Result, and the
	// watchdog tick it was submitted at. cb is nil for Execute's commands
	// and once the command is finished or handed to abort; guarded by ch.mu.
	cb      func(error)
	res     *Result
	inLen   int
	tick    uint64
	posting bool // Submit has not yet posted it
	// sent is the IU's place in the channel's send queue (channel.posted),
	// 0 until it is queued or when queueing failed. The connection keeps
	// that order to the target, so an SRP_CMD sent before a LOGICAL UNIT
	// RESET on its channel reached the target before it (resetDone).
	sent atomic.Uint64

	// Guarded by ch.mu.
	gen    uint32
	tag    uint64
	active bool   // a response for tag is expected
	lun    uint64 // the command's LUN
	reset  bool   // ended by a LOGICAL UNIT RESET, no response will come

	// The response, written by the poller before the done token.
	flags, status uint8
	dataOutRes    uint32
	dataInRes     uint32
	respCode      uint8
	respValid     bool
	sense         []byte // aliases senseBuf
	senseBuf      [256]byte
}

// LoginInfo is what the target granted in its SRP_LOGIN_RSP (T10 SRP r16a
// §6.3, table 8) plus what the initiator derived from it.
type LoginInfo struct {
	// ReqLimDelta is the initial request limit, in IUs (credits).
	ReqLimDelta int32
	// MaxITIULen is the target's largest initiator-to-target IU, bytes.
	MaxITIULen uint32
	// MaxTIIULen is the largest target-to-initiator IU, bytes.
	MaxTIIULen uint32
	// BufFmt is the target's supported buffer formats (bit 1 direct, bit 2
	// indirect).
	BufFmt uint16
	// RspFlags is the multichannel result (bits 0-1: 0 no existing
	// channels, 1 terminated, 2 maintained) and 0x80 IMMED_SUPP.
	RspFlags uint8
	// ReqITIULen is the IU length this initiator requested, bytes.
	ReqITIULen int
	// UsedITIULen is min(ReqITIULen, MaxITIULen): the longest SRP_CMD sent.
	UsedITIULen int
	// ImmediateData reports that immediate data is in use on the channel.
	ImmediateData bool
	// CanQueue is how many commands the channel has outstanding at most:
	// min(req_lim-1, queue_size-2) (ib_srp srp_cm_rep_handler).
	CanQueue int
}

// channel is one RDMA channel (SRP login) of a session.
type channel struct {
	s      *Session
	idx    int
	conn   rdma.Conn
	recvWR [1]rdma.RecvWR // reposting a receive (the poll goroutine's)
	info   LoginInfo
	log    *slog.Logger
	useImm bool
	maxIT  int // longest SRP_CMD we send, bytes
	maxTI  int // receive buffer size, bytes

	sendMR, recvMR, tableMR rdma.MemoryRegion
	reqs                    []request
	free, tmfFree, rspFree  chan *request
	recvSGE                 []rdma.SGE

	mu           sync.Mutex
	reqLim       int
	rsp          srp.Rsp // decode scratch of the poller
	comps        [32]rdma.Completion
	creditWaits  int
	creditSignal chan struct{}

	failOnce sync.Once
	dead     chan struct{}
	err      error // why the channel went down; set before dead closes
	pollDone chan struct{}

	// pollMu is held while completions are taken and handled: by the poll
	// goroutine, or by the provider's goroutine in the completion hook
	// (rdma.CQHook). In the hook a failure is not acted on (fail closes
	// the connection and takes the session's lock) but left in hookErr for
	// the poll goroutine, which wake wakes.
	pollMu  sync.Mutex
	hooking bool
	hookErr error
	wake    chan struct{}

	// draining is set while completions are handled; a Submit from a
	// callback then defers its post and sets deferred, and drain rings the
	// doorbell once after the batch.
	draining, deferred atomic.Bool
	watchdogOnce       sync.Once
	watchdogOn         atomic.Bool   // the watchdog was started
	watchdogDone       chan struct{} // closed when it ends
	tick               uint64        // watchdog ticks; guarded by mu

	// postMu orders the IUs queued on the connection: posted counts them
	// and request.sent takes the count, in the order the target receives
	// them.
	postMu sync.Mutex
	posted uint64

	// lone, when the connection has it, is told at each post whether the
	// channel has a single command outstanding (rdma.LoneWaiter).
	lone rdma.LoneWaiter
}

// loginPrivateData builds the 56-byte RDMA/CM form of SRP_LOGIN_REQ
// (Linux struct srp_login_req_rdma, ib_srp srp_send_req): tag 0,
// req_buf_fmt DIRECT|INDIRECT, multichannel action SINGLE for channel 0 and
// MULTI for the others, IMMED_REQUESTED with imm_data_offset 68.
func loginPrivateData(o Options, multi bool) []byte {
	ipi, tpi := o.PortIDs()
	r := srp.LoginRequestRDMA{
		ReqITIULen:      uint32(o.ReqITIULen()),
		ReqBufFmt:       srp.BufFmtDirect | srp.BufFmtIndirect,
		ReqFlags:        srp.MultiChanSingle,
		InitiatorPortID: ipi,
		TargetPortID:    tpi,
	}
	if multi {
		r.ReqFlags = srp.MultiChanMulti
	}
	if !o.NoImmData {
		r.ReqFlags |= srp.LoginImmRequested
		r.ImmDataOffset = ImmDataOffset
	}
	b, _ := r.Marshal()
	return b
}

// parseLoginRsp decodes the SRP_LOGIN_RSP of a connect reply.
func parseLoginRsp(b []byte) (LoginInfo, error) {
	var r srp.LoginResponse
	if err := r.Unmarshal(b); err != nil {
		return LoginInfo{}, fmt.Errorf("%w: connect reply is not an SRP_LOGIN_RSP: %w", ErrProtocol, err)
	}
	return LoginInfo{ReqLimDelta: int32(r.ReqLimDelta), MaxITIULen: r.MaxITIULen, MaxTIIULen: r.MaxTIIULen,
		BufFmt: uint16(r.BufFmt), RspFlags: uint8(r.RspFlags)}, nil
}

// parseLoginRej decodes the SRP_LOGIN_REJ a connection reject carries, or
// returns nil when it carries none.
func parseLoginRej(b []byte, ch int) error {
	var r srp.LoginReject
	if r.Unmarshal(b) != nil {
		return nil
	}
	return &LoginRejectError{Reason: r.Reason, BufFmt: uint16(r.BufFmt), Channel: ch}
}

// dialChannel logs in one channel: the connect request carries the login,
// the reply the SRP_LOGIN_RSP (Linux ib_srp srp_send_req and
// srp_cm_rep_handler).
func dialChannel(ctx context.Context, s *Session, idx int) (*channel, error) {
	o := s.opts
	cfg := rdma.QPConfig{SendDepth: o.QueueSize + tmfSlots + rspSlots, RecvDepth: o.QueueSize, MaxSGE: 2, IRD: respResources, ORD: 0}
	conn, reply, err := s.dev.Dial(ctx, o.Dest, cfg, loginPrivateData(o, o.loginMulti(idx) || s.nexusTaken.Load()))
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			if lr := parseLoginRej(rej.PrivateData, idx); lr != nil {
				return nil, lr
			}
		}
		return nil, fmt.Errorf("srp login to %s (channel %d): %w", o.Dest, idx, err)
	}
	li, err := parseLoginRsp(reply)
	if err == nil && (li.MaxTIIULen < rspHdrLen || li.MaxTIIULen > maxTIIULen || li.MaxITIULen < 64 || li.ReqLimDelta < 2) {
		err = fmt.Errorf("%w: SRP_LOGIN_RSP with req_lim %d, max_it_iu_len %d, max_ti_iu_len %d", ErrProtocol, li.ReqLimDelta, li.MaxITIULen, li.MaxTIIULen)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	li.ReqITIULen = o.ReqITIULen()
	li.UsedITIULen = min(li.ReqITIULen, int(li.MaxITIULen))
	li.ImmediateData = !o.NoImmData && srp.LoginRspFlags(li.RspFlags)&srp.LoginRspImmSupp != 0
	li.CanQueue = min(int(li.ReqLimDelta)-tmfReserve, o.QueueSize-tmfReserve-rspSQSize)
	ch := &channel{
		s: s, idx: idx, conn: conn, info: li, useImm: li.ImmediateData,
		maxIT: li.UsedITIULen, maxTI: int(li.MaxTIIULen), reqLim: int(li.ReqLimDelta),
		log: s.log.With("ch", idx), creditSignal: make(chan struct{}),
		dead: make(chan struct{}), pollDone: make(chan struct{}), watchdogDone: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	ch.lone, _ = conn.(rdma.LoneWaiter)
	if err := ch.setup(); err != nil {
		ch.release()
		conn.Close()
		return nil, err
	}
	go ch.poll()
	ch.log.Debug("srp channel logged in", "req_lim", li.ReqLimDelta, "max_it_iu_len", li.MaxITIULen,
		"max_ti_iu_len", li.MaxTIIULen, "imm", li.ImmediateData, "can_queue", li.CanQueue)
	return ch, nil
}

// setup registers the IU rings and posts the receive buffers.
func (ch *channel) setup() error {
	dev, o := ch.s.dev, ch.s.opts
	nCmd := ch.info.CanQueue
	n := nCmd + tmfSlots + rspSlots
	var err error
	if ch.sendMR, err = dev.Register(make([]byte, n*ch.maxIT), rdma.AccessLocalWrite); err != nil {
		return err
	}
	tbl := 16 * o.CmdSGEntries
	if ch.tableMR, err = dev.Register(make([]byte, nCmd*tbl), rdma.AccessRemoteRead); err != nil {
		return err
	}
	nRecv := o.QueueSize
	if ch.recvMR, err = dev.Register(make([]byte, nRecv*ch.maxTI), rdma.AccessLocalWrite); err != nil {
		return err
	}
	ch.reqs = make([]request, n)
	ch.free = make(chan *request, nCmd)
	ch.tmfFree = make(chan *request, tmfSlots)
	ch.rspFree = make(chan *request, rspSlots)
	for i := range ch.reqs {
		r := &ch.reqs[i]
		r.ch, r.idx = ch, i
		r.gen = rand.Uint32() // see Session.tagTop
		r.iuOff = i * ch.maxIT
		r.iu = ch.sendMR.Bytes()[r.iuOff : r.iuOff+ch.maxIT : r.iuOff+ch.maxIT]
		r.sge[0] = rdma.SGE{MR: ch.sendMR, Offset: r.iuOff}
		r.done = make(chan struct{}, 1)
		switch {
		case i < nCmd:
			r.kind = slotCmd
			r.tOff = i * tbl
			r.table = ch.tableMR.Bytes()[r.tOff : r.tOff+tbl : r.tOff+tbl]
			ch.free <- r
		case i < nCmd+tmfSlots:
			r.kind = slotTMF
			ch.tmfFree <- r
		default:
			r.kind = slotRsp
			ch.rspFree <- r
		}
		if r.kind != slotRsp {
			r.timer = ch.s.clock.NewTimer(time.Hour)
			r.timer.Stop()
		}
	}
	ch.recvSGE = make([]rdma.SGE, nRecv)
	wrs := make([]rdma.RecvWR, nRecv)
	for i := range wrs {
		ch.recvSGE[i] = rdma.SGE{MR: ch.recvMR, Offset: i * ch.maxTI, Length: ch.maxTI}
		wrs[i] = rdma.RecvWR{ID: wrRecv | uint64(i), Local: ch.recvSGE[i]}
	}
	return ch.conn.PostRecv(wrs...)
}

// release deregisters the rings; only after the connection is closed.
func (ch *channel) release() {
	for _, mr := range []rdma.MemoryRegion{ch.sendMR, ch.tableMR, ch.recvMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
}

// fail takes the channel down once: closes the connection (flushing every
// outstanding work request) and tells the session.
func (ch *channel) fail(err error) {
	ch.failOnce.Do(func() {
		ch.err = err
		// The connection first: a command that ends with ErrChannelDown
		// when dead closes gives its buffers back to its caller, and the
		// target must no longer be able to read them (RDMA READ of a
		// WRITE's data-out) or write them.
		ch.conn.Close()
		close(ch.dead)
		ch.s.channelDown(ch, err)
	})
}

// down reports whether the channel has gone down.
func (ch *channel) down() bool {
	select {
	case <-ch.dead:
		return true
	default:
		return false
	}
}

// poll is the channel's completion loop. On a connection with a
// completion hook it only takes over when the hook cannot (another
// goroutine was polling, or the hook left a failure to act on).
func (ch *channel) poll() {
	defer close(ch.pollDone)
	if h, ok := ch.conn.(rdma.CQHook); ok {
		h.SetCQHook(ch.onCQHook)
		notify := h.Notify()
		for {
			ch.pollMu.Lock()
			err := ch.drain(h)
			if err == nil {
				err, ch.hookErr = ch.hookErr, nil
			}
			ch.pollMu.Unlock()
			if err != nil {
				ch.fail(err)
				if !errors.Is(err, rdma.ErrClosed) {
					continue // the flushed work completes still
				}
				return
			}
			select {
			case <-ch.wake:
			case <-notify:
			}
		}
	}
	var cs [32]rdma.Completion
	for {
		n, err := ch.conn.Poll(context.Background(), cs[:])
		for i := range cs[:n] {
			ch.complete(&cs[i])
		}
		if err != nil {
			ch.fail(err)
			return
		}
	}
}

// drain takes and handles every completion available; with pollMu held.
func (ch *channel) drain(h rdma.CQNotifier) error {
	ch.draining.Store(true)
	defer func() {
		ch.draining.Store(false)
		if ch.deferred.Swap(false) {
			ch.conn.(rdma.Doorbeller).Doorbell()
		}
	}()
	for {
		n, err := h.TryPoll(ch.comps[:])
		for i := range ch.comps[:n] {
			ch.complete(&ch.comps[i])
		}
		if err != nil || n < len(ch.comps) {
			return err
		}
	}
}

// onCQHook is the completion hook: it handles the completions on the
// provider's goroutine unless the poll goroutine is at it.
func (ch *channel) onCQHook() {
	if !ch.pollMu.TryLock() {
		ch.wakePoller()
		return
	}
	ch.hooking = true
	err := ch.drain(ch.conn.(rdma.CQNotifier))
	ch.hooking = false
	if err != nil && ch.hookErr == nil {
		ch.hookErr = err
	}
	failed := ch.hookErr != nil
	ch.pollMu.Unlock()
	if failed {
		ch.wakePoller()
	}
}

func (ch *channel) wakePoller() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// pollFail is fail for the completion handlers: in the hook it leaves err
// to the poll goroutine.
func (ch *channel) pollFail(err error) {
	if ch.hooking {
		if ch.hookErr == nil {
			ch.hookErr = err
		}
		return
	}
	ch.fail(err)
}

func (ch *channel) complete(c *rdma.Completion) {
	idx := int(c.ID &^ wrKind)
	switch c.ID & wrKind {
	case wrSend:
		if idx >= len(ch.reqs) {
			return
		}
		if c.Status != rdma.StatusSuccess {
			ch.pollFail(fmt.Errorf("srp channel %d: send completed with %v: %w", ch.idx, c.Status, errOr(c.Err, ErrChannelDown)))
		}
		ch.reqs[idx].put()
	case wrRecv:
		if c.Status != rdma.StatusSuccess {
			ch.pollFail(fmt.Errorf("srp channel %d: receive completed with %v: %w", ch.idx, c.Status, errOr(c.Err, ErrChannelDown)))
			return
		}
		if idx >= len(ch.recvSGE) {
			return
		}
		sge := ch.recvSGE[idx]
		ch.receive(sge.Bytes()[:min(c.ByteLen, sge.Length)])
		if ch.down() || ch.hookErr != nil {
			return
		}
		// The poller's own work request: a literal would escape to the heap.
		ch.recvWR[0] = rdma.RecvWR{ID: c.ID, Local: sge}
		if err := ch.conn.PostRecv(ch.recvWR[:]...); err != nil {
			ch.pollFail(err)
		}
	}
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// receive dispatches one IU from the target (ib_srp srp_recv_done). It
// runs on the poller goroutine only.
func (ch *channel) receive(b []byte) {
	op, err := srp.PeekOpcode(b)
	if err != nil {
		ch.log.Warn("srp: bad IU from target", "err", err)
		return
	}
	switch op {
	case srp.OpRsp:
		ch.receiveRsp(b)
	case srp.OpCredReq:
		// T10 SRP r16a §6.10: add the delta, answer SRP_CRED_RSP.
		var q srp.CredReq
		if err := q.Unmarshal(b); err != nil {
			ch.log.Warn("srp: bad SRP_CRED_REQ", "err", err)
			return
		}
		ch.mu.Lock()
		ch.addCredits(int32(q.ReqLimDelta))
		ch.mu.Unlock()
		ch.sendRsp(&srp.CredRsp{Tag: q.Tag})
	case srp.OpAerReq:
		// T10 SRP r16a §6.12: add the delta, log the event, answer SRP_AER_RSP.
		var q srp.AerReq
		if err := q.Unmarshal(b); err != nil {
			ch.log.Warn("srp: bad SRP_AER_REQ", "err", err)
			return
		}
		ch.mu.Lock()
		ch.addCredits(int32(q.ReqLimDelta))
		ch.mu.Unlock()
		if e := DecodeSense(sense.StatusCheckCondition, q.Sense); e != nil {
			ch.log.Warn("srp: asynchronous event", "lun", q.LUN, "sense", e.Error())
		} else {
			ch.log.Warn("srp: asynchronous event", "lun", q.LUN)
		}
		ch.sendRsp(&srp.AerRsp{Tag: q.Tag})
	case srp.OpTLogout:
		var q srp.TLogout
		_ = q.Unmarshal(b)
		ch.log.Warn("srp: target logout", "reason", q.Reason)
		if q.Reason == srp.TLogoutMultiChannelAction && !ch.s.nexusTaken.Swap(true) {
			ch.log.Warn("srp: another login of this initiator port took the I_T nexus over; reconnecting with multichannel action MULTI to share it")
		}
		ch.pollFail(fmt.Errorf("%w: target logged out (%v)", ErrChannelDown, q.Reason))
	default:
		ch.log.Warn("srp: unhandled IU from target", "op", op, "len", len(b))
	}
}

// sendRsp answers a target request. Without a free response IU the answer is
// dropped with a warning, as ib_srp does.
func (ch *channel) sendRsp(iu srp.IU) {
	var r *request
	select {
	case r = <-ch.rspFree:
	default:
		ch.log.Warn("srp: no IU free to answer target request", "op", iu.Opcode())
		return
	}
	b, _ := iu.AppendTo(r.iu[:0])
	r.refs.Store(1)
	if err := r.post(len(b)); err != nil {
		r.put()
		ch.pollFail(err)
	}
}

// receiveRsp handles an SRP_RSP (T10 SRP r16a §6.9, table 21). A response
// for an unknown tag still carries credits.
func (ch *channel) receiveRsp(b []byte) {
	q := &ch.rsp
	if err := q.Unmarshal(b); err != nil {
		if len(b) < rspHdrLen {
			ch.log.Warn("srp: bad SRP_RSP", "err", err)
			return
		}
		// Keep the fixed part: the command still completes, without the
		// truncated response or sense data.
		ch.log.Warn("srp: truncated SRP_RSP", "err", err)
		var fixed [rspHdrLen]byte
		copy(fixed[:], b)
		clear(fixed[28:]) // sense_data_len, resp_data_len
		if err := q.Unmarshal(fixed[:]); err != nil {
			return
		}
	}
	tag := q.Tag
	ch.mu.Lock()
	ch.addCredits(int32(q.ReqLimDelta))
	idx := int(tag & 0xffff)
	if tag>>48&0xff != uint64(ch.idx) || idx >= len(ch.reqs) || ch.reqs[idx].tag != tag || !ch.reqs[idx].active {
		ch.mu.Unlock()
		ch.log.Warn("srp: SRP_RSP for unknown tag", "tag", tag)
		return
	}
	r := &ch.reqs[idx]
	r.active = false
	cb := r.cb
	r.cb = nil
	ch.mu.Unlock()
	r.flags, r.status = uint8(q.Flags), q.Status
	r.dataOutRes, r.dataInRes = q.DataOutResCnt, q.DataInResCnt
	r.respCode, r.respValid = q.TMFCode()
	r.sense = nil
	if q.Flags&srp.SnsValid != 0 {
		r.sense = r.senseBuf[:copy(r.senseBuf[:], q.Sense)]
	}
	if cb != nil {
		ch.finishSubmitted(r, cb)
		return
	}
	r.done <- struct{}{}
}

// addCredits adds a request limit delta (signed, T10 SRP r16a §5.6) and
// wakes credit waiters. Caller holds ch.mu.
func (ch *channel) addCredits(d int32) {
	ch.reqLim += int(d)
	if d > 0 && ch.creditWaits > 0 {
		close(ch.creditSignal)
		ch.creditSignal = make(chan struct{})
		ch.creditWaits = 0
	}
}

// takeCredit waits until the request limit is above reserve and takes one
// credit (ib_srp __srp_get_tx_iu keeps SRP_TSK_MGMT_SQ_SIZE back for
// commands).
func (ch *channel) takeCredit(ctx context.Context, reserve int) error {
	for {
		ch.mu.Lock()
		if ch.takeCreditLocked(reserve) {
			ch.mu.Unlock()
			return nil
		}
		ch.creditWaits++
		w := ch.creditSignal
		ch.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		case <-ch.dead:
			return ErrChannelDown
		}
	}
}

// takeCreditLocked takes a credit if the request limit is above reserve.
// Caller holds ch.mu.
func (ch *channel) takeCreditLocked(reserve int) bool {
	if ch.reqLim > reserve {
		ch.reqLim--
		return true
	}
	return false
}

// tryTakeCredit is takeCredit without waiting: it reports whether a credit
// was taken.
func (ch *channel) tryTakeCredit(reserve int) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.takeCreditLocked(reserve)
}

func (ch *channel) returnCredit() {
	ch.mu.Lock()
	ch.addCredits(1)
	ch.mu.Unlock()
}

// activate gives r a fresh tag: the session's random byte (tagTop) in
// bits 56..63, channel in 48..55, generation in 16..47, slot in 0..15. A
// late response to an earlier use of the slot no longer matches.
func (r *request) activate(refs int32) {
	ch := r.ch
	ch.mu.Lock()
	r.gen++
	r.reset = false
	r.tag = ch.s.tagTop | uint64(ch.idx)<<48 | uint64(r.gen)<<16 | uint64(r.idx)
	r.active = true
	r.sent.Store(0)
	select {
	case <-r.done:
	default:
	}
	ch.mu.Unlock()
	r.refs.Store(refs)
}

func (r *request) deactivate() {
	r.ch.mu.Lock()
	r.active = false
	r.ch.mu.Unlock()
}

// put drops one reference; the last returns the slot to its free list.
func (r *request) put() {
	if r.refs.Add(-1) != 0 {
		return
	}
	switch r.kind {
	case slotCmd:
		r.ch.free <- r
	case slotTMF:
		r.ch.tmfFree <- r
	default:
		r.ch.rspFree <- r
	}
}

// post sends the first n bytes of r.iu. The work request lives in the slot
// so that posting allocates nothing.
func (r *request) post(n int) error {
	r.sge[0].Length = n
	r.wr[0] = rdma.SendWR{ID: wrSend | uint64(r.idx), Op: rdma.OpSend, Local: r.sge[:], Signaled: true}
	if b, ok := r.ch.conn.(rdma.Doorbeller); ok && cap(r.ch.free)-len(r.ch.free) <= 1 {
		// The channel's only command: transmitted by this goroutine when
		// the connection's writer is idle (one hand-off less). With more
		// in flight the writer gathers them into one write.
		if err := r.queue(b.PostSendDeferred); err != nil {
			return err
		}
		b.Doorbell()
		return nil
	}
	return r.queue(r.ch.conn.PostSend)
}

// queue puts r's work request on the connection's send queue with postFn
// and numbers it (sent) in the same step.
func (r *request) queue(postFn func(...rdma.SendWR) error) error {
	ch := r.ch
	if ch.lone != nil {
		// At queue depth 1 the response is awaited alone: the connection
		// may wait for it sooner (on iWARP: 4 KiB reads at QD1 twice the
		// IOPS, docs/PERFORMANCE.md); with more outstanding it batches.
		ch.lone.SetLoneWait(cap(ch.free)-len(ch.free) <= 1)
	}
	ch.postMu.Lock()
	ch.posted++
	r.sent.Store(ch.posted)
	err := postFn(r.wr[:]...)
	if err != nil {
		r.sent.Store(0)
	}
	ch.postMu.Unlock()
	return err
}

// sentSoFar is the number of IUs queued on the channel until now.
func (ch *channel) sentSoFar() uint64 {
	ch.postMu.Lock()
	defer ch.postMu.Unlock()
	return ch.posted
}

func (r *request) unmap() {
	for i, mr := range r.mrs {
		mr.Deregister()
		r.mrs[i] = nil
	}
	r.mrs = r.mrs[:0]
}

// resetDone ends the outstanding commands on lun after a LOGICAL UNIT RESET
// completed: the target aborted them and sends no response (ib_srp
// srp_reset_device finishes them with DID_RESET). Only the commands queued
// on the channel at or before before (request.sent) are ended: one queued
// after the reset's TMF reaches the target after the reset and runs there,
// so its response, or its timeout, ends it; ended with ErrAborted, its
// caller would reuse the buffers the target is still to read.
func (ch *channel) resetDone(lun, before uint64) {
	var ended []*request
	var cbs []func(error)
	ch.mu.Lock()
	for i := range ch.reqs {
		r := &ch.reqs[i]
		if r.kind != slotCmd || !r.active || r.lun != lun {
			continue
		}
		if sent := r.sent.Load(); sent == 0 || sent > before {
			continue
		}
		switch {
		case r.cb == nil:
			// A waiting goroutine's (Execute's, or abort's).
			r.active, r.reset = false, true
			r.done <- struct{}{}
		case !r.posting:
			ended = append(ended, r)
			cbs = append(cbs, r.cb)
			r.cb, r.res, r.active = nil, nil, false
		}
		// A submitted command still being posted may have reached the
		// target after the reset: its response, or its timeout, ends it.
	}
	ch.mu.Unlock()
	endAll(ended, cbs, fmt.Errorf("%w: logical unit reset", ErrAborted))
}
