package iwarp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// listener accepts TCP connections and runs each MPA request exchange in its
// own goroutine, so a slow peer delays nobody else. Requests that pass wait in
// a backlog for Accept.
type listener struct {
	dev     *Device
	ln      net.Listener
	backlog chan *connRequest
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{} // TCP connections still in the MPA exchange
	// warned rate-limits the warnings of failed handshakes per remote
	// host: junk connections from one host (a port scanner, a
	// misconfigured client) give a line per interval, with a count.
	warned map[string]*hostWarn
	// maxPending is maxPendingHandshakes (tests lower it).
	maxPending int
}

// hostWarn is when a remote host's last failed handshake was logged and
// how many have been left out since.
type hostWarn struct {
	at      time.Time
	skipped int
}

// handshakeWarnEvery is the least time between two warnings about failed
// handshakes from one host.
const handshakeWarnEvery = 10 * time.Second

// maxPendingHandshakes bounds the TCP connections of a listener still in
// the MPA exchange (each holds a goroutine and a file descriptor for up to
// Config.HandshakeTimeout).
const maxPendingHandshakes = 1024

// maxWarnHosts bounds the hosts remembered for the rate limit.
const maxWarnHosts = 4096

// warnHandshake logs a failed handshake from nc's remote host, at most once
// per handshakeWarnEvery per host; the next line counts those left out.
func (l *listener) warnHandshake(nc net.Conn, msg string, err error) {
	host := nc.RemoteAddr().String()
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	now := time.Now()
	l.mu.Lock()
	if l.warned == nil || len(l.warned) >= maxWarnHosts {
		l.warned = map[string]*hostWarn{}
	}
	w := l.warned[host]
	if w != nil && now.Sub(w.at) < handshakeWarnEvery {
		w.skipped++
		l.mu.Unlock()
		return
	}
	skipped := 0
	if w != nil {
		skipped = w.skipped
	}
	l.warned[host] = &hostWarn{at: now}
	l.mu.Unlock()
	if skipped > 0 {
		l.dev.log.Warn(msg, "remote", nc.RemoteAddr(), "err", err, "more_from_host", skipped)
		return
	}
	l.dev.log.Warn(msg, "remote", nc.RemoteAddr(), "err", err)
}

// Listen listens on addr ("host:port", IPv4 or IPv6, port 0 for any) for MPA
// connect requests.
func (d *Device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("iwarp: listen %s: %w", addr, err)
	}
	l := &listener{
		dev: d, ln: ln, backlog: make(chan *connRequest, d.cfg.AcceptBacklog),
		done: make(chan struct{}), pending: make(map[net.Conn]struct{}), maxPending: maxPendingHandshakes,
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		ln.Close()
		return nil, rdma.ErrClosed
	}
	d.listeners[l] = struct{}{}
	d.mu.Unlock()
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening, drops handshakes in progress and rejects requests
// not yet accepted (their TCP connections are closed).
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
		l.mu.Lock()
		for nc := range l.pending {
			nc.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
		for {
			select {
			case r := <-l.backlog:
				r.drop()
				continue
			default:
			}
			break
		}
		l.dev.mu.Lock()
		delete(l.dev.listeners, l)
		l.dev.mu.Unlock()
	})
	return nil
}

// Accept returns the next connect request whose MPA request was valid.
func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.backlog:
		return r, nil
	case <-l.done:
		return nil, rdma.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, net.ErrClosed) {
				// Transient (EMFILE and the like): back off, as net/http does.
				delay = max(5*time.Millisecond, min(2*delay, time.Second))
				l.dev.log.Warn("iwarp: accept", "err", err)
				select {
				case <-time.After(delay):
				case <-l.done:
					return
				}
				continue
			}
			return
		}
		delay = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		l.mu.Lock()
		if len(l.pending) >= l.maxPending {
			// A flood of connections that never finish their MPA request
			// must not take every file descriptor: refuse beyond the bound
			// until the handshake timeout frees places.
			l.mu.Unlock()
			l.warnHandshake(nc, "iwarp: too many MPA handshakes in progress; connection closed", fmt.Errorf("%d pending", l.maxPending))
			nc.Close()
			continue
		}
		l.pending[nc] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(nc)
	}
}

func (l *listener) forget(nc net.Conn) {
	l.mu.Lock()
	delete(l.pending, nc)
	l.mu.Unlock()
}

// handshake reads and checks one MPA request (RFC 5044 §7.1). Requests for
// markers, an unknown revision or an over-long PD_Length are refused with a
// reject reply and the TCP connection is closed.
func (l *listener) handshake(nc net.Conn) {
	defer l.wg.Done()
	d := l.dev
	nc.SetDeadline(time.Now().Add(d.cfg.HandshakeTimeout))
	req, err := readMPAFrame(nc, false)
	if err != nil {
		l.warnHandshake(nc, "iwarp: bad MPA request", err)
		if errors.Is(err, ErrMPAFrame) && req.Revision != 0 {
			l.refuse(nc, req)
		}
		l.forget(nc)
		nc.Close()
		return
	}
	if err := mpaRequestRefused(req); err != nil {
		l.warnHandshake(nc, "iwarp: refusing MPA request", err)
		l.refuse(nc, req)
		l.forget(nc)
		nc.Close()
		return
	}
	_, _, pd := req.ulpPrivateData()
	r := &connRequest{l: l, nc: nc, req: req, pd: append([]byte(nil), pd...)}
	// The backlog holds handshaken requests; the TCP connection stays open
	// while the request waits (the peer's own handshake timeout applies).
	nc.SetDeadline(time.Time{})
	l.forget(nc)
	select {
	case l.backlog <- r:
	case <-l.done:
		r.drop()
	}
}

// refuse sends an MPA reply with the R bit and no private data.
func (l *listener) refuse(nc net.Conn, req mpaFrame) {
	rev := req.Revision
	if rev < 1 || rev > 2 {
		rev = uint8(l.dev.cfg.MPARevision)
	}
	rep := mpaFrame{Reply: true, Reject: true, Revision: rev, Markers: req.Markers}
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write(rep.marshal())
}

// connRequest is a valid MPA request awaiting Accept or Reject.
type connRequest struct {
	l   *listener
	nc  net.Conn
	req mpaFrame
	pd  []byte // the request's consumer private data

	mu      sync.Mutex
	decided bool
}

func (r *connRequest) PrivateData() []byte  { return r.pd }
func (r *connRequest) LocalAddr() net.Addr  { return r.nc.LocalAddr() }
func (r *connRequest) RemoteAddr() net.Addr { return r.nc.RemoteAddr() }

var errDecided = errors.New("iwarp: connect request already accepted or rejected")

func (r *connRequest) decide() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.decided {
		return errDecided
	}
	r.decided = true
	return nil
}

// drop closes a request nobody will answer.
func (r *connRequest) drop() {
	if r.decide() == nil {
		r.nc.Close()
	}
}

func (r *connRequest) maxPD() int {
	if _, enhanced := mpaReplyRevision(r.l.dev.mpaParams(rdma.QPConfig{}), r.req); enhanced {
		return MPAMaxPrivateData - mpaV2WordLen
	}
	return MPAMaxPrivateData
}

// Reject replies with the R bit and privateData, then closes the TCP
// connection.
func (r *connRequest) Reject(privateData []byte) error {
	if len(privateData) > r.maxPD() {
		return rdma.ErrPrivateDataTooLong
	}
	if err := r.decide(); err != nil {
		return err
	}
	defer r.nc.Close()
	rep, _, _ := mpaReply(r.l.dev.mpaParams(r.l.dev.qpDefaults(rdma.QPConfig{})), r.req, true, privateData)
	r.nc.SetWriteDeadline(time.Now().Add(r.l.dev.cfg.HandshakeTimeout))
	if _, err := r.nc.Write(rep.marshal()); err != nil {
		return fmt.Errorf("iwarp: sending MPA reject: %w", err)
	}
	if tc, ok := r.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	return nil
}

// Accept replies with privateData and the negotiated IRD/ORD (RFC 6581 §5:
// our ORD is cut to the initiator's IRD) and starts the connection. In
// peer-to-peer mode it waits for the initiator's RTR before returning.
func (r *connRequest) Accept(ctx context.Context, qcfg rdma.QPConfig, privateData []byte) (rdma.Conn, error) {
	return r.AcceptRecv(ctx, qcfg, privateData, nil)
}

var _ rdma.RecvFirstAcceptor = (*connRequest)(nil)

// AcceptRecv is Accept with recvs posted on the new connection before the
// MPA reply goes out, so a peer that Sends as soon as it has the reply finds
// them (iWARP has no RNR retry: a Send without a receive is a Terminate,
// RFC 5041 §7.2). A receive that PostRecv would refuse fails AcceptRecv with
// nothing sent; the request can then be answered again.
func (r *connRequest) AcceptRecv(ctx context.Context, qcfg rdma.QPConfig, privateData []byte, recvs []rdma.RecvWR) (rdma.Conn, error) {
	if len(privateData) > r.maxPD() {
		return nil, rdma.ErrPrivateDataTooLong
	}
	d := r.l.dev
	qcfg = d.qpDefaults(qcfg)
	if qcfg.SRQ != nil && len(recvs) > 0 {
		return nil, fmt.Errorf("iwarp: receives posted on a queue pair using an SRQ: %w", rdma.ErrInvalidWR)
	}
	// A connection on an SRQ counts as its user from here; checked before
	// deciding, so a refused SRQ leaves the request to answer again.
	s, err := d.srqOf(qcfg)
	if err != nil {
		return nil, err
	}
	made := false
	defer func() {
		if s != nil && !made {
			s.detach()
		}
	}()
	if len(recvs) > 0 {
		// Check the receives on a scratch queue before deciding.
		probe := newConn(d, r.nc, qcfg, mpaOutcome{Caps: baseCaps(qcfg), IRDLimit: qcfg.IRD})
		if err := probe.PostRecv(recvs...); err != nil {
			return nil, err
		}
	}
	if err := r.decide(); err != nil {
		return nil, err
	}
	nc := r.nc
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	nc.SetDeadline(handshakeDeadline(ctx, d.cfg.HandshakeTimeout))

	rep, o, err := mpaReply(d.mpaParams(qcfg), r.req, false, privateData)
	if err != nil {
		nc.Write(rep.marshal())
		nc.Close()
		return nil, err
	}
	rtr := o.RTR
	c := newConn(d, nc, qcfg, o)
	if err := c.PostRecv(recvs...); err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := nc.Write(rep.marshal()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: sending MPA reply: %v", errHandshake, err)
	}
	if rtr != 0 {
		if err := c.awaitRTR(rtr); err != nil {
			nc.Close()
			return nil, ctxError(ctx, err)
		}
	}
	nc.SetDeadline(time.Time{})
	if err := d.addConn(c); err != nil {
		nc.Close()
		return nil, err
	}
	made = true
	c.start()
	d.log.Debug("iwarp: accepted", "local", nc.LocalAddr(), "remote", nc.RemoteAddr(),
		"rev", rep.Revision, "crc", c.crc, "ird", o.Caps.IRD, "ord", o.Caps.ORD, "rtr", rtr)
	return c, nil
}
