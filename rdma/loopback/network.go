package loopback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// MaxPrivateData is the most bytes of private data a loopback connect
// request, reply or reject carries: the private data size of an InfiniBand CM
// REP message.
const MaxPrivateData = 196

// Queue-pair defaults applied to zero QPConfig fields, and the largest values
// accepted (a larger value fails Dial or Accept).
const (
	DefaultSendDepth = 256
	DefaultRecvDepth = 256
	DefaultMaxSGE    = 16
	DefaultIRD       = 16 // RDMA READs the peer may have outstanding against us
	DefaultORD       = 16 // RDMA READs we may have outstanding

	MaxDepth = 1 << 16 // SendDepth and RecvDepth limit, work requests
	MaxSGE   = 256     // SGEs per work request
	MaxRD    = 1 << 10 // IRD and ORD limit
)

var (
	// ErrPeerClosed is a connection's Err after the peer closed it. It
	// matches rdma.ErrClosed under errors.Is.
	ErrPeerClosed = fmt.Errorf("loopback: peer disconnected: %w", rdma.ErrClosed)
	// ErrConnectionLost is a connection's Err after Conn.Drop or a Fault with
	// Drop set.
	ErrConnectionLost = errors.New("loopback: connection lost")
	// ErrRequestCanceled is returned by ConnRequest.Accept and Reject when
	// the dialer gave up (its context ended or its device closed) or the
	// request was already answered.
	ErrRequestCanceled = errors.New("loopback: connect request no longer pending")
)

// Addr is a loopback address (a listener's name, or a dialer's generated
// "device:N" name).
type Addr string

// Network returns "loopback".
func (Addr) Network() string { return "loopback" }

// String returns the address itself.
func (a Addr) String() string { return string(a) }

// Network is a namespace of addresses. Devices from one Network can connect to
// each other. The zero value is not usable; call NewNetwork. Safe for
// concurrent use.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*listener
	nextPort  uint64
}

// NewNetwork returns an empty namespace.
func NewNetwork() *Network {
	return &Network{listeners: make(map[string]*listener)}
}

// Option configures a Device.
type Option func(*Device)

// WithLogger sets the device's logger (connection events and QP errors at
// Debug level). The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(d *Device) {
		if l != nil {
			d.log = l
		}
	}
}

// WithRNRTimeout bounds how long a SEND waits for the peer to post a receive
// before it completes with rdma.StatusRNRRetryExceeded (and the QP goes to
// error). Zero or negative waits for ever, the default (IB rnr_retry 7).
func WithRNRTimeout(d time.Duration) Option {
	return func(dev *Device) { dev.rnrTimeout = d }
}

// WithCompleteOnTransmit makes SEND and RDMA WRITE complete as iWARP
// providers such as siw complete them, on transmission: one the responder
// refuses (bad key, bounds or rights, too long for the receive buffer, bad
// key to invalidate) still completes successfully at the requester (no
// completion if unsignaled), and the refusal shows only as the connection's
// teardown with an *rdma.TerminateError. RNR timeouts and RDMA READ errors
// keep their error completions.
func WithCompleteOnTransmit() Option {
	return func(d *Device) { d.completeOnTransmit = true }
}

// WithAsyncExecution makes the device's connections execute work on one
// goroutine per connection instead of inside PostSend and PostRecv: data is
// read and placed after the post returns, as real hardware does, so the race
// detector flags upper-layer code that touches a buffer before its work
// request completes. Ordering and completion rules are unchanged; the
// interleaving with the caller is no longer deterministic. A connection is
// asynchronous when either end's device has this option; its goroutine exits
// when the connection goes down (Close, Device.Close or an error).
func WithAsyncExecution() Option {
	return func(d *Device) { d.async = true }
}

// WithUncheckedORD makes PostSend on the device's connections skip the ORD
// check, so a test can drive a peer's responder-side IRD check. Everything
// else about ORD is unchanged.
func WithUncheckedORD() Option {
	return func(d *Device) { d.uncheckedORD = true }
}

// Device is a loopback protection domain implementing rdma.Device. Safe for
// concurrent use.
type Device struct {
	net                *Network
	name               string
	log                *slog.Logger
	rnrTimeout         time.Duration
	uncheckedORD       bool
	completeOnTransmit bool
	async              bool

	mu        sync.Mutex // guards the fields below; taken after a pair's mutex, never before
	closed    bool
	closedCh  chan struct{}
	nextMR    uint32
	nextIOVA  uint64
	rkeys     map[uint32]*memoryRegion
	listeners map[*listener]struct{}
	conns     map[*Conn]struct{}
	faults    []*faultState
}

var _ rdma.Device = (*Device)(nil)

// NewDevice returns a new device on the network. name appears in Name and in
// the local addresses of connections dialled from the device.
func (n *Network) NewDevice(name string, opts ...Option) *Device {
	d := &Device{
		net:       n,
		name:      name,
		log:       slog.New(slog.DiscardHandler),
		closedCh:  make(chan struct{}),
		nextIOVA:  iovaBase,
		rkeys:     make(map[uint32]*memoryRegion),
		listeners: make(map[*listener]struct{}),
		conns:     make(map[*Conn]struct{}),
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Name returns "loopback:" followed by the device name ("loopback" when the
// name is empty).
func (d *Device) Name() string {
	if d.name == "" {
		return "loopback"
	}
	return "loopback:" + d.name
}

// MaxPrivateData returns MaxPrivateData (196 bytes).
func (d *Device) MaxPrivateData() int { return MaxPrivateData }

// Close closes the device's listeners and connections (each connection goes
// down on both sides as if closed locally). Later Register, Listen and Dial
// fail with rdma.ErrClosed. Registered regions are left alone (Deregister
// still works). Safe to call more than once.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.closedCh)
	// Closed outside d.mu: closing takes them off the device.
	ls, cs := slices.Collect(maps.Keys(d.listeners)), slices.Collect(maps.Keys(d.conns))
	d.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	d.log.Debug("loopback device closed", "dev", d.name)
	return nil
}

func (d *Device) addConn(c *Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *Device) removeConn(c *Conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

// Listen starts listening on addr, any string; "" picks a fresh unique
// address (see the listener's Addr). It fails with an error wrapping
// syscall.EADDRINUSE when the address is taken, rdma.ErrClosed when the
// device is closed.
func (d *Device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &listener{dev: d, wake: make(chan struct{}, 1), closedCh: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, rdma.ErrClosed
	}
	d.listeners[l] = struct{}{}
	d.mu.Unlock()

	n := d.net
	n.mu.Lock()
	if addr == "" {
		n.nextPort++
		addr = fmt.Sprintf("listener:%d", n.nextPort)
	}
	if _, ok := n.listeners[addr]; ok {
		n.mu.Unlock()
		d.mu.Lock()
		delete(d.listeners, l)
		d.mu.Unlock()
		return nil, fmt.Errorf("loopback: listen %q: %w", addr, syscall.EADDRINUSE)
	}
	l.addr = Addr(addr)
	n.listeners[addr] = l
	n.mu.Unlock()
	d.log.Debug("loopback listening", "dev", d.name, "addr", addr)
	return l, nil
}

// Dial connects to the listener at addr, carrying privateData (copied) in the
// connect request, and waits until the request is accepted or rejected, ctx
// ends, or the device closes. On acceptance it returns the connection and the
// reply's private data. Errors: rdma.ErrPrivateDataTooLong, an
// *rdma.RejectError on rejection, an error wrapping syscall.ECONNREFUSED when
// nobody listens on addr or the listener closes first, ctx.Err(),
// rdma.ErrClosed, or a configuration error for out-of-range cfg fields.
func (d *Device) Dial(ctx context.Context, addr string, cfg rdma.QPConfig, privateData []byte) (rdma.Conn, []byte, error) {
	if len(privateData) > MaxPrivateData {
		return nil, nil, rdma.ErrPrivateDataTooLong
	}
	cfg, err := normalize(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := d.checkSRQ(cfg); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, nil, rdma.ErrClosed
	}
	n := d.net
	n.mu.Lock()
	l := n.listeners[addr]
	n.nextPort++
	local := Addr(fmt.Sprintf("%s:%d", d.name, n.nextPort))
	n.mu.Unlock()
	refused := fmt.Errorf("loopback: dial %q: %w", addr, syscall.ECONNREFUSED)
	if l == nil {
		return nil, nil, refused
	}
	req := &connRequest{
		l:       l,
		dialer:  d,
		cfg:     cfg,
		pd:      append([]byte(nil), privateData...),
		local:   l.addr,
		remote:  local,
		decided: make(chan struct{}),
	}
	if !l.enqueue(req) {
		return nil, nil, refused
	}
	select {
	case <-req.decided:
	case <-ctx.Done():
		if req.cancel() {
			return nil, nil, ctx.Err()
		}
	case <-d.closedCh:
		if req.cancel() {
			return nil, nil, rdma.ErrClosed
		}
	}
	<-req.decided
	switch {
	case req.refused:
		return nil, nil, refused
	case req.rejected:
		return nil, nil, &rdma.RejectError{PrivateData: req.replyPD, Reason: "loopback reject"}
	}
	return req.dialConn, req.replyPD, nil
}

// checkSRQ checks that cfg.SRQ, if set, is an SRQ of d.
func (d *Device) checkSRQ(cfg rdma.QPConfig) error {
	if cfg.SRQ == nil {
		return nil
	}
	if s, ok := cfg.SRQ.(*srq); !ok || s == nil || s.dev != d {
		return fmt.Errorf("loopback: QPConfig.SRQ is not a shared receive queue of device %s", d.Name())
	}
	return nil
}

func normalize(cfg rdma.QPConfig) (rdma.QPConfig, error) {
	fields := []struct {
		name     string
		v        *int
		def, max int
	}{
		{"SendDepth", &cfg.SendDepth, DefaultSendDepth, MaxDepth},
		{"RecvDepth", &cfg.RecvDepth, DefaultRecvDepth, MaxDepth},
		{"MaxSGE", &cfg.MaxSGE, DefaultMaxSGE, MaxSGE},
		{"IRD", &cfg.IRD, DefaultIRD, MaxRD},
		{"ORD", &cfg.ORD, DefaultORD, MaxRD},
	}
	for _, f := range fields {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0 || *f.v > f.max:
			return cfg, fmt.Errorf("loopback: QPConfig.%s %d out of range 0..%d", f.name, *f.v, f.max)
		}
	}
	return cfg, nil
}

// listener implements rdma.Listener.
type listener struct {
	dev      *Device
	addr     Addr
	wake     chan struct{} // capacity 1: a request arrived
	closedCh chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	queue  []*connRequest
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) enqueue(r *connRequest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.queue = append(l.queue, r)
	l.signal()
	return true
}

func (l *listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Accept returns the next pending connect request, skipping those whose
// dialer gave up. Several goroutines may Accept at once. Errors:
// rdma.ErrClosed after Close, ctx.Err().
func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, rdma.ErrClosed
		}
		for len(l.queue) > 0 {
			r := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			if r.pending() {
				if len(l.queue) > 0 {
					l.signal() // another Accept may take the next one
				}
				l.mu.Unlock()
				return r, nil
			}
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.closedCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops listening: queued requests are refused (the dialers see
// ECONNREFUSED) and Accept returns rdma.ErrClosed. Requests already returned
// by Accept stay answerable.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closedCh)
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, r := range q {
		r.refuse()
	}
	n := l.dev.net
	n.mu.Lock()
	if n.listeners[string(l.addr)] == l {
		delete(n.listeners, string(l.addr))
	}
	n.mu.Unlock()
	l.dev.mu.Lock()
	delete(l.dev.listeners, l)
	l.dev.mu.Unlock()
	return nil
}

// connRequest implements rdma.ConnRequest.
type connRequest struct {
	l      *listener
	dialer *Device
	cfg    rdma.QPConfig // dialer's, normalized
	pd     []byte
	local  Addr // the listener's address
	remote Addr // the dialer's address

	mu       sync.Mutex
	state    int // reqPending, reqCanceled, reqDone
	decided  chan struct{}
	refused  bool
	rejected bool
	replyPD  []byte
	dialConn *Conn
}

const (
	reqPending = iota
	reqCanceled
	reqDone
)

func (r *connRequest) PrivateData() []byte { return r.pd }

func (r *connRequest) LocalAddr() net.Addr { return r.local }

func (r *connRequest) RemoteAddr() net.Addr { return r.remote }

func (r *connRequest) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state == reqPending
}

// cancel withdraws a pending request; false if it was already decided.
func (r *connRequest) cancel() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != reqPending {
		return false
	}
	r.state = reqCanceled
	return true
}

func (r *connRequest) refuse() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != reqPending {
		return
	}
	r.state = reqDone
	r.refused = true
	close(r.decided)
}

// Reject refuses the request with privateData (copied); the dialer gets an
// *rdma.RejectError. Errors: rdma.ErrPrivateDataTooLong (the request stays
// pending), ErrRequestCanceled.
func (r *connRequest) Reject(privateData []byte) error {
	if len(privateData) > MaxPrivateData {
		return rdma.ErrPrivateDataTooLong
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != reqPending {
		return ErrRequestCanceled
	}
	r.state = reqDone
	r.rejected = true
	r.replyPD = append([]byte{}, privateData...)
	close(r.decided)
	return nil
}

// Accept creates the connection with cfg and replies with privateData
// (copied). Errors: rdma.ErrPrivateDataTooLong, a configuration error or
// rdma.ErrClosed for a closed cfg.SRQ (the request stays pending), ctx.Err(),
// ErrRequestCanceled, rdma.ErrClosed when either device has closed (the
// dialer is then refused).
func (r *connRequest) Accept(ctx context.Context, cfg rdma.QPConfig, privateData []byte) (rdma.Conn, error) {
	if len(privateData) > MaxPrivateData {
		return nil, rdma.ErrPrivateDataTooLong
	}
	cfg, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.l.dev.checkSRQ(cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != reqPending {
		return nil, ErrRequestCanceled
	}
	dc, ac := newPair(r.dialer, r.l.dev, r.cfg, cfg, r.remote, r.local)
	var attached []*Conn
	for _, c := range []*Conn{dc, ac} {
		if c.srq == nil {
			continue
		}
		if !c.srq.attach(c) {
			for _, a := range attached {
				a.srq.detach(a, a.peer())
			}
			if c == dc {
				// The dialer's SRQ closed: nothing the acceptor can change.
				r.state = reqDone
				r.refused = true
				close(r.decided)
			}
			return nil, fmt.Errorf("loopback: shared receive queue: %w", rdma.ErrClosed)
		}
		attached = append(attached, c)
	}
	detach := func() {
		for _, a := range attached {
			a.srq.detach(a, a.peer())
		}
	}
	if !r.dialer.addConn(dc) {
		detach()
		r.state = reqDone
		r.refused = true
		close(r.decided)
		return nil, rdma.ErrClosed
	}
	if !r.l.dev.addConn(ac) {
		detach()
		r.dialer.removeConn(dc)
		r.state = reqDone
		r.refused = true
		close(r.decided)
		return nil, rdma.ErrClosed
	}
	r.state = reqDone
	r.replyPD = append([]byte{}, privateData...)
	r.dialConn = dc
	if dc.p.kick != nil {
		go dc.p.run()
	}
	close(r.decided)
	r.l.dev.log.Debug("loopback connection established", "local", string(r.local), "remote", string(r.remote))
	return ac, nil
}
