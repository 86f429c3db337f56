package rdmatest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Shared plumbing of the subtests: devices, listener, connections,
// registered buffers, polling and work request builders.

// env is one subtest's devices, listener and deadline.
type env struct {
	t    testing.TB
	ctx  context.Context
	a, b rdma.Device // a listens, b dials
	l    rdma.Listener
	addr string // the listener's address
}

const maxTestTime = 30 * time.Second

func newEnv(tb testing.TB, f Factory) *env {
	tb.Helper()
	d := maxTestTime
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 2*d {
			d = time.Until(dl) / 2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	a, b, addr := f(tb)
	tb.Cleanup(func() { a.Close(); b.Close() })
	l, err := a.Listen(ctx, addr)
	if err != nil {
		tb.Fatalf("Listen(%q): %v", addr, err)
	}
	tb.Cleanup(func() { l.Close() })
	return &env{t: tb, ctx: ctx, a: a, b: b, l: l, addr: l.Addr().String()}
}

type acceptResult struct {
	c   rdma.Conn
	req rdma.ConnRequest
	err error
}

// acceptAsync accepts one request with cfg and reply private data.
func (e *env) acceptAsync(cfg rdma.QPConfig, pd []byte) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		r, err := e.l.Accept(e.ctx)
		if err != nil {
			ch <- acceptResult{err: fmt.Errorf("Listener.Accept: %w", err)}
			return
		}
		c, err := r.Accept(e.ctx, cfg, pd)
		if err != nil {
			err = fmt.Errorf("ConnRequest.Accept: %w", err)
		}
		ch <- acceptResult{c: c, req: r, err: err}
	}()
	return ch
}

// connect returns (dialer's conn, acceptor's conn), closed at cleanup.
func (e *env) connect(dcfg, acfg rdma.QPConfig) (d, a rdma.Conn) {
	e.t.Helper()
	ch := e.acceptAsync(acfg, nil)
	d, _, err := e.b.Dial(e.ctx, e.addr, dcfg, nil)
	if err != nil {
		e.t.Fatalf("Dial: %v", err)
	}
	e.t.Cleanup(func() { d.Close() })
	r := <-ch
	if r.err != nil {
		e.t.Fatal(r.err)
	}
	e.t.Cleanup(func() { r.c.Close() })
	return d, r.c
}

func (e *env) reg(dev rdma.Device, n int, access rdma.Access, seed int) rdma.MemoryRegion {
	e.t.Helper()
	buf := make([]byte, n)
	fill(buf, seed)
	m, err := dev.Register(buf, access)
	if err != nil {
		e.t.Fatalf("Register(%d bytes, %v): %v", n, access, err)
	}
	return m
}

// fill writes a pattern depending on seed and position.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8 + 1)
	}
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

const (
	rw  = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	lw  = rdma.AccessLocalWrite
	all = rw
)

// pollN polls c until it has n completions.
func (e *env) pollN(c rdma.Conn, n int) []rdma.Completion {
	e.t.Helper()
	out := make([]rdma.Completion, 0, n)
	buf := make([]rdma.Completion, 16)
	for len(out) < n {
		k, err := c.Poll(e.ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			e.t.Fatalf("Poll after %d of %d completions %v: %v", len(out), n, out, err)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// drain polls c until it returns rdma.ErrClosed, returning the completions.
func (e *env) drain(c rdma.Conn) []rdma.Completion {
	e.t.Helper()
	var out []rdma.Completion
	buf := make([]rdma.Completion, 16)
	for {
		k, err := c.Poll(e.ctx, buf)
		out = append(out, buf[:k]...)
		if errors.Is(err, rdma.ErrClosed) {
			return out
		}
		if err != nil {
			e.t.Fatalf("Poll while draining (got %v): %v, want rdma.ErrClosed after the completions", out, err)
		}
	}
}

func (e *env) waitDone(c rdma.Conn, who string) {
	e.t.Helper()
	select {
	case <-c.Done():
	case <-e.ctx.Done():
		e.t.Fatalf("%s: Done not closed before the deadline", who)
	}
	if c.Err() == nil {
		e.t.Fatalf("%s: Err() = nil after Done", who)
	}
}

func want(tb testing.TB, got rdma.Completion, id uint64, op rdma.Opcode, st rdma.Status) {
	tb.Helper()
	if got.ID != id || got.Op != op || got.Status != st {
		tb.Fatalf("completion {ID %d, %v, %v (err %v)}, want {ID %d, %v, %v}", got.ID, got.Op, got.Status, got.Err, id, op, st)
	}
}

func sge(m rdma.MemoryRegion, off, n int) []rdma.SGE {
	return []rdma.SGE{{MR: m, Offset: off, Length: n}}
}

func recv(id uint64, m rdma.MemoryRegion, off, n int) rdma.RecvWR {
	return rdma.RecvWR{ID: id, Local: rdma.SGE{MR: m, Offset: off, Length: n}}
}

func send(id uint64, m rdma.MemoryRegion, off, n int) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: rdma.OpSend, Local: sge(m, off, n), Signaled: true}
}

func rdmaWR(id uint64, op rdma.Opcode, local []rdma.SGE, remote rdma.MemoryRegion, off uint64) rdma.SendWR {
	return rdma.SendWR{ID: id, Op: op, Local: local, Signaled: true,
		Remote: rdma.RemoteAddr{Addr: remote.Addr() + off, RKey: remote.RKey()}}
}

// ---- connection management ----
