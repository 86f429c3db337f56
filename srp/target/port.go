package target

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// Core is the SCSI target core as the SRP target uses it: one session per
// I_T nexus.
type Core interface {
	// OpenSession opens the core's session of nexus n, which sees the
	// logical units through v (the ACL's LUN mapping and read-only LUNs).
	// An error refuses the login (LOGIN_REJ 0x10006).
	OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error)
}

// ErrPortClosed is returned by Serve after Close.
var ErrPortClosed = errors.New("srp target: port closed")

// Port is one SRP target port: its identity (the service GUID), its
// channels grouped by I_T nexus, and the login policy. A Port serves any
// number of rdma.Listeners (Serve) and is safe for concurrent use.
type Port struct {
	cfg  Config
	dev  rdma.Device
	core Core
	log  *slog.Logger
	id   srp.PortID

	mu       sync.Mutex
	enabled  bool
	closed   bool
	nexuses  map[string]*nexus
	channels map[*channel]struct{}
	nextCh   uint64
	wg       sync.WaitGroup // running channels

	// The shared receive queue and its buffers, with Config.UseSRQ; set
	// once by NewPort, cleared by Close.
	srq     rdma.SRQ
	srqRing *recvRing

	// dataMem is the bytes of command data buffers (and fetched
	// descriptor tables) the port's channels hold, by size class, and of
	// data-out being placed straight into a RAM LUN's memory; at most
	// cfg.MaxDataMemory.
	dataMem atomic.Int64
}

// nexus is one I_T nexus: the channels of one initiator port ID to this
// target port, and the SCSI core session they share.
type nexus struct {
	key       string // 32 hex digits of the initiator port ID
	initiator srp.PortID
	sess      scsi.Session
	view      accessView // the ACL view sess was opened with
	channels  []*channel
	// pending counts logins that reserved the nexus and have not joined
	// it yet: the nexus (and its SCSI session) must outlive its last
	// channel while one is on its way.
	pending int
}

// NewPort creates an enabled target port whose channels register their
// rings and data buffers on dev; serve it with listeners of dev. The
// configuration is validated; errors name the field.
func NewPort(cfg Config, dev rdma.Device, core Core) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if core == nil || dev == nil {
		return nil, errors.New("srp target: NewPort needs a device and a Core")
	}
	cfg = cfg.withDefaults()
	p := &Port{
		cfg:      cfg,
		dev:      dev,
		core:     core,
		log:      cfg.Logger.With("service_guid", fmt.Sprintf("%016x", cfg.ServiceGUID)),
		enabled:  true,
		nexuses:  map[string]*nexus{},
		channels: map[*channel]struct{}{},
	}
	binary.BigEndian.PutUint64(p.id[0:8], cfg.ServiceGUID)
	binary.BigEndian.PutUint64(p.id[8:16], cfg.ServiceGUID)
	if err := p.setupSRQ(); err != nil {
		return nil, err
	}
	return p, nil
}

// ID is the target port ID: id_ext || ioc_guid, both the service GUID.
func (p *Port) ID() srp.PortID { return p.id }

// Config returns the port's configuration with defaults filled in.
func (p *Port) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// SetEnabled enables or disables the port. Disabling sends SRP_T_LOGOUT on
// and closes every channel; logins are then rejected with 0x10001 (as
// ib_srpt's tpg enable attribute).
func (p *Port) SetEnabled(on bool) {
	p.mu.Lock()
	p.enabled = on
	var chs []*channel
	if !on {
		for c := range p.channels {
			chs = append(chs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range chs {
		c.requestClose(closeTLogout, srp.TLogoutNoReason, "port disabled")
	}
}

// SetAccess replaces the login policy, demo mode and the ACLs, while
// channels run; safe from any goroutine. Later logins use the new policy.
// Each logged-in channel is checked against it: one whose initiator (port
// ID and address) the new policy still admits with the same view (the
// same LUN map and read-only set its I_T nexus was opened with) keeps
// running undisturbed; any other gets SRP_T_LOGOUT (reason 0) and closes,
// so an initiator that lost its ACL loses access at once, and one whose
// mapping changed logs back in under the new mapping (as LIO's mapped LUN
// changes take effect for the initiator at once, never silently half-way).
func (p *Port) SetAccess(demo bool, acls []ACL) {
	p.mu.Lock()
	p.cfg.DemoMode = demo
	p.cfg.ACLs = append([]ACL(nil), acls...)
	var out []*channel
	for _, nx := range p.nexuses {
		for _, c := range nx.channels {
			if v, ok := p.viewLocked(nx.initiator, c.remoteAddr); !ok || !v.equal(nx.view) {
				out = append(out, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range out {
		c.requestClose(closeTLogout, srp.TLogoutNoReason, "access policy changed")
	}
}

// accessView is what an initiator sees through the port: the LUN map and
// read-only set of its ACL (both nil in demo mode).
type accessView struct {
	luns map[uint64]uint64 // nil: every LUN under the target's numbering
	ro   map[uint64]bool
}

func (v accessView) equal(o accessView) bool {
	if (v.luns == nil) != (o.luns == nil) || !maps.Equal(v.luns, o.luns) {
		return false
	}
	for n, on := range v.ro {
		if on != o.ro[n] {
			return false
		}
	}
	for n, on := range o.ro {
		if on != v.ro[n] {
			return false
		}
	}
	return true
}

// viewLocked returns the view the current policy gives initiator id
// connecting from remote, or false when it is not admitted. p.mu is held.
func (p *Port) viewLocked(id srp.PortID, remote net.Addr) (accessView, bool) {
	if p.cfg.DemoMode {
		return accessView{}, true
	}
	for i := range p.cfg.ACLs {
		if a := &p.cfg.ACLs[i]; a.Initiator.Matches(id, remote) {
			return accessView{luns: a.LUNs, ro: a.ReadOnly}, true
		}
	}
	return accessView{}, false
}

// Enabled reports whether logins are accepted.
func (p *Port) Enabled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enabled
}

// Serve accepts connect requests from l until ctx ends, l fails or the port
// is closed; each request is handled in its own goroutine. It returns the
// listener's error (ctx.Err() on cancellation). Serve does not close l.
func (p *Port) Serve(ctx context.Context, l rdma.Listener) error {
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return ErrPortClosed
			}
			return err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = req.Reject(rejectIU(0, srp.RejInsufficientResources))
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.HandleConnRequest(ctx, req)
		}()
	}
}

// Close disables the port, logs out every channel (SRP_T_LOGOUT), and waits
// until every channel has drained and released its resources or ctx ends
// (returning ctx.Err()). The shared receive queue, with UseSRQ, is
// destroyed and its buffers deregistered once the last channel is gone.
func (p *Port) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.SetEnabled(false)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Channels handled outside Serve may still run; then the shared
	// receive queue goes with the last of them (channel.release).
	p.releaseSRQ()
	return nil
}

// SessionInfo describes one channel for the admin API. The counters run
// from the channel's login; they are read without stopping the channel, so
// two of them may be one event apart.
type SessionInfo struct {
	Channel       uint64 // channel number, unique within the port
	InitiatorPort string // 32 hex digits
	Remote        string // transport address of the initiator
	State         string // channel state (LIVE, ...)
	ReqLim        int    // credits the initiator holds (req_lim), in IUs
	Outstanding   int    // SRP_CMDs and SRP_TSK_MGMTs in progress
	Immediate     bool   // immediate data negotiated

	Commands        uint64 // SRP_CMDs received
	ReadBytes       uint64 // data-in bytes sent to the initiator (RDMA WRITE)
	WriteBytes      uint64 // data-out bytes taken from the initiator (RDMA READ or immediate data)
	Errors          uint64 // unexpected or malformed IUs and failed work requests
	CheckConditions uint64 // SRP_RSPs sent with status CHECK CONDITION
	TMFs            uint64 // SRP_TSK_MGMTs received
	MaxOutstanding  int    // most SRP_CMDs and SRP_TSK_MGMTs in progress at once
}

// DataMemory returns the bytes of command data buffers the port's channels
// hold now, counted by buffer size class (a power of two, at least 4096
// bytes per buffer); it never exceeds Config.MaxDataMemory. Idle buffers
// kept for reuse are not counted.
func (p *Port) DataMemory() int64 { return p.dataMem.Load() }

// reserveData charges n bytes against Config.MaxDataMemory; false (and
// nothing charged) when they do not fit. The charge is made only if it
// fits (compare and swap), so that DataMemory never reads a charge that is
// about to be taken back.
func (p *Port) reserveData(n int) bool {
	for {
		cur := p.dataMem.Load()
		if cur+int64(n) > int64(p.cfg.MaxDataMemory) {
			return false
		}
		if p.dataMem.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// releaseData returns n bytes charged by reserveData.
func (p *Port) releaseData(n int) { p.dataMem.Add(-int64(n)) }

// Sessions lists the port's channels.
func (p *Port) Sessions() []SessionInfo {
	p.mu.Lock()
	chs := make([]*channel, 0, len(p.channels))
	for c := range p.channels {
		chs = append(chs, c)
	}
	p.mu.Unlock()
	out := make([]SessionInfo, 0, len(chs))
	for _, c := range chs {
		if in := c.info(); in.Channel != 0 { // 0: not yet running
			out = append(out, in)
		}
	}
	return out
}

// RemoveSession logs out (SRP_T_LOGOUT) and closes every channel of the
// initiator port ID given as 32 hex digits, or the single channel whose
// number is given in decimal. It reports whether anything matched.
func (p *Port) RemoveSession(name string) bool {
	p.mu.Lock()
	var chs []*channel
	for c := range p.channels {
		if c.nx != nil && c.nx.key == name || fmt.Sprint(c.id) == name {
			chs = append(chs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range chs {
		c.requestClose(closeTLogout, srp.TLogoutNoReason, "removed by admin")
	}
	return len(chs) > 0
}

func rejectIU(tag uint64, reason srp.RejectReason) []byte {
	b, _ := (&srp.LoginReject{Reason: reason, Tag: tag, BufFmt: srp.BufFmtDirect | srp.BufFmtIndirect}).Marshal()
	return b
}

// HandleConnRequest decides one connect request: it validates the login in
// the private data (the 56-byte RDMA/CM form, or a 64-byte SRP_LOGIN_REQ),
// rejects it with an SRP_LOGIN_REJ, or accepts it with an SRP_LOGIN_RSP and
// runs the new channel until it is released. With empty private data the
// connection is accepted and the login is expected as the first IU.
func (p *Port) HandleConnRequest(ctx context.Context, req rdma.ConnRequest) {
	pd := req.PrivateData()
	log := p.log.With("remote", addrString(req.RemoteAddr()))
	if len(pd) == 0 {
		p.acceptIUForm(ctx, req, log)
		return
	}
	var lr *srp.LoginRequest
	var err error
	// Linux ib_srp sends the 56-byte srp_login_req_rdma through RDMA/CM; an
	// InfiniBand CM REQ carries the 64-byte SRP_LOGIN_REQ (opcode 0 first)
	// in 92 bytes of private data.
	if len(pd) >= srp.LoginReqSize && pd[0] == byte(srp.OpLoginReq) {
		lr, err = srp.UnmarshalLoginRequest(pd)
	} else {
		lr, err = srp.UnmarshalLoginRequestRDMA(pd)
	}
	if err != nil {
		log.Warn("login private data undecodable", "err", err, "len", len(pd))
		_ = req.Reject(rejectIU(0, srp.RejUnableEstablishChannel))
		return
	}
	pl, reason := p.prepareLogin(lr, req.RemoteAddr(), nil, log)
	if reason != 0 {
		log.Info("login rejected", p.rejectAttrs(lr, reason)...)
		_ = req.Reject(rejectIU(lr.Tag, reason))
		return
	}
	c, err := p.newChannel(pl, req.RemoteAddr(), log)
	if errors.Is(err, errTooManyChannels) {
		p.abandon(pl)
		log.Warn("login rejected", "initiator", hex.EncodeToString(lr.InitiatorPortID[:]), "err", err, "max_total_channels", p.cfg.MaxTotalChannels)
		_ = req.Reject(rejectIU(lr.Tag, srp.RejInsufficientResources))
		return
	}
	if err != nil {
		p.abandon(pl)
		log.Error("channel setup failed", "err", err)
		_ = req.Reject(rejectIU(lr.Tag, srp.RejInsufficientResources))
		return
	}
	rsp := c.loginResponse(lr.Tag, pl.rspFlags)
	conn, err := c.accept(ctx, req, rsp)
	if err != nil {
		p.abandon(pl)
		c.freeRings()
		log.Warn("accept failed", "err", err)
		return
	}
	p.closeTerminated(pl)
	c.run(conn, true)
}

// acceptIUForm accepts a connection whose login will arrive as the first
// IU (a 64-byte SRP_LOGIN_REQ in a SEND).
func (p *Port) acceptIUForm(ctx context.Context, req rdma.ConnRequest, log *slog.Logger) {
	if !p.Enabled() {
		_ = req.Reject(rejectIU(0, srp.RejInsufficientResources))
		return
	}
	p.mu.Lock()
	n := len(p.channels)
	p.mu.Unlock()
	if n >= p.cfg.MaxTotalChannels {
		log.Warn("connection refused: the port holds its most channels (max_total_channels)", "channels", n, "max_total_channels", p.cfg.MaxTotalChannels)
		_ = req.Reject(rejectIU(0, srp.RejInsufficientResources))
		return
	}
	c, err := p.newChannel(nil, req.RemoteAddr(), log)
	if errors.Is(err, errTooManyChannels) {
		log.Warn("connection refused", "err", err, "max_total_channels", p.cfg.MaxTotalChannels)
		_ = req.Reject(rejectIU(0, srp.RejInsufficientResources))
		return
	}
	if err != nil {
		log.Error("channel setup failed", "err", err)
		_ = req.Reject(rejectIU(0, srp.RejInsufficientResources))
		return
	}
	conn, err := c.accept(ctx, req, nil)
	if err != nil {
		c.freeRings()
		log.Warn("accept failed", "err", err)
		return
	}
	c.run(conn, false)
}

// pendingLogin is a validated login that holds a place in its nexus.
type pendingLogin struct {
	req        *srp.LoginRequest
	nx         *nexus
	ch         *channel // set once the channel exists
	terminate  []*channel
	rspFlags   srp.LoginRspFlags
	immOffset  int // 0 when immediate data is not negotiated
	newSession bool
	reserved   bool // holds a place in nx.pending
}

// attachLocked joins channel c to the nexus the login reserved. p.mu is
// held.
func (pl *pendingLogin) attachLocked(c *channel) {
	c.nx = pl.nx
	pl.nx.channels = append(pl.nx.channels, c)
	pl.ch = c
	pl.unreserveLocked()
}

// unreserveLocked gives up the login's reservation of its nexus. p.mu is
// held.
func (pl *pendingLogin) unreserveLocked() {
	if pl.reserved {
		pl.nx.pending--
		pl.reserved = false
	}
}

// prepareLogin validates a login request in the order ib_srpt does
// (srpt_cm_req_recv) plus the buffer-format and multichannel checks, and
// reserves the channel's place in its I_T nexus. self is the IU-form
// connection the login arrived on (nil for a login in the connect
// request). It returns the reject reason, or 0 and the prepared login.
func (p *Port) prepareLogin(lr *srp.LoginRequest, remote net.Addr, self *channel, log *slog.Logger) (*pendingLogin, srp.RejectReason) {
	if lr.ReqITIULen < srp.LoginReqSize || lr.ReqITIULen > uint32(p.cfg.MaxReqSize) {
		return nil, srp.RejReqITIULenTooLarge
	}
	p.mu.Lock()
	enabled := p.enabled && !p.closed
	p.mu.Unlock()
	if !enabled {
		return nil, srp.RejInsufficientResources
	}
	if lr.TargetPortID != p.id {
		return nil, srp.RejUnableAssociateChannel
	}
	if lr.ReqBufFmt&^(srp.BufFmtDirect|srp.BufFmtIndirect) != 0 {
		return nil, srp.RejUnsupportedDescFmt
	}
	multi := lr.ReqFlags&srp.MultiChanMask == srp.MultiChanMulti
	if lr.ReqFlags&srp.MultiChanMask > srp.MultiChanMulti || multi && p.cfg.NoMultichannel {
		return nil, srp.RejMultiChannelUnsupported
	}
	p.mu.Lock()
	view, admitted := p.viewLocked(lr.InitiatorPortID, remote)
	p.mu.Unlock()
	if !admitted {
		log.Info("no ACL for initiator", "initiator", hex.EncodeToString(lr.InitiatorPortID[:]))
		return nil, srp.RejChannelLimitReached
	}

	pl := &pendingLogin{req: lr}
	if lr.ReqFlags&srp.LoginImmRequested != 0 && !p.cfg.NoImmediateData &&
		lr.ImmDataOffset >= srp.CmdSize && uint32(lr.ImmDataOffset) < lr.ReqITIULen {
		pl.immOffset = int(lr.ImmDataOffset)
		pl.rspFlags |= srp.LoginRspImmSupp
	}

	key := hex.EncodeToString(lr.InitiatorPortID[:])
	p.mu.Lock()
	defer p.mu.Unlock()
	nx := p.nexuses[key]
	if nx == nil {
		nexusID := scsi.Nexus{
			InitiatorPortID:    key,
			TargetPortID:       hex.EncodeToString(p.id[:]),
			RelativeTargetPort: p.cfg.RelativePort,
			TargetPortName:     p.cfg.TargetPortName,
			TransportID:        transportID(lr.InitiatorPortID),
		}
		sess, err := p.core.OpenSession(nexusID, scsi.View{LUNs: view.luns, ReadOnly: view.ro})
		if err != nil {
			log.Warn("SCSI session refused", "initiator", key, "err", err)
			return nil, srp.RejChannelLimitReached
		}
		nx = &nexus{key: key, initiator: lr.InitiatorPortID, sess: sess, view: view}
		p.nexuses[key] = nx
		pl.newSession = true
	} else if !nx.view.equal(view) {
		// The policy changed under this nexus (SetAccess is logging its
		// channels out); it must not gain a channel with the old view.
		log.Info("login refused while the I_T nexus is logged out after an access change", "initiator", key)
		return nil, srp.RejInsufficientResources
	}
	live := 0
	for _, c := range nx.channels {
		if !c.closing() {
			live++
		}
	}
	if multi {
		pl.rspFlags |= srp.LoginRspMaintained
		if live >= p.cfg.MaxChannels {
			p.dropNexusLocked(nx)
			return nil, srp.RejChannelLimitReached
		}
	} else {
		for _, c := range nx.channels {
			if !c.closing() {
				pl.terminate = append(pl.terminate, c)
			}
		}
		if len(pl.terminate) > 0 {
			pl.rspFlags |= srp.LoginRspTerminated
		}
	}
	if total := p.channelsLocked(self, pl.terminate); total >= p.cfg.MaxTotalChannels {
		log.Warn("login rejected: the port holds its most channels (max_total_channels)", "initiator", key, "channels", total, "max_total_channels", p.cfg.MaxTotalChannels)
		p.dropNexusLocked(nx)
		return nil, srp.RejInsufficientResources
	}
	pl.nx = nx
	nx.pending++
	pl.reserved = true
	return pl, 0
}

// rejectAttrs are the log attributes of a login rejected for reason: the
// initiator, the reason and, for an IU length out of range, the length
// asked for and the port's maximum (what the initiator's max_it_iu_size
// must not exceed).
func (p *Port) rejectAttrs(lr *srp.LoginRequest, reason srp.RejectReason) []any {
	a := []any{"initiator", hex.EncodeToString(lr.InitiatorPortID[:]), "reason", reason}
	if reason == srp.RejReqITIULenTooLarge {
		a = append(a, "req_it_iu_len", lr.ReqITIULen, "max_it_iu_len", p.cfg.MaxReqSize)
	}
	return a
}

// channelsLocked counts the channels a login competes with for
// MaxTotalChannels: every channel holding rings (IU-form connections still
// awaiting their login included), except self (the IU-form connection the
// login came on, already counted) and those the login replaces (about to
// go). p.mu is held.
func (p *Port) channelsLocked(self *channel, replaced []*channel) int {
	n := 0
	for c := range p.channels {
		if c != self && !slices.Contains(replaced, c) {
			n++
		}
	}
	return n
}

// errTooManyChannels: the port holds MaxTotalChannels channels.
var errTooManyChannels = errors.New("the port holds its most channels (max_total_channels)")

// abandon undoes prepareLogin after a failed accept.
func (p *Port) abandon(pl *pendingLogin) {
	if pl == nil || pl.nx == nil {
		return
	}
	p.mu.Lock()
	pl.unreserveLocked()
	if pl.ch != nil {
		p.removeChannelLocked(pl.ch)
	}
	p.dropNexusLocked(pl.nx)
	p.mu.Unlock()
}

// closeTerminated closes the channels a SINGLE login replaced.
func (p *Port) closeTerminated(pl *pendingLogin) {
	for _, c := range pl.terminate {
		c.requestClose(closeTLogout, srp.TLogoutMultiChannelAction, "replaced by SINGLE login of the same I_T nexus")
	}
}

// dropNexusLocked closes the nexus's SCSI session when no channel uses it
// and no login is about to join it.
func (p *Port) dropNexusLocked(nx *nexus) {
	if len(nx.channels) > 0 || nx.pending > 0 || p.nexuses[nx.key] != nx {
		return
	}
	delete(p.nexuses, nx.key)
	go nx.sess.Close()
}

func (p *Port) removeChannelLocked(c *channel) {
	delete(p.channels, c)
	if nx := c.nx; nx != nil {
		for i, o := range nx.channels {
			if o == c {
				nx.channels = append(nx.channels[:i], nx.channels[i+1:]...)
				break
			}
		}
	}
}

// transportID is the SPC-4 §7.6.4.5 SRP TransportID: protocol identifier 4
// in byte 0 (format code 0), the initiator port identifier in bytes 8-23.
func transportID(id srp.PortID) []byte {
	b := make([]byte, 24)
	b[0] = 0x04
	copy(b[8:], id[:])
	return b
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
