package target

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// Receive buffers beyond twice the request limit: room for the IUs that
// spend no credit (SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP) and a login IU.
//
// The ring holds 2*RQSize+extraRecv buffers because a command keeps its
// receive buffer (which may hold its immediate data) until its SRP_RSP send
// completes, while the initiator may reuse the credit as soon as it sees the
// response: up to RQSize answered-but-unreleased commands plus RQSize new
// requests can be in the ring at once. iWARP has no RNR retry, so a SEND
// finding no receive buffer is fatal to the connection (RFC 5041 §7.2).
const extraRecv = 4

// Send contexts reserved for target-initiated IUs, after the RQSize
// response contexts.
const (
	sendCredReq = iota // SRP_CRED_REQ
	sendLogout         // SRP_T_LOGOUT, or the login response/reject of an IU-form login
	nReserved
)

// Work request ID spaces: receive WR IDs are the receive slot; send queue
// WR IDs carry wrSendBit and index c.wrs.
const wrSendBit = 1 << 63

type closeKind uint8

const (
	closeQuiet   closeKind = iota // disconnect without an SRP_T_LOGOUT
	closeTLogout                  // send SRP_T_LOGOUT, then disconnect
)

type closeRequest struct {
	kind   closeKind
	reason srp.TLogoutReason
	why    string
}

// event is one input of the channel's loop.
type event struct {
	comps    []rdma.Completion
	pollDone bool
	cmd      *command // Execute returned
	res      scsi.Result
	tmf      *tmfOp // TaskManagement returned
	tick     bool   // the logout timer fired
	noLogin  bool   // the login timer fired
}

// channel is one RDMA channel: a connected queue pair, its receive and send
// rings, its credits and commands. All mutable state is owned by the loop
// goroutine (run); other goroutines talk to it through events and closeReq.
type channel struct {
	port *Port
	id   uint64
	cfg  Config
	log  *slog.Logger
	nx   *nexus // nil until the login of an IU-form connection; set under port.mu
	// remote is the initiator's transport address, for address ACLs.
	remote net.Addr

	conn rdma.Conn
	ctx  context.Context // passed to Execute; cancelled on close
	stop context.CancelFunc

	// Negotiated at login.
	maxTI      int // max_ti_iu_len: largest IU we send, in bytes
	immOffset  int // immediate data offset in an SRP_CMD, 0 if not negotiated
	loginFlags srp.LoginReqFlags

	// Receive buffers: the channel's own ring of nRecv slots, laid out so
	// immediate data at immOffset lands 512-byte aligned; or, with a shared
	// receive queue (srq non-nil), the port's ring, whose slots the channel
	// holds (held) from their receive completion until it posts them back.
	ring  *recvRing
	nRecv int
	srq   rdma.SRQ
	held  map[int]struct{}

	// Send ring: nSend buffers of MaxRspSize bytes.
	sendMR   rdma.MemoryRegion
	nSend    int
	freeSend []int

	// Loop-owned state.
	state      chanState
	stateMirr  atomic.Int32
	cred       credits
	wait       []int // receive slots parked, in arrival order
	cmds       map[uint64]*command
	nCmds      int // commands and TMFs holding a send context
	executing  int // goroutines in Execute or TaskManagement
	sqAvail    int
	ordAvail   int
	readQ      []*readOp
	sendQ      []*sendBatch
	wrs        map[uint64]*wrRec
	nextWR     uint64
	pollDone   bool
	credReqOut bool
	credTag    uint64
	pendClose  bool // a T_LOGOUT (or LOGIN_REJ) SEND must go out before the disconnect
	warnedLim  bool
	badIUs     int // unexpected IUs received (unexpectedIU)
	stats      chanStats
	inRunWait  bool
	prePosted  bool                        // the receive ring was posted by AcceptRecv
	loginTimer *time.Timer                 // bounds the wait for an IU-form login
	pool       map[int][]rdma.MemoryRegion // free data buffers by size class
	poolBytes  int                         // bytes in pool
	inUse      map[rdma.MemoryRegion]struct{}

	events   chan event
	closeReq chan closeRequest
	done     chan struct{}

	mu   sync.Mutex
	snap SessionInfo
}

// command is one SRP_CMD in progress.
type command struct {
	slot    int // receive slot holding the IU
	send    int // send context for the SRP_RSP
	tag     uint64
	lun     uint64
	attr    scsi.TaskAttr
	cdb     []byte
	state   cmdState
	aborted bool
	waiters []*tmfOp // TMFs waiting for this command to finish

	out, in     []srp.DirectBuf // data-out / data-in descriptors
	outLen      int             // data-out buffer length, bytes
	inLen       int             // data-in buffer length, bytes
	dataOut     []byte
	dataIn      []byte
	outMR, inMR rdma.MemoryRegion
	tableMR     rdma.MemoryRegion // external descriptor table being fetched
	tableFor    int               // descriptors expected in the external table
	tableOut    bool              // the table is the data-out list
	readsLeft   int
	readErr     bool
}

type cmdState uint8

const (
	cmdNew      cmdState = iota
	cmdNeedData          // waiting for RDMA READs (data-out or descriptor table)
	cmdExec              // in the SCSI core
	cmdRspSent           // SRP_RSP posted
)

// tmfOp is one SRP_TSK_MGMT in progress.
type tmfOp struct {
	slot    int
	send    int
	tm      srp.TaskMgmt
	waitFor int   // commands (in NEED_DATA) still to finish before the core is asked
	local   bool  // ABORT TASK of a command that never reached the core
	code    uint8 // SRP_RSP response code
	// targets are the channel's commands in the core the TMF may abort,
	// taken when it was handed to the core.
	targets []*command
}

type readOp struct {
	cmd *command
	wr  rdma.SendWR
}

// sendBatch is a group of send-queue work requests posted together; the last
// one is signaled and completes the batch.
type sendBatch struct {
	wrs  []rdma.SendWR
	rec  *wrRec
	cost int
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
	kind wrKind
	cost int // send queue slots freed by the completion
	cmd  *command
	tmf  *tmfOp
	send int // send context to free (-1 none)
}

// newChannel allocates the rings of a channel and, when pl is non-nil,
// attaches the channel to its I_T nexus.
func (p *Port) newChannel(pl *pendingLogin, remote net.Addr, log *slog.Logger) (*channel, error) {
	cfg := p.Config()
	c := &channel{
		port:     p,
		remote:   remote,
		cfg:      cfg,
		cmds:     map[uint64]*command{},
		wrs:      map[uint64]*wrRec{},
		pool:     map[int][]rdma.MemoryRegion{},
		inUse:    map[rdma.MemoryRegion]struct{}{},
		closeReq: make(chan closeRequest, 1),
		done:     make(chan struct{}),
		nRecv:    2*cfg.RQSize + extraRecv,
		nSend:    cfg.RQSize + nReserved,
		cred:     newCredits(cfg.RQSize),
	}
	c.events = make(chan event, c.nRecv+c.nSend+8)
	imm := srp.DefaultImmDataOffset // IU-form logins: align for ib_srp's offset
	if pl != nil {
		imm = pl.immOffset
		c.immOffset = pl.immOffset
		c.maxTI = int(pl.req.ReqITIULen)
		c.loginFlags = pl.req.ReqFlags
	}
	var err error
	p.mu.Lock()
	c.srq, c.ring = p.srq, p.srqRing
	p.mu.Unlock()
	if c.srq != nil {
		c.held = map[int]struct{}{}
	} else if c.ring, err = p.newRecvRing(c.nRecv, cfg.MaxReqSize, imm); err != nil {
		return nil, fmt.Errorf("receive ring: %w", err)
	}
	if c.sendMR, err = p.register(make([]byte, c.nSend*cfg.MaxRspSize), rdma.AccessLocalWrite); err != nil {
		c.freeRecvRing()
		return nil, fmt.Errorf("send ring: %w", err)
	}
	for i := cfg.RQSize - 1; i >= 0; i-- {
		c.freeSend = append(c.freeSend, i)
	}
	c.ctx, c.stop = context.WithCancel(context.Background())

	p.mu.Lock()
	var refuse error
	switch {
	case !p.enabled || p.closed:
		refuse = errors.New("port disabled")
	case pl == nil && len(p.channels) >= cfg.MaxTotalChannels:
		refuse = errTooManyChannels
	case pl != nil && p.channelsLocked(nil, pl.terminate) >= cfg.MaxTotalChannels:
		// Checked again here, where the channel joins the port: logins
		// racing past prepareLogin's check must not overshoot.
		refuse = errTooManyChannels
	}
	if refuse != nil {
		p.mu.Unlock()
		c.freeRecvRing()
		_ = c.sendMR.Deregister()
		c.stop()
		return nil, refuse
	}
	p.nextCh++
	c.id = p.nextCh
	p.channels[c] = struct{}{}
	if pl != nil {
		pl.attachLocked(c)
	}
	p.mu.Unlock()
	c.log = log.With("ch", c.id)
	return c, nil
}

// register is set by Port.Serve's device; see Port.device.
func (p *Port) register(buf []byte, acc rdma.Access) (rdma.MemoryRegion, error) {
	if p.dev == nil {
		return nil, errors.New("srp target: port has no device")
	}
	return p.dev.Register(buf, acc)
}

// freeRecvRing deregisters the channel's own receive ring (not the port's
// shared one).
func (c *channel) freeRecvRing() {
	if c.srq == nil && c.ring != nil {
		_ = c.ring.mr.Deregister()
	}
}

// freeRings releases the rings of a channel that never ran.
func (c *channel) freeRings() {
	c.freeRecvRing()
	_ = c.sendMR.Deregister()
	c.stop()
	c.port.mu.Lock()
	c.port.removeChannelLocked(c)
	if c.nx != nil {
		c.port.dropNexusLocked(c.nx)
	}
	c.port.mu.Unlock()
}

// qpConfig sizes the queue pair: ib_srpt asks for 4 RDMA READs each way
// (responder_resources, initiator_depth); we ask for 8 outstanding RDMA
// READs since write data is fetched by READ (the provider negotiates it
// down to the initiator's IRD).
func (c *channel) qpConfig() rdma.QPConfig {
	return rdma.QPConfig{SendDepth: c.cfg.SQSize, RecvDepth: c.nRecv, MaxSGE: 1, IRD: 4, ORD: 8, SRQ: c.srq}
}

// loginResponse encodes the SRP_LOGIN_RSP (ib_srpt values: max_it_iu_len =
// max_req_size, max_ti_iu_len = echo of req_it_iu_len, buf_fmt DIRECT |
// INDIRECT, req_lim_delta = receive ring size).
func (c *channel) loginResponse(tag uint64, flags srp.LoginRspFlags) []byte {
	b, _ := (&srp.LoginResponse{
		ReqLimDelta: uint32(c.cfg.RQSize),
		Tag:         tag,
		MaxITIULen:  uint32(c.cfg.MaxReqSize),
		MaxTIIULen:  uint32(c.maxTI),
		BufFmt:      srp.BufFmtDirect | srp.BufFmtIndirect,
		RspFlags:    flags,
	}).Marshal()
	return b
}

func (c *channel) closing() bool { return chanState(c.stateMirr.Load()) >= stateDisconnecting }

// requestClose asks the loop to close the channel, with an SRP_T_LOGOUT
// giving reason when kind is closeTLogout. Safe from any goroutine; only the
// first request counts.
func (c *channel) requestClose(kind closeKind, reason srp.TLogoutReason, why string) {
	select {
	case c.closeReq <- closeRequest{kind: kind, reason: reason, why: why}:
	default:
	}
}

func (c *channel) info() SessionInfo {
	c.mu.Lock()
	in := c.snap
	c.mu.Unlock()
	st := &c.stats
	in.Commands = st.commands.Load()
	in.ReadBytes = st.readBytes.Load()
	in.WriteBytes = st.writeBytes.Load()
	in.Errors = st.errors.Load()
	in.CheckConditions = st.checkConditions.Load()
	in.TMFs = st.tmfs.Load()
	in.MaxOutstanding = int(st.maxOutstanding.Load())
	return in
}

func (c *channel) recvSlot(i int) []byte { return c.ring.slot(i) }

func (c *channel) sendSlot(i int) []byte {
	off := i * c.cfg.MaxRspSize
	return c.sendMR.Bytes()[off : off+c.cfg.MaxRspSize : off+c.cfg.MaxRspSize]
}

// accept accepts req with reply private data pd. When the provider can, the
// whole receive ring is posted before the reply goes out, so the
// initiator's first IUs find buffers on transports without RNR retry.
func (c *channel) accept(ctx context.Context, req rdma.ConnRequest, pd []byte) (rdma.Conn, error) {
	if ra, ok := req.(rdma.RecvFirstAcceptor); ok && c.srq == nil {
		c.prePosted = true
		return ra.AcceptRecv(ctx, c.qpConfig(), pd, c.ring.wrs(allSlots(c.nRecv)...))
	}
	return req.Accept(ctx, c.qpConfig(), pd)
}

// postRecv posts receive slots again: to the channel's queue pair, or to
// the port's shared receive queue (even while the channel closes: the
// buffers belong to every channel), each held slot once.
func (c *channel) postRecv(slots ...int) {
	if c.srq != nil {
		k := 0
		for _, s := range slots {
			if _, ok := c.held[s]; ok {
				delete(c.held, s)
				slots[k] = s
				k++
			}
		}
		if k == 0 {
			return
		}
		if err := c.srq.PostRecv(c.ring.wrs(slots[:k]...)...); err != nil && !errors.Is(err, rdma.ErrClosed) {
			c.log.Error("posting receive buffers to the shared receive queue failed; they are lost", "n", k, "err", err)
		}
		return
	}
	if c.state >= stateDisconnecting {
		return
	}
	if err := c.conn.PostRecv(c.ring.wrs(slots...)...); err != nil {
		c.log.Warn("post receive failed", "err", err)
		c.closeNow("post receive failed")
	}
}

// run drives the channel until it is released. established is true when
// the login was in the connect request (the channel goes LIVE at once).
func (c *channel) run(conn rdma.Conn, established bool) {
	c.conn = conn
	caps := conn.Caps()
	c.sqAvail = caps.SendDepth
	if c.sqAvail <= 0 {
		c.sqAvail = c.cfg.SQSize
	}
	c.ordAvail = caps.ORD
	if c.ordAvail <= 0 {
		c.ordAvail = 1
	}
	if !c.prePosted && c.srq == nil {
		c.postRecv(allSlots(c.nRecv)...)
	}
	go c.poll()
	c.log.Info("channel connected", "imm", c.immOffset > 0, "established", established)
	if established {
		c.transition(evEstablished)
	} else {
		c.loginTimer = time.AfterFunc(c.cfg.LoginTimeout, func() {
			select {
			case c.events <- event{noLogin: true}:
			case <-c.done:
			}
		})
	}
	c.updateSnap()
	for c.state != stateDisconnected {
		select {
		case ev := <-c.events:
			c.handle(ev)
		case req := <-c.closeReq:
			c.onClose(req)
		case <-conn.Done():
			if c.state < stateDraining {
				c.log.Info("connection down", "err", conn.Err())
				c.transition(evConnDown)
			}
		}
		c.checkDrained()
		c.updateSnap()
	}
}

func (c *channel) poll() {
	buf := make([]rdma.Completion, 64)
	for {
		n, err := c.conn.Poll(context.Background(), buf)
		if n > 0 {
			comps := make([]rdma.Completion, n)
			copy(comps, buf[:n])
			c.events <- event{comps: comps}
		}
		if err != nil {
			c.events <- event{pollDone: true}
			return
		}
	}
}

func (c *channel) updateSnap() {
	c.stateMirr.Store(int32(c.state))
	c.mu.Lock()
	c.snap = SessionInfo{
		Channel:     c.id,
		Remote:      addrString(c.conn.RemoteAddr()),
		State:       c.state.String(),
		ReqLim:      c.cred.held,
		Outstanding: c.nCmds,
		Immediate:   c.immOffset > 0,
	}
	if c.nx != nil {
		c.snap.InitiatorPort = c.nx.key
	}
	c.mu.Unlock()
}

// transition feeds the pure state machine and carries out its effects.
func (c *channel) transition(ev chanEvent) {
	next, eff := step(c.state, ev)
	if next != c.state {
		c.log.Debug("channel state", "from", c.state, "to", next, "event", ev)
	}
	c.state = next
	c.stateMirr.Store(int32(next))
	if eff&effAbortCommands != 0 {
		c.stop()
		c.readQ = nil
		c.sendQ = nil
		// Parked IUs will never run; with a shared receive queue their
		// buffers go back to it now rather than at release.
		c.postRecv(c.wait...)
		c.wait = nil
	}
	if eff&effDisconnect != 0 {
		_ = c.conn.Close()
	}
	if eff&effRunWaitList != 0 {
		c.runWait()
	}
	if eff&effRelease != 0 {
		c.release()
	}
}

func (c *channel) checkDrained() {
	if c.state == stateDraining && c.pollDone && c.executing == 0 {
		c.transition(evDrained)
	}
}

// closeNow closes without a T_LOGOUT (transport failure, I_LOGOUT).
func (c *channel) closeNow(why string) {
	if c.state < stateDisconnecting {
		c.log.Info("closing channel", "why", why)
	}
	c.transition(evClose)
}

func (c *channel) onClose(req closeRequest) {
	if req.kind == closeTLogout {
		c.logout(req.reason, req.why)
		return
	}
	c.closeNow(req.why)
}

// logout sends SRP_T_LOGOUT with reason and closes the channel once the
// SEND completed or LogoutTimeout passed (T10 SRP r16a §6.6).
func (c *channel) logout(reason srp.TLogoutReason, why string) {
	if c.state != stateLive {
		c.closeNow(why)
		return
	}
	c.log.Info("logging out channel", "why", why, "reason", reason)
	c.transition(evLogout)
	c.pendClose = true
	c.sendTLogout(reason)
	c.armLogoutTimer()
}

// sendTLogout queues SRP_T_LOGOUT on the reserved send context; the channel
// closes when it completes (or the logout timer fires).
func (c *channel) sendTLogout(reason srp.TLogoutReason) {
	b := c.sendSlot(c.cfg.RQSize + sendLogout)
	iu, _ := (&srp.TLogout{SolNot: solBit(c.loginFlags&srp.LoginLOSOLNT != 0), Reason: reason}).AppendTo(b[:0])
	c.queueSend(c.cfg.RQSize+sendLogout, len(iu), c.loginFlags&srp.LoginLOSOLNT != 0, &wrRec{kind: wrLogout, send: -1}, nil)
}

func solBit(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// release frees every resource of a drained channel.
func (c *channel) release() {
	c.stop()
	if c.loginTimer != nil {
		c.loginTimer.Stop()
	}
	for mr := range c.inUse {
		c.port.releaseData(len(mr.Bytes()))
		_ = mr.Deregister()
	}
	for _, l := range c.pool {
		for _, mr := range l {
			_ = mr.Deregister()
		}
	}
	c.inUse, c.pool = nil, nil
	// Shared receive buffers still held (parked IUs, commands that never
	// finished) go back to the port's queue.
	if len(c.held) > 0 {
		slots := make([]int, 0, len(c.held))
		for s := range c.held {
			slots = append(slots, s)
		}
		c.postRecv(slots...)
	}
	c.freeRecvRing()
	_ = c.sendMR.Deregister()
	p := c.port
	p.mu.Lock()
	p.removeChannelLocked(c)
	if c.nx != nil {
		p.dropNexusLocked(c.nx)
	}
	last := p.closed && len(p.channels) == 0
	p.mu.Unlock()
	if last {
		p.releaseSRQ()
	}
	close(c.done)
	c.log.Info("channel released")
}

func (c *channel) handle(ev event) {
	switch {
	case ev.comps != nil:
		for i := range ev.comps {
			c.onCompletion(&ev.comps[i])
		}
		c.pump()
	case ev.pollDone:
		c.pollDone = true
		if c.state < stateDraining {
			c.transition(evConnDown)
		}
	case ev.cmd != nil:
		c.executing--
		c.onExecuted(ev.cmd, ev.res)
		c.pump()
	case ev.tmf != nil:
		c.executing--
		c.onTMFDone(ev.tmf)
		c.pump()
	case ev.noLogin:
		if c.state == stateConnecting {
			c.stats.errors.Add(1)
			c.log.Warn("no SRP_LOGIN_REQ within login_timeout; closing the connection", "login_timeout", c.cfg.LoginTimeout)
			c.closeNow("login timeout")
		}
	case ev.tick:
		if c.pendClose && c.state == stateDisconnecting {
			c.log.Debug("logout SEND not completed in time")
			c.transition(evLogoutSent)
		}
	}
}

func (c *channel) onCompletion(wc *rdma.Completion) {
	if wc.ID&wrSendBit == 0 {
		c.onRecv(wc)
		return
	}
	rec := c.wrs[wc.ID]
	if rec == nil {
		if wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed {
			c.stats.errors.Add(1)
			c.log.Warn("work request failed", "op", wc.Op, "status", wc.Status, "err", wc.Err)
			c.closeNow("work request failed")
		} else if wc.ID != wrSendBit {
			c.log.Warn("completion for unknown work request", "id", wc.ID, "op", wc.Op)
		}
		return
	}
	delete(c.wrs, wc.ID)
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
		c.onReadDone(rec.cmd, ok)
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

// onRecv handles one receive completion.
func (c *channel) onRecv(wc *rdma.Completion) {
	slot := int(wc.ID)
	if slot < 0 || slot >= c.ring.n {
		c.log.Error("receive completion for unknown slot", "slot", slot)
		return
	}
	if c.srq != nil {
		// The slot left the shared queue for this channel, whatever the
		// status: it is the channel's to post back.
		c.held[slot] = struct{}{}
		if wc.Status != rdma.StatusSuccess || c.state >= stateDisconnecting {
			c.postRecv(slot)
		}
		// An initiator within its credit never has more IUs in the target
		// than a private ring holds; one far beyond it would starve the
		// other channels of the shared buffers: cut it off.
		if len(c.held) > c.nRecv && c.state < stateDisconnecting {
			c.stats.errors.Add(1)
			c.log.Warn("initiator overran its credit on the shared receive queue; closing the channel", "held", len(c.held), "limit", c.nRecv)
			c.postRecv(slot)
			c.closeNow("credit overrun on the shared receive queue")
			return
		}
	}
	if wc.Status != rdma.StatusSuccess {
		if wc.Status != rdma.StatusFlushed {
			c.stats.errors.Add(1)
			c.log.Warn("receive failed", "status", wc.Status, "err", wc.Err)
			c.closeNow("receive failed")
		}
		return
	}
	if c.state >= stateDisconnecting {
		return
	}
	c.setRecvLen(slot, wc.ByteLen)
	if c.state == stateConnecting && c.nx == nil {
		c.onLoginIU(slot)
		return
	}
	c.wait = append(c.wait, slot)
	c.runWait()
}

// setRecvLen records the received length of a slot.
func (c *channel) setRecvLen(slot, n int) { c.ring.lens[slot] = n }

func (c *channel) iu(slot int) []byte {
	n := c.ring.lens[slot]
	b := c.recvSlot(slot)
	if n > len(b) {
		n = len(b)
	}
	return b[:n]
}

// runWait dispatches parked IUs in arrival order until one cannot run.
func (c *channel) runWait() {
	if c.inRunWait {
		return // the outer call continues with the next parked IU
	}
	c.inRunWait = true
	defer func() { c.inRunWait = false }()
	for len(c.wait) > 0 && c.state == stateLive {
		// Off the list while it runs: a close during dispatch drops (and
		// reposts) only the IUs still parked.
		slot := c.wait[0]
		c.wait = c.wait[1:]
		if !c.dispatch(slot) {
			c.wait = append([]int{slot}, c.wait...)
			return
		}
	}
	// Credit given back while dispatching (an IU that needs no response)
	// may need an SRP_CRED_REQ now that nothing is parked.
	c.maybeCredReq()
}

// dispatch starts one IU. It returns false when the IU must stay parked
// (no free send context for its response).
func (c *channel) dispatch(slot int) bool {
	b := c.iu(slot)
	if len(b) == 0 {
		c.unexpectedIU(slot, b)
		return true
	}
	op := srp.Opcode(b[0])
	switch op {
	case srp.OpCmd, srp.OpTskMgmt:
		if len(c.freeSend) == 0 {
			return false
		}
		if !c.cred.request() && !c.warnedLim {
			c.warnedLim = true
			c.log.Warn("initiator sent a request without credit (req_lim 0); processing it anyway", "op", op)
		}
		send := c.freeSend[len(c.freeSend)-1]
		c.freeSend = c.freeSend[:len(c.freeSend)-1]
		c.nCmds++
		if int64(c.nCmds) > c.stats.maxOutstanding.Load() {
			c.stats.maxOutstanding.Store(int64(c.nCmds))
		}
		if op == srp.OpCmd {
			c.stats.commands.Add(1)
			c.startCmd(slot, send, b)
		} else {
			c.stats.tmfs.Add(1)
			c.startTMF(slot, send, b)
		}
	case srp.OpILogout:
		c.log.Info("initiator logout")
		c.postRecv(slot)
		c.closeNow("SRP_I_LOGOUT")
	case srp.OpCredRsp, srp.OpAerRsp:
		if op == srp.OpCredRsp {
			c.credReqOut = false
		}
		c.postRecv(slot)
		c.maybeCredReq()
	default:
		c.unexpectedIU(slot, b)
	}
	return true
}

// unexpectedIU applies the policy for an IU a target port does not accept
// on a live channel: an unknown opcode, or a misdirected one (an IU the
// target itself sends, such as SRP_RSP or SRP_LOGIN_RSP, or a second
// SRP_LOGIN_REQ), or an empty SEND. The first one is logged and its credit handed back (the
// next SRP_RSP or an SRP_CRED_REQ carries it), so req_lim stays what the
// initiator expects; a second one on the same channel gets SRP_T_LOGOUT
// with reason 2 (invalid IU type code; T10 SRP r16a §6.6) and the channel
// closes. Linux ib_srpt (srpt_handle_new_iu) logs "received IU with
// unknown opcode", reposts the buffer and keeps the credit, forever.
func (c *channel) unexpectedIU(slot int, b []byte) {
	c.postRecv(slot)
	c.stats.errors.Add(1)
	c.badIUs++
	n, opcode, op := len(b), "none", "empty IU"
	if n > 0 {
		opcode, op = fmt.Sprintf("0x%02x", b[0]), srp.Opcode(b[0]).String()
	}
	if c.badIUs == 1 {
		// Only a request the initiator paid for is paid back: when it held
		// no credit it spent none.
		if c.cred.request() {
			c.cred.release()
		}
		c.log.Warn("unexpected IU ignored, credit returned; another one closes the channel", "opcode", opcode, "op", op, "len", n)
		c.maybeCredReq()
		return
	}
	c.log.Warn("second unexpected IU on the channel; logging it out", "opcode", opcode, "op", op, "len", n, "count", c.badIUs)
	c.logout(srp.TLogoutInvalidIUType, "unexpected IU "+opcode)
}

// freeSendCtx returns a response send context and replays parked IUs.
func (c *channel) freeSendCtx(i int) {
	if i >= 0 && i < c.cfg.RQSize {
		c.freeSend = append(c.freeSend, i)
		c.nCmds--
	}
}

// done with one command or TMF: repost its receive buffer and free its send
// context.
func (c *channel) freeCommand(cmd *command) {
	if c.cmds[cmd.tag] == cmd {
		delete(c.cmds, cmd.tag)
	}
	c.putBuf(cmd.outMR)
	c.putBuf(cmd.inMR)
	c.putBuf(cmd.tableMR)
	cmd.outMR, cmd.inMR, cmd.tableMR = nil, nil, nil
	c.postRecv(cmd.slot)
	c.freeSendCtx(cmd.send)
	for _, t := range cmd.waiters {
		t.waitFor--
		if t.waitFor == 0 {
			c.tmfReady(t)
		}
	}
	cmd.waiters = nil
	c.runWait()
	c.maybeCredReq()
}

func (c *channel) freeTMF(t *tmfOp) {
	c.postRecv(t.slot)
	c.freeSendCtx(t.send)
	c.runWait()
	c.maybeCredReq()
}

// maybeCredReq sends SRP_CRED_REQ when credit has accumulated and no
// request is outstanding whose response could carry it (T10 SRP r16a §6.10).
func (c *channel) maybeCredReq() {
	if c.state != stateLive || c.credReqOut || c.cred.owed == 0 || c.nCmds > 0 || len(c.wait) > 0 {
		return
	}
	c.credReqOut = true
	c.credTag++
	delta := c.cred.credReq()
	b := c.sendSlot(c.cfg.RQSize + sendCredReq)
	sol := c.loginFlags&srp.LoginCRSOLNT != 0
	iu, _ := (&srp.CredReq{SolNot: solBit(sol), ReqLimDelta: uint32(delta), Tag: c.credTag}).AppendTo(b[:0])
	c.queueSend(c.cfg.RQSize+sendCredReq, len(iu), sol, &wrRec{kind: wrCredReq, send: -1}, nil)
}

// queueSend queues a SEND of n bytes of send context i, preceded by the
// RDMA WRITEs in writes (unsignaled, so RC ordering places the data before
// the response), and pumps the send queue.
func (c *channel) queueSend(i, n int, solicited bool, rec *wrRec, writes []rdma.SendWR) {
	send := rdma.SendWR{
		Op:        rdma.OpSend,
		Local:     []rdma.SGE{{MR: c.sendMR, Offset: i * c.cfg.MaxRspSize, Length: n}},
		Signaled:  true,
		Solicited: solicited,
	}
	// Long write lists go in chunks whose last write is signaled, so that
	// no batch needs more than half the send queue.
	chunk := c.sqDepth() / 2
	if chunk < 1 {
		chunk = 1
	}
	for len(writes) >= chunk {
		w := writes[:chunk]
		writes = writes[chunk:]
		w[len(w)-1].Signaled = true
		c.sendQ = append(c.sendQ, &sendBatch{wrs: w, rec: &wrRec{kind: wrWrites, cost: len(w), send: -1}, cost: len(w)})
	}
	wrs := append(writes, send)
	rec.cost = len(wrs)
	c.sendQ = append(c.sendQ, &sendBatch{wrs: wrs, rec: rec, cost: len(wrs)})
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
	for len(c.readQ) > 0 && c.sqAvail > 0 && c.ordAvail > 0 && c.state == stateLive {
		r := c.readQ[0]
		if r.cmd.readErr {
			c.readQ = c.readQ[1:]
			continue
		}
		c.nextWR++
		id := wrSendBit | c.nextWR
		r.wr.ID = id
		if err := c.conn.PostSend(r.wr); err != nil {
			if errors.Is(err, rdma.ErrQueueFull) {
				break
			}
			c.log.Warn("post RDMA READ failed", "err", err)
			c.closeNow("post failed")
			return
		}
		c.readQ = c.readQ[1:]
		c.wrs[id] = &wrRec{kind: wrRead, cost: 1, cmd: r.cmd, send: -1}
		c.sqAvail--
		c.ordAvail--
	}
	for len(c.sendQ) > 0 && c.sqAvail >= c.sendQ[0].cost {
		b := c.sendQ[0]
		c.nextWR++
		id := wrSendBit | c.nextWR
		for i := range b.wrs {
			b.wrs[i].ID = wrSendBit // unsignaled: only an error or a flush completes it
		}
		b.wrs[len(b.wrs)-1].ID = id
		if err := c.conn.PostSend(b.wrs...); err != nil {
			if errors.Is(err, rdma.ErrQueueFull) {
				break
			}
			c.log.Warn("post send failed", "err", err)
			c.closeNow("post failed")
			return
		}
		c.sendQ = c.sendQ[1:]
		c.wrs[id] = b.rec
		c.sqAvail -= b.cost
	}
}

// getBuf returns a registered buffer of at least n bytes (local write
// access, for RDMA READ sinks and RDMA WRITE sources).
func (c *channel) getBuf(n int) (rdma.MemoryRegion, error) {
	class := bufClass(n)
	if !c.port.reserveData(class) {
		return nil, errDataMemory
	}
	if l := c.pool[class]; len(l) > 0 {
		mr := l[len(l)-1]
		c.pool[class] = l[:len(l)-1]
		c.poolBytes -= class
		c.inUse[mr] = struct{}{}
		return mr, nil
	}
	mr, err := c.port.register(make([]byte, class), rdma.AccessLocalWrite)
	if err != nil {
		c.port.releaseData(class)
		return nil, err
	}
	c.inUse[mr] = struct{}{}
	return mr, nil
}

// bufClass is the size class of a data buffer of n bytes: the power of two
// at least n, and at least 4096.
func bufClass(n int) int {
	class := 4096
	for class < n {
		class <<= 1
	}
	return class
}

// errDataMemory reports that a buffer would take the port's data buffers
// beyond Config.MaxDataMemory.
var errDataMemory = errors.New("port data memory budget (max_data_memory) exhausted")

// maxPoolBytes bounds the free data buffers a channel keeps for reuse, in
// bytes; within it the channel keeps up to one buffer per request-limit
// credit in each size class, so that at full queue depth no command
// allocates and registers a buffer.
const maxPoolBytes = 32 << 20

// putBuf gives back a buffer from getBuf and its charge against
// Config.MaxDataMemory.
func (c *channel) putBuf(mr rdma.MemoryRegion) {
	if mr == nil || c.inUse == nil {
		return
	}
	if _, ok := c.inUse[mr]; !ok {
		return
	}
	delete(c.inUse, mr)
	class := len(mr.Bytes())
	c.port.releaseData(class)
	if len(c.pool[class]) < c.cfg.RQSize && c.poolBytes+class <= maxPoolBytes {
		c.pool[class] = append(c.pool[class], mr)
		c.poolBytes += class
		return
	}
	_ = mr.Deregister()
}

// initiatorHex is the initiator port ID for logs.
func (c *channel) initiatorHex() string {
	if c.nx == nil {
		return ""
	}
	return hex.EncodeToString(c.nx.initiator[:])
}
