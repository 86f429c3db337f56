package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

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
// rings, its credits and commands. All mutable state is owned by whoever
// holds turn: the loop goroutine (run) while it handles an event, or the
// provider's goroutine running the completion hook (onCQHook); other
// goroutines talk to it through events and closeReq.
type channel struct {
	port *Port
	id   uint64
	cfg  Config
	log  *slog.Logger
	nx   *nexus // nil until the login of an IU-form connection; set under port.mu
	// remoteAddr is the initiator's transport address, for address ACLs;
	// remote is its text, for the session list.
	remoteAddr net.Addr
	remote     string

	conn rdma.Conn
	// cqn is conn as an rdma.CQNotifier, whose completions the loop takes
	// itself into compBuf; nil when a goroutine polls (compFree holds its
	// two buffers).
	cqn      rdma.CQNotifier
	compBuf  []rdma.Completion
	compFree chan []rdma.Completion
	// local is the device as an rdma.LocalRegioner, nil when its memory
	// must be registered: then data-in is always copied into a buffer.
	local rdma.LocalRegioner
	// regions is the device as an rdma.RegionCache when it is not a
	// LocalRegioner (verbs): data-in is then sent from the backstore's
	// memory through cached registrations of it, or copied when those
	// fail.
	regions rdma.RegionCache
	// maxSGE is the SGEs per work request the queue pair grants (0:
	// unknown; viewMaxSGE then bounds the views' RDMA WRITEs alone).
	maxSGE int
	// bell is conn as an rdma.Doorbeller: work is posted deferred and the
	// loop rings once per turn (rang: something was posted since).
	bell rdma.Doorbeller
	rang bool
	// turn is held while the channel's state is handled; wake asks the
	// loop goroutine for a turn (the hook found it busy, or the channel
	// left LIVE during a hook's turn).
	turn sync.Mutex
	wake chan struct{}
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
	state     chanState
	stateMirr atomic.Int32
	cred      credits
	wait      fifo[int]     // receive slots parked, in arrival order
	rwrs      []rdma.RecvWR // scratch for posting receives
	cmds      map[uint64]*command
	// unsent: commands whose responses were dropped unposted when the
	// channel left LIVE (transition); their views are released at release.
	unsent     []*command
	nCmds      int // commands and TMFs holding a send context
	executing  int // goroutines in Execute or TaskManagement
	sqAvail    int
	ordAvail   int
	readQ      fifo[readOp]
	sendQ      fifo[sendBatch]
	wrRing     []wrRec // records of the signaled send queue work requests
	wrFree     []int32 // free indexes of wrRing
	nextWR     uint64
	ctxWR      []rdma.SendWR // per send context: room for its SEND
	ctxSGE     []rdma.SGE    // per send context: the SEND's buffer
	cmdFree    []*command    // commands for reuse
	pollDone   bool
	credReqOut bool
	credTag    uint64
	pendClose  bool // a T_LOGOUT (or LOGIN_REJ) SEND must go out before the disconnect
	warnedLim  bool
	badIUs     int // unexpected IUs received (unexpectedIU)
	stats      chanStats
	inRunWait  bool
	prePosted  bool                        // the receive ring was posted by AcceptRecv
	loginTimer Timer                       // bounds the wait for an IU-form login
	pool       map[int][]rdma.MemoryRegion // free data buffers by size class
	poolBytes  int                         // bytes in pool
	inUse      map[rdma.MemoryRegion]struct{}

	events   chan event
	closeReq chan closeRequest
	done     chan struct{}

	mu   sync.Mutex
	snap SessionInfo
}

// newChannel allocates the rings of a channel and, when pl is non-nil,
// attaches the channel to its I_T nexus.
func (p *Port) newChannel(pl *pendingLogin, remote net.Addr, log *slog.Logger) (*channel, error) {
	cfg := p.Config()
	c := &channel{
		port:       p,
		remoteAddr: remote,
		cfg:        cfg,
		cmds:       map[uint64]*command{},
		pool:       map[int][]rdma.MemoryRegion{},
		inUse:      map[rdma.MemoryRegion]struct{}{},
		closeReq:   make(chan closeRequest, 1),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		nRecv:      2*cfg.RQSize + extraRecv,
		nSend:      cfg.RQSize + nReserved,
		cred:       newCredits(cfg.RQSize),
	}
	c.local, _ = p.dev.(rdma.LocalRegioner)
	if c.local == nil {
		c.regions, _ = p.dev.(rdma.RegionCache)
	}
	c.events = make(chan event, c.nRecv+c.nSend+8)
	c.initWRRing(cfg.SQSize)
	c.ctxWR = make([]rdma.SendWR, c.nSend)
	c.ctxSGE = make([]rdma.SGE, c.nSend)
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

// initWRRing sizes the records of signaled work requests for a send queue
// of n slots.
func (c *channel) initWRRing(n int) {
	c.wrRing = make([]wrRec, n)
	c.wrFree = c.wrFree[:0]
	for i := n - 1; i >= 0; i-- {
		c.wrFree = append(c.wrFree, int32(i))
	}
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
//
// An RDMA WRITE of data-in sent from a backstore's memory (viewInMin) has
// one SGE per piece of it, up to viewMaxSGE; any other work request one.
func (c *channel) qpConfig() rdma.QPConfig {
	sge := 1
	if c.local != nil {
		sge = viewMaxSGE
	}
	return rdma.QPConfig{SendDepth: c.cfg.SQSize, RecvDepth: c.nRecv, MaxSGE: sge, IRD: 4, ORD: 8, SRQ: c.srq}
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
	c.maxSGE = caps.MaxSGE
	if c.sqAvail != len(c.wrRing) {
		c.initWRRing(c.sqAvail)
	}
	if !c.prePosted && c.srq == nil {
		c.postRecv(allSlots(c.nRecv)...)
	}
	// Completions: taken by the loop itself when the provider can notify
	// (no goroutine hand-off per completion), else by a polling goroutine.
	var notify <-chan struct{}
	if cqn, ok := conn.(rdma.CQNotifier); ok {
		c.cqn = cqn
		notify = cqn.Notify()
		c.compBuf = make([]rdma.Completion, 64)
	} else {
		c.startPoller()
	}
	if b, ok := conn.(rdma.Doorbeller); ok {
		c.bell = b
	}
	c.remote = addrString(conn.RemoteAddr())
	c.log.Info("channel connected", "imm", c.immOffset > 0, "established", established)
	if established {
		c.transition(evEstablished)
	} else {
		c.loginTimer = c.cfg.Clock.AfterFunc(c.cfg.LoginTimeout, func() {
			select {
			case c.events <- event{noLogin: true}:
			case <-c.done:
			}
		})
	}
	c.updateSnap()
	if h, ok := conn.(rdma.CQHook); ok && c.cqn != nil {
		// From here on the provider's goroutines handle completions
		// themselves when the loop is idle (onCQHook).
		c.turn.Lock()
		h.SetCQHook(c.onCQHook)
		c.pollNow()
		c.endTurn()
		c.turn.Unlock()
	}
	down := conn.Done()
	// c.state belongs to whoever holds the turn (the hook may change it
	// while the loop waits), so the loop reads it only with the turn held.
	c.turn.Lock()
	stop := c.state == stateDisconnected
	c.turn.Unlock()
	for !stop {
		select {
		case <-notify:
			c.turn.Lock()
			c.stats.wakes.Add(1)
			c.pollNow()
		case <-c.wake:
			c.turn.Lock()
			if c.cqn != nil {
				c.pollNow()
			}
		case ev := <-c.events:
			c.turn.Lock()
			c.handle(ev)
		case req := <-c.closeReq:
			c.turn.Lock()
			c.onClose(req)
		case <-down:
			c.turn.Lock()
			down = nil
			c.connDown(conn.Err())
			if c.cqn != nil {
				// The flushed work still completes: a goroutine waits for
				// it (and for ErrClosed) now that notifications may stop.
				notify = nil
				c.pollNow()
				if !c.pollDone {
					c.startPoller()
				}
				c.cqn = nil
			}
		}
		c.endTurn()
		stop = c.state == stateDisconnected
		c.turn.Unlock()
	}
}

// endTurn finishes a turn of the channel: rings the doorbell for what the
// turn posted, takes the completions that ringing produced, and notes
// state changes.
func (c *channel) endTurn() {
	if c.rang {
		c.doorbell()
		if c.cqn != nil {
			c.pollNow()
			c.doorbell()
		}
	}
	c.checkDrained()
	c.updateSnap()
}

// onCQHook is the completion hook (rdma.CQHook): it runs on the
// provider's goroutine that queued completions, and handles them there
// when no other goroutine has the turn; otherwise, or once the channel has
// left LIVE, the loop goroutine takes over.
func (c *channel) onCQHook() {
	c.stats.wakes.Add(1)
	if !c.turn.TryLock() {
		c.wakeLoop()
		return
	}
	if c.cqn == nil || c.state != stateLive {
		c.turn.Unlock()
		c.wakeLoop()
		return
	}
	c.pollNow()
	c.endTurn()
	live := c.state == stateLive
	c.turn.Unlock()
	if !live {
		c.wakeLoop()
	}
}

func (c *channel) wakeLoop() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// connDown notes that the connection went down for err. Only a loss the
// target did not start is logged at Info: an initiator's SRP_I_LOGOUT or
// a logout the target sent ends in the same disconnect.
func (c *channel) connDown(err error) {
	if c.state >= stateDraining {
		return
	}
	switch {
	case c.state >= stateDisconnecting:
		c.log.Debug("connection closed", "err", err)
	case errors.Is(err, rdma.ErrClosed):
		c.log.Info("initiator closed the connection")
	default:
		c.log.Info("connection lost", "err", err)
	}
	c.transition(evConnDown)
}

// pollNow takes and handles every completion available (rdma.CQNotifier).
func (c *channel) pollNow() {
	for !c.pollDone {
		n, err := c.cqn.TryPoll(c.compBuf)
		if n > 0 {
			c.onCompletions(c.compBuf[:n])
		}
		if err != nil {
			c.pollDone = true
			if c.state < stateDraining {
				c.transition(evConnDown)
			}
			return
		}
		if n < len(c.compBuf) {
			return
		}
	}
}

// onCompletions handles the completions one poll found (at least one) and
// posts the work they queued.
func (c *channel) onCompletions(comps []rdma.Completion) {
	c.stats.polls.Add(1)
	c.stats.completions.Add(uint64(len(comps)))
	for i := range comps {
		c.onCompletion(&comps[i])
	}
	c.pump()
}

// startPoller runs a goroutine that waits in Poll and hands completions
// to the loop, in one of two buffers the loop gives back once it has
// handled them.
func (c *channel) startPoller() {
	c.compFree = make(chan []rdma.Completion, 2)
	c.compFree <- make([]rdma.Completion, 64)
	c.compFree <- make([]rdma.Completion, 64)
	go c.poll()
}

func (c *channel) poll() {
	for {
		buf := <-c.compFree
		n, err := c.conn.Poll(context.Background(), buf)
		if n > 0 {
			c.events <- event{comps: buf[:n]}
		} else {
			c.compFree <- buf
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
		Remote:      c.remote,
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
	var fetchEnded []*command
	if eff&effAbortCommands != 0 {
		c.stop()
		// Commands in the core will get no response: their tags must not
		// hold up the nexus's next channel (a reconnect reuses them).
		for _, cmd := range c.cmds {
			if (cmd.state == cmdExec || cmd.state == cmdExecData) && c.nx != nil {
				c.nx.sess.Abandon(&cmd.sc)
			}
		}
		// A command placing data-out into the backstore's memory ends in
		// the core once none of its READs can still place any: those
		// never posted are counted off here, the posted ones as they
		// flush.
		for _, r := range c.readQ.buf[c.readQ.head:] {
			if r.cmd.gen == r.gen && r.cmd.state == cmdExecData {
				r.cmd.readErr = true
				r.cmd.readsLeft--
				if r.cmd.readsLeft == 0 {
					fetchEnded = append(fetchEnded, r.cmd)
				}
			}
		}
		c.readQ.reset()
		// Responses never posted get no completion: what their commands
		// hold of the core (data-in views, which keep ORDERED tasks of
		// the logical unit dormant) is given back at release, when no
		// RDMA WRITE posted before them can still read it.
		for _, b := range c.sendQ.buf[c.sendQ.head:] {
			if b.rec.kind == wrRsp {
				c.unsent = append(c.unsent, b.rec.cmd)
			}
		}
		c.sendQ.reset()
		// Parked IUs will never run; with a shared receive queue their
		// buffers go back to it now rather than at release.
		c.postRecv(c.wait.buf[c.wait.head:]...)
		c.wait.reset()
	}
	for _, cmd := range fetchEnded {
		c.afterReads(cmd)
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
	for _, cmd := range c.unsent {
		cmd.releaseRegions()
		cmd.sc.ReleaseViews()
	}
	c.unsent = nil
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
	c.log.Info("channel released", "commands", c.stats.commands.Load(), "wakes", c.stats.wakes.Load(),
		"polls", c.stats.polls.Load(), "completions", c.stats.completions.Load(), "doorbells", c.stats.doorbells.Load())
}

func (c *channel) handle(ev event) {
	switch {
	case ev.comps != nil:
		c.onCompletions(ev.comps)
		c.compFree <- ev.comps[:cap(ev.comps)]
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
