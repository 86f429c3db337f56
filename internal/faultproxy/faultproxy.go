// Package faultproxy is a TCP proxy that injects the network faults a
// storage transport must survive, for reliability campaigns: delay with
// jitter, a stalled reader (the receive window closes to zero), a link
// that goes down and comes back, and resets in mid-stream.
//
// It works on the byte stream, above TCP, so it cannot lose, duplicate or
// reorder segments: TCP repairs those before any byte reaches the
// application, and what the endpoints see of them is delay (a
// retransmission) — which is what the delay fault gives. Packet loss and
// partitions at the IP layer are done with network namespaces and
// nftables (scripts/campaign/netfault.sh). How netem's faults map:
//
//	netem delay 50ms 20ms   Faults.Delay = 50ms, Faults.Jitter = 20ms (per forwarded chunk, order kept)
//	netem loss, duplicate,  invisible above TCP except as delay: Delay, or nftables
//	  reorder, corrupt        "numgen random mod 100 < 1 drop" for the real thing
//	zero window             Faults.StallToClient / StallToServer: stop reading one direction
//	link down               Faults.Down: nothing forwarded, new connections get no answer
//	TCP reset               Proxy.Reset: close every connection with SO_LINGER 0 (RST)
package faultproxy

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is the set of faults applied to every connection, changed at any
// time with Proxy.Set. The zero value forwards everything at once.
type Faults struct {
	// Delay and Jitter hold each forwarded chunk Delay ± Jitter (uniform)
	// before it is written on; chunks keep their order.
	Delay, Jitter time.Duration
	// StallToClient stops reading from the server (what the client would
	// receive): the server's send buffer and the TCP window fill and its
	// writes block, as with a client that stopped reading. StallToServer
	// is the other direction.
	StallToClient, StallToServer bool
	// Down stops forwarding in both directions and leaves new connections
	// unanswered (accepted but never connected on), like a cable pull: the
	// endpoints see silence, not an error, until their own timeouts.
	Down bool
}

// Stats counts what the proxy did.
type Stats struct {
	Conns  int64 // connections accepted
	Resets int64 // connections closed with a reset by Reset
	Bytes  int64 // bytes forwarded, both directions
}

// Proxy forwards the connections accepted on its listener to one server
// address. Safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	server string

	mu      sync.Mutex
	cond    *sync.Cond // broadcast when faults change or the proxy closes
	faults  Faults
	conns   map[*net.TCPConn]struct{}
	closed  bool
	conns64 atomic.Int64
	resets  atomic.Int64
	bytes   atomic.Int64
	wg      sync.WaitGroup
}

// Listen starts a proxy on listen ("127.0.0.1:0" for any port) forwarding
// to server.
func Listen(listen, server string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, server: server, conns: map[*net.TCPConn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the faults; connections follow at their next chunk.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	p.faults = f
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns64.Load(), Resets: p.resets.Load(), Bytes: p.bytes.Load()}
}

// Reset closes every open connection, both sides, with a TCP reset
// (SO_LINGER 0), as a middlebox or a rebooted peer would.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Every connection is set to reset before any is closed: closing one
	// ends its pair's other copy, which closes the other connection
	// itself (serve), and that close must reset too, not end with a FIN.
	for c := range p.conns {
		c.SetLinger(0)
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
		p.resets.Add(1)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *net.TCPConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns64.Add(1)
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

// wait blocks while the link is down (or, with stall, this direction is
// stalled) and returns the faults to apply, or false once the proxy closed.
func (p *Proxy) wait(stall func(Faults) bool) (Faults, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && (p.faults.Down || stall(p.faults)) {
		p.cond.Wait()
	}
	return p.faults, !p.closed
}

func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	if !p.track(client) {
		client.Close()
		return
	}
	defer p.untrack(client)
	// While the link is down a new connection gets no answer.
	if _, ok := p.wait(func(Faults) bool { return false }); !ok {
		return
	}
	sc, err := net.Dial("tcp", p.server)
	if err != nil {
		client.SetLinger(0)
		return
	}
	server := sc.(*net.TCPConn)
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, func(f Faults) bool { return f.StallToServer }); done <- struct{}{} }()
	go func() { p.pipe(client, server, func(f Faults) bool { return f.StallToClient }); done <- struct{}{} }()
	<-done
	// One side ended: end the other (a reset stays a reset).
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst chunk by chunk under the faults.
func (p *Proxy) pipe(dst, src *net.TCPConn, stall func(Faults) bool) {
	buf := make([]byte, 64<<10)
	for {
		if _, ok := p.wait(stall); !ok {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			f, ok := p.wait(stall)
			if !ok {
				return
			}
			if d := delay(f); d > 0 {
				time.Sleep(d)
			}
			// A fault raised during the delay holds the chunk.
			if _, ok := p.wait(stall); !ok {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.bytes.Add(int64(n))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.CloseWrite()
			}
			return
		}
	}
}

func delay(f Faults) time.Duration {
	d := f.Delay
	if f.Jitter > 0 {
		d += time.Duration(rand.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
	}
	return max(d, 0)
}
