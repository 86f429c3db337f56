package rdmatest

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Concurrency: posting from many goroutines, many connections, goroutine
// leaks.

func testConcurrent(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const workers, per = 4, 100
	const total = workers * per
	cfg := rdma.QPConfig{SendDepth: total + 16, RecvDepth: total + 16}
	d, a := e.connect(cfg, cfg)
	// Both sides post all receives first, then both send concurrently from
	// several goroutines each, while one goroutine per side polls.
	type side struct {
		c       rdma.Conn
		dev     rdma.Device
		rb, sb  rdma.MemoryRegion
		errs    chan error
		results chan []rdma.Completion
	}
	sides := []*side{{c: d, dev: e.b}, {c: a, dev: e.a}}
	for _, s := range sides {
		s.rb = e.reg(s.dev, 16*total, lw, 0)
		s.sb = e.reg(s.dev, 16*total, 0, 0)
		s.errs = make(chan error, workers+1)
		s.results = make(chan []rdma.Completion, 1)
		for i := range total {
			if err := s.c.PostRecv(recv(uint64(i), s.rb, 16*i, 16)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for si, s := range sides {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range per {
					slot := w*per + k
					b := s.sb.Bytes()[16*slot : 16*slot+16]
					binary.BigEndian.PutUint64(b, uint64(w))
					binary.BigEndian.PutUint64(b[8:], uint64(k))
					if err := s.c.PostSend(send(uint64(slot), s.sb, 16*slot, 16)); err != nil {
						s.errs <- fmt.Errorf("side %d worker %d send %d: %w", si, w, k, err)
						return
					}
				}
			}()
		}
		go func() {
			// Poll all sends and receives of this side (2*total completions).
			var got []rdma.Completion
			buf := make([]rdma.Completion, 32)
			for len(got) < 2*total {
				n, err := s.c.Poll(e.ctx, buf)
				if err != nil {
					s.errs <- fmt.Errorf("side %d Poll after %d completions: %w", si, len(got), err)
					s.results <- got
					return
				}
				got = append(got, buf[:n]...)
			}
			s.results <- got
		}()
	}
	wg.Wait()
	for si, s := range sides {
		got := <-s.results
		select {
		case err := <-s.errs:
			t.Fatal(err)
		default:
		}
		nsend, nrecv := 0, 0
		next := [workers]uint64{}
		for _, c := range got {
			if c.Status != rdma.StatusSuccess {
				t.Fatalf("side %d: completion %+v", si, c)
			}
			if c.Op == rdma.OpSend {
				nsend++
				continue
			}
			if c.ID != uint64(nrecv) {
				t.Fatalf("side %d: receive completion %d has ID %d: out of order", si, nrecv, c.ID)
			}
			nrecv++
			b := s.rb.Bytes()[16*c.ID:]
			w, k := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
			if w >= workers || k != next[w] {
				t.Fatalf("side %d: message (worker %d, #%d) arrived, expected #%d of that worker: per-poster order broken", si, w, k, next[min(w, workers-1)])
			}
			next[w]++
		}
		if nsend != total || nrecv != total {
			t.Fatalf("side %d: %d send and %d receive completions, want %d each", si, nsend, nrecv, total)
		}
	}
}

func testManyConnections(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const n = 32
	accepted := make(chan acceptResult, n)
	go func() {
		for range n {
			r, err := e.l.Accept(e.ctx)
			if err != nil {
				accepted <- acceptResult{err: err}
				return
			}
			c, err := r.Accept(e.ctx, rdma.QPConfig{SendDepth: 4, RecvDepth: 4}, r.PrivateData())
			accepted <- acceptResult{c: c, req: r, err: err}
		}
	}()
	type dialed struct {
		c   rdma.Conn
		idx byte
	}
	var ds []dialed
	var as []rdma.Conn
	defer func() {
		for _, d := range ds {
			d.c.Close()
		}
		for _, a := range as {
			a.Close()
		}
	}()
	byIdx := map[byte]rdma.Conn{}
	for i := range n {
		c, rep, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{SendDepth: 4, RecvDepth: 4}, []byte{byte(i)})
		if err != nil {
			t.Fatalf("Dial %d: %v", i, err)
		}
		if len(rep) != 1 || rep[0] != byte(i) {
			t.Fatalf("Dial %d: reply private data %x, want %02x", i, rep, i)
		}
		ds = append(ds, dialed{c, byte(i)})
	}
	for range n {
		r := <-accepted
		if r.err != nil {
			t.Fatal(r.err)
		}
		as = append(as, r.c)
		byIdx[r.req.PrivateData()[0]] = r.c
	}
	rb := e.reg(e.a, n, lw, 0)
	sb := e.reg(e.b, n, 0, 0)
	for i := range n {
		sb.Bytes()[i] = byte(i) ^ 0x5a
		if err := byIdx[byte(i)].PostRecv(recv(uint64(i), rb, i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range ds {
		if err := d.c.PostSend(send(uint64(d.idx), sb, int(d.idx), 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range ds {
		want(t, e.pollN(d.c, 1)[0], uint64(d.idx), rdma.OpSend, rdma.StatusSuccess)
		want(t, e.pollN(byIdx[d.idx], 1)[0], uint64(d.idx), rdma.OpRecv, rdma.StatusSuccess)
		if rb.Bytes()[d.idx] != d.idx^0x5a {
			t.Fatalf("connection %d delivered %#x, want %#x", d.idx, rb.Bytes()[d.idx], d.idx^0x5a)
		}
	}
	for i, d := range ds {
		if i%2 == 0 {
			d.c.Close()
		} else {
			byIdx[d.idx].Close()
		}
	}
	for _, d := range ds {
		e.waitDone(d.c, fmt.Sprintf("dialer %d", d.idx))
		e.waitDone(byIdx[d.idx], fmt.Sprintf("acceptor %d", d.idx))
	}
}

func testGoroutineLeak(t *testing.T, f Factory) {
	before := runtime.NumGoroutine()
	func() {
		e := newEnv(t, f)
		d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		pingPong(e, d, a)
		tgt := e.reg(e.a, 4096, all, 0)
		if err := d.PostSend(rdmaWR(1, rdma.OpRDMAWrite, sge(e.reg(e.b, 4096, 0, 1), 0, 4096), tgt, 0)); err != nil {
			t.Fatal(err)
		}
		e.pollN(d, 1)
		d2, a2 := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		d2.Close()
		e.waitDone(a2, "acceptor")
		// A rejected request and a failed dial.
		go func() {
			if r, err := e.l.Accept(e.ctx); err == nil {
				r.Reject(nil)
			}
		}()
		if c, _, err := e.b.Dial(e.ctx, e.addr, rdma.QPConfig{}, nil); err == nil {
			c.Close()
			t.Fatal("Dial succeeded against a rejecting listener")
		}
		e.l.Close()
		e.a.Close()
		e.b.Close()
		e.waitDone(d, "dialer")
		e.waitDone(a, "acceptor")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return
		}
		if time.Now().After(deadline) {
			var sb strings.Builder
			pprof.Lookup("goroutine").WriteTo(&sb, 1)
			t.Fatalf("%d goroutines before, %d after closing everything:\n%s", before, now, sb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
