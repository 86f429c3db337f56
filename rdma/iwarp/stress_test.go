package iwarp

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// TestStressCloseUnderLoad runs traffic in both directions on several
// connections (SENDs, WRITEs, READs) and closes each one from a random side
// at a random moment: every Poll must end with rdma.ErrClosed after flushed
// or successful completions only, and no goroutine may be left behind.
func TestStressCloseUnderLoad(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := testCtx(t)
	for round := range 4 {
		sdev, cdev := NewDevice(Config{CRC: round%2 == 1}), NewDevice(Config{})
		ln, err := sdev.Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		const nconn = 4
		var wg sync.WaitGroup
		for i := range nconn {
			ch := make(chan rdma.Conn, 1)
			go func() {
				r, err := ln.Accept(ctx)
				if err != nil {
					ch <- nil
					return
				}
				c, _ := r.Accept(ctx, rdma.QPConfig{SendDepth: 32, RecvDepth: 32}, nil)
				ch <- c
			}()
			cc, _, err := cdev.Dial(ctx, ln.Addr().String(), rdma.QPConfig{SendDepth: 32, RecvDepth: 32}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sc := <-ch
			if sc == nil {
				t.Fatal("accept failed")
			}
			r := rand.New(rand.NewPCG(uint64(round), uint64(i)))
			closeAfter := time.Duration(r.IntN(30)) * time.Millisecond
			closer := []rdma.Conn{cc, sc}[r.IntN(2)]
			ends := [2]struct {
				c   rdma.Conn
				dev *Device
			}{{cc, cdev}, {sc, sdev}}
			for k, end := range ends {
				peerDev := ends[1-k].dev
				seed := r.Uint64()
				wg.Add(1)
				go func() {
					defer wg.Done()
					drive(t, ctx, end.c, end.dev, peerDev, seed)
				}()
			}
			time.AfterFunc(closeAfter, func() { closer.Close() })
		}
		wg.Wait()
		sdev.Close()
		cdev.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines, %d before\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// drive posts receives and a mix of work on c until it goes down, then
// drains it.
func drive(t *testing.T, ctx context.Context, c rdma.Conn, dev, peerDev *Device, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	buf, _ := dev.Register(make([]byte, 1<<16), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	// The peer's region of the same shape: RDMA targets.
	tgt, _ := peerDev.Register(make([]byte, 1<<16), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	for i := range 16 {
		c.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: buf, Offset: i * 4096, Length: 4096}})
	}
	var out [16]rdma.Completion
	id := uint64(100)
	for {
		select {
		case <-c.Done():
		default:
			n := 1 + r.IntN(3000)
			op := []rdma.Opcode{rdma.OpRDMAWrite, rdma.OpRDMARead, rdma.OpRDMAWrite}[r.IntN(3)]
			wr := rdma.SendWR{ID: id, Op: op, Signaled: r.IntN(2) == 0, Local: []rdma.SGE{{MR: buf, Offset: 1 << 15, Length: n}},
				Remote: rdma.RemoteAddr{Addr: tgt.Addr() + uint64(r.IntN(1<<15)), RKey: tgt.RKey()}}
			if op == rdma.OpRDMARead {
				wr.Signaled = true
			}
			if err := c.PostSend(wr); err != nil && !errors.Is(err, rdma.ErrQueueFull) && !errors.Is(err, rdma.ErrClosed) {
				t.Errorf("PostSend: %v", err)
				return
			}
			id++
		}
		pctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		n, err := c.Poll(pctx, out[:])
		cancel()
		for _, comp := range out[:n] {
			if comp.Status != rdma.StatusSuccess && comp.Status != rdma.StatusFlushed {
				t.Errorf("completion %+v", comp)
			}
			if comp.Op == rdma.OpRecv && comp.Status == rdma.StatusSuccess {
				c.PostRecv(rdma.RecvWR{ID: comp.ID, Local: rdma.SGE{MR: buf, Offset: int(comp.ID) * 4096, Length: 4096}})
			}
		}
		if errors.Is(err, rdma.ErrClosed) {
			c.Close()
			return
		}
		if ctx.Err() != nil {
			t.Error("deadline")
			return
		}
	}
}
