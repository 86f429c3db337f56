package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/gosrp/gosrp/rdma"
)

// Config configures a client or server run.
type Config struct {
	// Size is the ping data size, bytes (rping -S); 0 means DefaultSize.
	// Must be within MinSize..MaxSize.
	Size int
	// Count is the number of pings (rping -C); 0 pings until ctx ends. A
	// server stops when the client disconnects, whatever Count says; with
	// Count set it fails if the client disconnects before Count pings.
	Count int
	// Validate (rping -V): the client compares the data written back with
	// the data it sent; the server (beyond rping) checks the data it read
	// against Pattern. A mismatch ends the run with ErrMismatch.
	Validate bool
	// Verbose (rping -v), when not nil, receives one line per ping: "ping
	// data: <text>" at the client, "server ping data: <text>" at the server.
	Verbose io.Writer
	// Logger receives per-step events at Debug (rping -d). Nil discards.
	Logger *slog.Logger
}

// rping's queue pair (rping_create_qp, rping_init_conn_param): 16 send work
// requests, 2 receives, one SGE, one RDMA READ each way.
var qpConfig = rdma.QPConfig{SendDepth: 16, RecvDepth: 2, MaxSGE: 1, IRD: 1, ORD: 1}

// Result is what a run did.
type Result struct {
	Pings int // pings completed
}

var (
	// ErrMismatch reports ping data that differs from what was sent.
	ErrMismatch = errors.New("rping: data mismatch")
	// ErrDisconnected reports that the peer went away in the middle of a
	// ping (or, at the server, before Count pings).
	ErrDisconnected = errors.New("rping: peer disconnected")
)

func (c Config) check() (Config, error) {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize {
		return c, fmt.Errorf("rping: invalid size %d (valid range is %d to %d)", c.Size, MinSize, MaxSize)
	}
	if c.Count < 0 {
		return c, fmt.Errorf("rping: invalid count %d", c.Count)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// endpoint is one side's connection, its 16-byte receive buffer and the
// completions polled but not yet asked for.
type endpoint struct {
	conn    rdma.Conn
	recvMR  rdma.MemoryRegion
	pending []event
	out     [8]rdma.Completion
	log     *slog.Logger
}

// event is a completion; for a receive, a copy of the bytes received (the
// buffer is reposted at once, as rping does in its CQ handler).
type event struct {
	c    rdma.Completion
	data []byte
}

func (e *endpoint) recvWR() rdma.RecvWR {
	return rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: e.recvMR, Length: InfoLen}}
}

// wait returns the next completion of op, polling (and keeping others) until
// it arrives. A failed completion ends the run: flushed work (the peer closed
// the connection) as ErrDisconnected, others as the status.
func (e *endpoint) wait(ctx context.Context, op rdma.Opcode) (event, error) {
	for {
		for i, ev := range e.pending {
			if ev.c.Op == op {
				e.pending = append(e.pending[:i], e.pending[i+1:]...)
				return ev, nil
			}
		}
		n, err := e.conn.Poll(ctx, e.out[:])
		if err != nil {
			if errors.Is(err, rdma.ErrClosed) {
				return event{}, fmt.Errorf("%w: %v", ErrDisconnected, connErr(e.conn))
			}
			return event{}, err
		}
		for _, c := range e.out[:n] {
			if c.Status != rdma.StatusSuccess {
				if c.Status == rdma.StatusFlushed {
					return event{}, fmt.Errorf("%w: %v", ErrDisconnected, connErr(e.conn))
				}
				return event{}, fmt.Errorf("rping: %v completion failed: %v (%v)", c.Op, c.Status, c.Err)
			}
			ev := event{c: c}
			if c.Op == rdma.OpRecv {
				ev.data = bytes.Clone(e.recvMR.Bytes()[:min(c.ByteLen, InfoLen)])
				if c.ByteLen > InfoLen {
					return event{}, fmt.Errorf("%w: %d bytes", ErrBogus, c.ByteLen)
				}
				if err := e.conn.PostRecv(e.recvWR()); err != nil {
					return event{}, fmt.Errorf("rping: post recv: %w", err)
				}
			}
			e.log.Debug("rping: completion", "op", c.Op, "bytes", c.ByteLen)
			if c.Op == rdma.OpSend {
				continue // rping does not wait for its SENDs
			}
			e.pending = append(e.pending, ev)
		}
	}
}

func connErr(c rdma.Conn) error {
	if err := c.Err(); err != nil {
		return err
	}
	return rdma.ErrClosed
}

// register registers n bytes on dev with access, deregistering on cleanup.
type regs []rdma.MemoryRegion

func (r *regs) add(dev rdma.Device, n int, access rdma.Access) (rdma.MemoryRegion, error) {
	mr, err := dev.Register(make([]byte, n), access)
	if err != nil {
		return nil, fmt.Errorf("rping: register %d bytes: %w", n, err)
	}
	*r = append(*r, mr)
	return mr, nil
}

func (r regs) release() {
	for _, mr := range r {
		mr.Deregister()
	}
}

const rdmaAccess = rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite

func sendWR(mr rdma.MemoryRegion) rdma.SendWR {
	return rdma.SendWR{ID: 1, Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: mr, Length: InfoLen}}}
}

// Client connects to addr on dev (no private data) and runs the client side
// of cfg.Count pings, then disconnects. It returns the pings completed and
// the first error: ErrMismatch when validation fails, ErrBogus for a
// malformed go-ahead, ErrDisconnected when the server goes away, ctx's error
// when it ends (with Count 0 that is the normal end: Client then returns
// nil).
func Client(ctx context.Context, dev rdma.Device, addr string, cfg Config) (Result, error) {
	cfg, err := cfg.check()
	if err != nil {
		return Result{}, err
	}
	var rs regs
	defer rs.release()
	recvMR, err := rs.add(dev, InfoLen, rdma.AccessLocalWrite)
	if err != nil {
		return Result{}, err
	}
	// Two send buffers (rping reuses one): the start Info's buffer is not
	// rewritten while its SEND may still be in flight.
	startInfo, err := rs.add(dev, InfoLen, 0)
	if err != nil {
		return Result{}, err
	}
	sinkInfo, err := rs.add(dev, InfoLen, 0)
	if err != nil {
		return Result{}, err
	}
	start, err := rs.add(dev, cfg.Size, rdmaAccess)
	if err != nil {
		return Result{}, err
	}
	sink, err := rs.add(dev, cfg.Size, rdmaAccess)
	if err != nil {
		return Result{}, err
	}
	conn, _, err := dev.Dial(ctx, addr, qpConfig, nil)
	if err != nil {
		return Result{}, fmt.Errorf("rping: connect %s: %w", addr, err)
	}
	defer conn.Close()
	e := &endpoint{conn: conn, recvMR: recvMR, log: cfg.Logger}
	if err := conn.PostRecv(e.recvWR()); err != nil {
		return Result{}, fmt.Errorf("rping: post recv: %w", err)
	}
	cfg.Logger.Debug("rping: connected", "local", conn.LocalAddr(), "remote", conn.RemoteAddr(), "caps", conn.Caps())
	Info{Addr: start.Addr(), RKey: start.RKey(), Size: uint32(cfg.Size)}.Put(startInfo.Bytes())
	Info{Addr: sink.Addr(), RKey: sink.RKey(), Size: uint32(cfg.Size)}.Put(sinkInfo.Bytes())
	var res Result
	for ping := 0; cfg.Count == 0 || ping < cfg.Count; ping++ {
		if cfg.Count == 0 && ctx.Err() != nil {
			return res, nil
		}
		Pattern(start.Bytes(), ping)
		if err := step(ctx, e, startInfo); err != nil {
			return res, stopped(ctx, cfg, res, err)
		}
		if err := step(ctx, e, sinkInfo); err != nil {
			return res, stopped(ctx, cfg, res, err)
		}
		if cfg.Validate && !bytes.Equal(start.Bytes(), sink.Bytes()) {
			return res, fmt.Errorf("%w: ping %d: sent %q, got back %q", ErrMismatch, ping,
				cstring(start.Bytes()), cstring(sink.Bytes()))
		}
		if cfg.Verbose != nil {
			fmt.Fprintf(cfg.Verbose, "ping data: %s\n", cstring(sink.Bytes()))
		}
		clear(sink.Bytes())
		res.Pings++
	}
	return res, nil
}

// stopped maps an error of an endless client run ended by ctx to success.
func stopped(ctx context.Context, cfg Config, res Result, err error) error {
	if cfg.Count == 0 && ctx.Err() != nil {
		return nil
	}
	return err
}

// step SENDs the Info in mr and waits for the server's go-ahead.
func step(ctx context.Context, e *endpoint, mr rdma.MemoryRegion) error {
	if err := e.conn.PostSend(sendWR(mr)); err != nil {
		return fmt.Errorf("rping: post send: %w", err)
	}
	ev, err := e.wait(ctx, rdma.OpRecv)
	if err != nil {
		return err
	}
	if ev.c.ByteLen != InfoLen {
		return fmt.Errorf("%w: go-ahead of %d bytes", ErrBogus, ev.c.ByteLen)
	}
	return nil
}

// Server accepts one connect request from l and runs the server side until
// the client disconnects (or ctx ends), as rping -s does. It returns the
// pings completed; the client's disconnect between pings is success unless
// fewer than cfg.Count pings were done.
func Server(ctx context.Context, dev rdma.Device, l rdma.Listener, cfg Config) (Result, error) {
	cfg, err := cfg.check()
	if err != nil {
		return Result{}, err
	}
	req, err := l.Accept(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("rping: accept: %w", err)
	}
	return Serve(ctx, dev, req, cfg)
}

// Serve accepts req (no private data) and runs the server side of rping on
// the connection (see Server).
func Serve(ctx context.Context, dev rdma.Device, req rdma.ConnRequest, cfg Config) (Result, error) {
	cfg, err := cfg.check()
	if err != nil {
		req.Reject(nil)
		return Result{}, err
	}
	var rs regs
	defer rs.release()
	recvMR, err := rs.add(dev, InfoLen, rdma.AccessLocalWrite)
	if err == nil {
		var goAhead, buf rdma.MemoryRegion
		if goAhead, err = rs.add(dev, InfoLen, 0); err == nil {
			if buf, err = rs.add(dev, cfg.Size, rdmaAccess); err == nil {
				return serve(ctx, req, recvMR, goAhead, buf, cfg)
			}
		}
	}
	req.Reject(nil)
	return Result{}, err
}

func serve(ctx context.Context, req rdma.ConnRequest, recvMR, goAhead, buf rdma.MemoryRegion, cfg Config) (Result, error) {
	e := &endpoint{recvMR: recvMR, log: cfg.Logger}
	// The receive is posted before the reply goes out (rping posts it
	// before rdma_accept): iWARP has no RNR retry.
	var conn rdma.Conn
	var err error
	if ra, ok := req.(rdma.RecvFirstAcceptor); ok {
		conn, err = ra.AcceptRecv(ctx, qpConfig, nil, []rdma.RecvWR{e.recvWR()})
	} else if conn, err = req.Accept(ctx, qpConfig, nil); err == nil {
		err = conn.PostRecv(e.recvWR())
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return Result{}, fmt.Errorf("rping: accept: %w", err)
	}
	defer conn.Close()
	e.conn = conn
	cfg.Logger.Debug("rping: accepted", "local", conn.LocalAddr(), "remote", conn.RemoteAddr(), "caps", conn.Caps())
	var res Result
	want := make([]byte, cfg.Size)
	for ping := 0; ; ping++ {
		// The source Info; the client's disconnect here ends the run.
		ev, err := e.wait(ctx, rdma.OpRecv)
		if err != nil {
			if errors.Is(err, ErrDisconnected) && (cfg.Count == 0 || res.Pings >= cfg.Count) {
				return res, nil
			}
			return res, err
		}
		src, err := ParseInfo(ev.data[:ev.c.ByteLen])
		if err != nil {
			return res, err
		}
		cfg.Logger.Debug("rping: source", "addr", fmt.Sprintf("%#x", src.Addr), "rkey", fmt.Sprintf("%#x", src.RKey), "size", src.Size)
		if src.Size > uint32(cfg.Size) {
			return res, fmt.Errorf("rping: client's %d-byte buffer exceeds ours (%d bytes)", src.Size, cfg.Size)
		}
		clear(buf.Bytes())
		if err := conn.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpRDMARead, Signaled: true,
			Local:  []rdma.SGE{{MR: buf, Length: int(src.Size)}},
			Remote: rdma.RemoteAddr{Addr: src.Addr, RKey: src.RKey}}); err != nil {
			return res, fmt.Errorf("rping: post RDMA READ: %w", err)
		}
		if _, err := e.wait(ctx, rdma.OpRDMARead); err != nil {
			return res, err
		}
		data := buf.Bytes()[:src.Size]
		if cfg.Validate {
			Pattern(want[:src.Size], ping)
			if !bytes.Equal(data, want[:src.Size]) {
				return res, fmt.Errorf("%w: ping %d: read %q, want %q", ErrMismatch, ping, cstring(data), cstring(want[:src.Size]))
			}
		}
		if cfg.Verbose != nil {
			fmt.Fprintf(cfg.Verbose, "server ping data: %s\n", cstring(data))
		}
		if err := conn.PostSend(sendWR(goAhead)); err != nil {
			return res, fmt.Errorf("rping: post send: %w", err)
		}
		// The sink Info.
		if ev, err = e.wait(ctx, rdma.OpRecv); err != nil {
			return res, err
		}
		sink, err := ParseInfo(ev.data[:ev.c.ByteLen])
		if err != nil {
			return res, err
		}
		cfg.Logger.Debug("rping: sink", "addr", fmt.Sprintf("%#x", sink.Addr), "rkey", fmt.Sprintf("%#x", sink.RKey), "size", sink.Size)
		// rping writes strlen+1 bytes of what it read (its buffer is
		// NUL-terminated at the end whatever it read).
		n := min(len(cstring(buf.Bytes()))+1, cfg.Size)
		if err := conn.PostSend(rdma.SendWR{ID: 3, Op: rdma.OpRDMAWrite, Signaled: true,
			Local:  []rdma.SGE{{MR: buf, Length: n}},
			Remote: rdma.RemoteAddr{Addr: sink.Addr, RKey: sink.RKey}}); err != nil {
			return res, fmt.Errorf("rping: post RDMA WRITE: %w", err)
		}
		if _, err := e.wait(ctx, rdma.OpRDMAWrite); err != nil {
			return res, err
		}
		if err := conn.PostSend(sendWR(goAhead)); err != nil {
			return res, fmt.Errorf("rping: post send: %w", err)
		}
		res.Pings++
	}
}
