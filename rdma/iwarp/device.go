package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// RTRType selects the ready-to-receive message of RFC 6581 peer-to-peer mode.
type RTRType uint8

const (
	// RTRWrite is a zero-length RDMA Write (STag 0, TO 0).
	RTRWrite RTRType = iota + 1
	// RTRRead is a zero-length RDMA Read Request, answered by a zero-length
	// RDMA Read Response.
	RTRRead
)

// Config configures a Device. Zero fields take the defaults given.
type Config struct {
	// Logger receives connection events (nothing on the data path at Info).
	// Nil discards.
	Logger *slog.Logger
	// MPARevision is the MPA revision requested and accepted at most: 2
	// (RFC 6581 enhanced, the default, as Linux siw) or 1 (RFC 5044).
	MPARevision int
	// CRC asks for the MPA CRC32c (C bit). The CRC is used when either side
	// asks for it.
	CRC bool
	// PeerToPeer enables RFC 6581 peer-to-peer mode: as initiator, offer the
	// RTR types in RTR (default both); as responder, accept a peer-to-peer
	// request by choosing one of the offered types (Write preferred).
	PeerToPeer bool
	// RTR is the RTR types offered as initiator in peer-to-peer mode; 0 offers
	// both Write and Read.
	RTR RTRType
	// HandshakeTimeout bounds the MPA exchange (and the RTR), per connection.
	// Default 10 s.
	HandshakeTimeout time.Duration
	// MaxFPDUPayload is the most payload bytes one FPDU carries (the MULPDU
	// minus headers). Larger messages are segmented. Default 65472: FPDUs
	// near the 64 KiB MPA limit cut per-FPDU overhead on TCP (GSO/loopback);
	// receivers accept any ULPDU up to 65535 bytes (RFC 5044 §4.1).
	MaxFPDUPayload int
	// AcceptBacklog is how many handshaken connect requests may wait for
	// Listener.Accept. Default 64.
	AcceptBacklog int
	// CompleteOnTransmit completes SEND and RDMA WRITE work as soon as its
	// FPDUs are written to TCP, as Linux siw does. By default completion
	// waits for proof that the peer processed the message: the response to
	// a later RDMA Read, or to a zero-length Read Request (a completion
	// fence) the writer adds after the last message of a batch. Then a
	// completion means the data is placed at the peer, and a Terminate is
	// reported on the work request that caused it
	// (StatusRemoteAccess, ...). Fences need ORD > 0.
	CompleteOnTransmit bool
	// Defaults for QPConfig fields left zero.
	SendDepth, RecvDepth, MaxSGE, IRD, ORD int
}

// Defaults for Config.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxFPDUPayload   = 65472
	DefaultAcceptBacklog    = 64
	DefaultSendDepth        = 256
	DefaultRecvDepth        = 256
	DefaultMaxSGE           = 32
	DefaultIRD              = 16
	DefaultORD              = 16
	// minFPDUPayload keeps segmentation sane for a tiny configured MULPDU.
	minFPDUPayload = 64
)

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MPARevision == 0 {
		c.MPARevision = 2
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxFPDUPayload <= 0 {
		c.MaxFPDUPayload = DefaultMaxFPDUPayload
	}
	if c.MaxFPDUPayload < minFPDUPayload {
		c.MaxFPDUPayload = minFPDUPayload
	}
	if c.MaxFPDUPayload > maxULPDU-readReqHdrLen {
		c.MaxFPDUPayload = maxULPDU - readReqHdrLen
	}
	c.MaxFPDUPayload &^= 3
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = DefaultAcceptBacklog
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.SendDepth, DefaultSendDepth)
	def(&c.RecvDepth, DefaultRecvDepth)
	def(&c.MaxSGE, DefaultMaxSGE)
	def(&c.IRD, DefaultIRD)
	def(&c.ORD, DefaultORD)
	return c
}

// Device is an iWARP protection domain: regions registered on it are
// addressable by every connection dialled or accepted through it.
type Device struct {
	cfg Config
	log *slog.Logger

	mrMu     sync.RWMutex
	mrs      map[uint32]*memoryRegion // by STag
	nextIdx  uint32                   // STag index (upper 24 bits)
	nextAddr uint64                   // next tagged offset base

	mu        sync.Mutex
	closed    bool
	listeners map[*listener]struct{}
	conns     map[*conn]struct{}
}

// NewDevice returns a Device with cfg (see Config for defaults).
func NewDevice(cfg Config) *Device {
	cfg = cfg.withDefaults()
	return &Device{
		cfg: cfg, log: cfg.Logger,
		mrs: make(map[uint32]*memoryRegion), nextAddr: 1 << 20,
		listeners: make(map[*listener]struct{}), conns: make(map[*conn]struct{}),
	}
}

var _ rdma.Device = (*Device)(nil)

// Name returns "iwarp".
func (d *Device) Name() string { return "iwarp" }

// MaxPrivateData is 508 bytes with MPA revision 2 (512 minus the RFC 6581
// IRD/ORD word), 512 with revision 1 (RFC 5044 §7.1).
func (d *Device) MaxPrivateData() int {
	if d.cfg.MPARevision >= 2 {
		return MPAMaxPrivateData - mpaV2WordLen
	}
	return MPAMaxPrivateData
}

// Close closes every listener and connection made through the device.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	ls := make([]*listener, 0, len(d.listeners))
	for l := range d.listeners {
		ls = append(ls, l)
	}
	cs := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	return nil
}

func (d *Device) addConn(c *conn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return rdma.ErrClosed
	}
	d.conns[c] = struct{}{}
	return nil
}

func (d *Device) removeConn(c *conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

// memoryRegion is a registered buffer. Its STag (RKey = LKey) is a 24-bit
// index and an 8-bit key; its tagged offsets start at addr.
type memoryRegion struct {
	dev    *Device
	buf    []byte
	addr   uint64
	stag   uint32
	access rdma.Access
	state  atomic.Int32 // mrValid, mrInvalidated, mrDeregistered
}

const (
	mrValid = iota
	mrInvalidated
	mrDeregistered
)

func (m *memoryRegion) Bytes() []byte       { return m.buf }
func (m *memoryRegion) Addr() uint64        { return m.addr }
func (m *memoryRegion) LKey() uint32        { return m.stag }
func (m *memoryRegion) RKey() uint32        { return m.stag }
func (m *memoryRegion) Access() rdma.Access { return m.access }
func (m *memoryRegion) valid() bool         { return m.state.Load() == mrValid }
func (m *memoryRegion) String() string {
	return fmt.Sprintf("MR(stag %#x, %d bytes)", m.stag, len(m.buf))
}
func (m *memoryRegion) usable() bool { return m.state.Load() != mrDeregistered }

// Deregister invalidates the STag; later remote accesses get a Terminate.
func (m *memoryRegion) Deregister() error {
	if m.state.Swap(mrDeregistered) == mrDeregistered {
		return rdma.ErrDeregistered
	}
	m.dev.mrMu.Lock()
	delete(m.dev.mrs, m.stag)
	m.dev.mrMu.Unlock()
	return nil
}

// Register registers buf. RemoteWrite requires LocalWrite (as in verbs);
// a closed device returns rdma.ErrClosed. The STag (LKey = RKey) is a 24-bit
// index and an 8-bit key, never 0; Addr is a tagged offset base unique on
// the device (regions get disjoint, page-aligned ranges), not a process
// address.
func (d *Device) Register(buf []byte, access rdma.Access) (rdma.MemoryRegion, error) {
	if access&rdma.AccessRemoteWrite != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("iwarp: register: remote write needs local write: %w", rdma.ErrInvalidWR)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, rdma.ErrClosed
	}
	d.mrMu.Lock()
	defer d.mrMu.Unlock()
	var stag uint32
	for {
		d.nextIdx++
		if d.nextIdx >= 1<<24 {
			d.nextIdx = 1
		}
		// The key byte varies with the index so a stale STag rarely
		// aliases a new region after wrap.
		stag = d.nextIdx<<8 | uint32(d.nextIdx*0x9d)&0xff
		if _, used := d.mrs[stag]; !used && stag != 0 {
			break
		}
	}
	m := &memoryRegion{dev: d, buf: buf, addr: d.nextAddr, stag: stag, access: access}
	// Regions get disjoint tagged-offset ranges with a 4 KiB gap.
	d.nextAddr += (uint64(len(buf)) + 2*4096 - 1) &^ 4095
	d.mrs[stag] = m
	return m, nil
}

// LocalRegion implements rdma.LocalRegioner: a region with STag 0, which
// no remote access finds (the STag table never holds 0), and local write
// rights only. As an RDMA Read's sink it is named on the wire by
// localSinkSTag.
func (d *Device) LocalRegion(buf []byte) rdma.MemoryRegion {
	return &memoryRegion{dev: d, buf: buf, access: rdma.AccessLocalWrite}
}

// localSinkSTag is the sink STag of a Read Request whose sink is a local
// region: index 0, which Register never gives, so no remote access finds
// it either; not 0, which a peer might take for a reserved STag.
const localSinkSTag = 0x01

// lookup returns the valid region named by stag, or nil.
func (d *Device) lookup(stag uint32) *memoryRegion {
	d.mrMu.RLock()
	m := d.mrs[stag]
	d.mrMu.RUnlock()
	if m == nil || !m.valid() {
		return nil
	}
	return m
}

// invalidate performs the remote invalidation of a Send with Invalidate
// (RFC 5040 §5.3): the region's STag stops naming it for remote access.
func (d *Device) invalidate(stag uint32) bool {
	m := d.lookup(stag)
	if m == nil {
		return false
	}
	return m.state.CompareAndSwap(mrValid, mrInvalidated)
}

// errHandshake wraps every MPA exchange failure other than a reject.
var errHandshake = errors.New("iwarp: MPA handshake failed")

// handshakeDeadline is the earlier of ctx's deadline and now+timeout.
func handshakeDeadline(ctx context.Context, timeout time.Duration) time.Time {
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	return dl
}

// ctxError returns ctx's error in place of err when the handshake failed
// because ctx ended (its deadline doubles as the socket deadline, which may
// fire a moment before ctx itself reports it).
func ctxError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// readMPAFrame reads one MPA request or reply from r, refusing a PD_Length
// over the RFC limit before reading it.
func readMPAFrame(r io.Reader, wantReply bool) (mpaFrame, error) {
	h, err := readMPAHeader(r, wantReply)
	if err != nil {
		return mpaFrame{}, err
	}
	f, n, err := parseMPAHeader(h, wantReply)
	if err != nil {
		return f, err
	}
	b := make([]byte, mpaHeaderLen+n)
	copy(b, h[:])
	if _, err := io.ReadFull(r, b[mpaHeaderLen:]); err != nil {
		return f, fmt.Errorf("%w: reading %d bytes of private data: %w", errHandshake, n, err)
	}
	return parseMPAFrame(b, wantReply)
}

// readMPAHeader reads the 20-byte fixed part of an MPA frame. It fails as
// soon as the bytes received cannot begin the frame's key, with a
// *notMPAError (ErrMPAFrame): a peer speaking another protocol is named at
// once, not after the handshake timeout. A read that fails before the 20
// bytes are in is an *mpaReadError holding the bytes that did arrive.
func readMPAHeader(r io.Reader, wantReply bool) ([]byte, error) {
	key := mpaKeyRequest
	if wantReply {
		key = mpaKeyReply
	}
	h := make([]byte, mpaHeaderLen)
	n := 0
	for n < len(h) {
		m, err := r.Read(h[n:])
		n += m
		if k := min(n, len(key)); string(h[:k]) != key[:k] {
			return nil, &notMPAError{got: h[:n], reply: wantReply}
		}
		if err != nil && n < len(h) {
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, &mpaReadError{got: h[:n], err: err}
		}
	}
	return h, nil
}

// notMPAError is a peer that sent bytes no MPA frame begins with.
type notMPAError struct {
	got   []byte // what arrived, at most a header's worth
	reply bool   // an MPA reply was expected, else a request
}

func (e *notMPAError) Error() string {
	what := "request"
	if e.reply {
		what = "reply"
	}
	return fmt.Sprintf("%v: received %s, not an MPA %s frame", ErrMPAFrame, describePeerBytes(e.got), what)
}

func (e *notMPAError) Unwrap() error { return ErrMPAFrame }

// mpaReadError is a read error before a whole MPA header arrived.
type mpaReadError struct {
	got []byte
	err error
}

func (e *mpaReadError) Error() string {
	if len(e.got) == 0 {
		return fmt.Sprintf("%v: reading MPA header: %v", errHandshake, e.err)
	}
	return fmt.Sprintf("%v: reading MPA header: %v after %d bytes %q", errHandshake, e.err, len(e.got), e.got)
}

func (e *mpaReadError) Unwrap() []error { return []error{errHandshake, e.err} }

// peerError is a failed MPA exchange as Dial reports it: the peer's
// address and what happened, in words for the user; it wraps errHandshake
// and the cause (os.ErrDeadlineExceeded, io.EOF, ErrMPAFrame ...).
type peerError struct {
	msg   string
	cause error
}

func (e *peerError) Error() string   { return e.msg }
func (e *peerError) Unwrap() []error { return []error{errHandshake, e.cause} }

// explainReplyError says why no MPA reply came from addr in waited: the
// peer sent something else, stayed silent, or closed the connection.
// Other errors are returned as they are.
func explainReplyError(err error, addr string, waited time.Duration) error {
	var ne *notMPAError
	if errors.As(err, &ne) {
		return &peerError{fmt.Sprintf("iwarp: %s sent %s, not an MPA reply frame: not an iWARP target", addr, describePeerBytes(ne.got)), err}
	}
	var re *mpaReadError
	if !errors.As(err, &re) {
		return err
	}
	got := ""
	if len(re.got) > 0 {
		got = fmt.Sprintf(": only %d bytes of one arrived, %q", len(re.got), re.got)
	}
	switch {
	case errors.Is(re.err, os.ErrDeadlineExceeded):
		return &peerError{fmt.Sprintf("iwarp: no MPA reply from %s within %v%s (is it an iWARP SRP target?)", addr, waited.Round(100*time.Millisecond), got), re.err}
	case errors.Is(re.err, io.EOF), errors.Is(re.err, io.ErrUnexpectedEOF):
		return &peerError{fmt.Sprintf("iwarp: %s closed the connection without an MPA reply%s (is it an iWARP SRP target?)", addr, got), re.err}
	case errors.Is(re.err, syscall.ECONNRESET):
		// A peer that closes with the MPA request unread resets the
		// connection instead of ending it.
		return &peerError{fmt.Sprintf("iwarp: %s reset the connection without an MPA reply%s (is it an iWARP SRP target?)", addr, got), re.err}
	}
	return &peerError{fmt.Sprintf("iwarp: MPA handshake with %s failed: reading the MPA reply: %v%s", addr, re.err, got), re.err}
}

func clampCount(v int) uint16 {
	if v > mpaV2CountMask {
		return mpaV2CountMask
	}
	if v < 0 {
		return 0
	}
	return uint16(v)
}

// Dial connects to addr ("host:port"), sends an MPA request carrying
// privateData and waits for the reply (bounded by ctx and
// Config.HandshakeTimeout). A reply with the R bit returns a
// *rdma.RejectError with the peer's private data.
func (d *Device) Dial(ctx context.Context, addr string, qcfg rdma.QPConfig, privateData []byte) (rdma.Conn, []byte, error) {
	if len(privateData) > d.MaxPrivateData() {
		return nil, nil, rdma.ErrPrivateDataTooLong
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, nil, rdma.ErrClosed
	}
	qcfg = d.qpDefaults(qcfg)
	s, err := d.srqOf(qcfg)
	if err != nil {
		return nil, nil, err
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		if s != nil {
			s.detach()
		}
		return nil, nil, fmt.Errorf("iwarp: dial %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c, reply, err := d.clientHandshake(ctx, nc, addr, qcfg, privateData)
	if err != nil {
		nc.Close()
		if s != nil {
			s.detach()
		}
		return nil, nil, err
	}
	return c, reply, nil
}

func (d *Device) clientHandshake(ctx context.Context, nc net.Conn, addr string, qcfg rdma.QPConfig, privateData []byte) (*conn, []byte, error) {
	// Stop the handshake when ctx ends.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	start := time.Now()
	nc.SetDeadline(handshakeDeadline(ctx, d.cfg.HandshakeTimeout))

	p := d.mpaParams(qcfg)
	req := mpaRequest(p, privateData)
	if _, err := nc.Write(req.marshal()); err != nil {
		return nil, nil, fmt.Errorf("%w: sending MPA request: %v", errHandshake, err)
	}
	rep, err := readMPAFrame(nc, true)
	if err != nil {
		return nil, nil, ctxError(ctx, explainReplyError(err, addr, time.Since(start)))
	}
	o, pd, err := mpaInitiatorOutcome(p, req, rep)
	if err != nil {
		return nil, nil, err
	}
	rtr := o.RTR
	c := newConn(d, nc, qcfg, o)
	if rtr != 0 {
		if err := c.sendRTR(rtr); err != nil {
			return nil, nil, err
		}
	}
	nc.SetDeadline(time.Time{})
	if err := d.addConn(c); err != nil {
		return nil, nil, err
	}
	c.start()
	d.log.Debug("iwarp: connected", "local", nc.LocalAddr(), "remote", nc.RemoteAddr(),
		"rev", rep.Revision, "crc", c.crc, "ird", o.Caps.IRD, "ord", o.Caps.ORD, "rtr", rtr)
	return c, append([]byte(nil), pd...), nil
}

func (d *Device) qpDefaults(q rdma.QPConfig) rdma.QPConfig {
	def := func(v *int, dv int) {
		if *v <= 0 {
			*v = dv
		}
	}
	def(&q.SendDepth, d.cfg.SendDepth)
	def(&q.RecvDepth, d.cfg.RecvDepth)
	def(&q.MaxSGE, d.cfg.MaxSGE)
	def(&q.IRD, d.cfg.IRD)
	def(&q.ORD, d.cfg.ORD)
	q.IRD = int(clampCount(q.IRD))
	q.ORD = int(clampCount(q.ORD))
	return q
}
