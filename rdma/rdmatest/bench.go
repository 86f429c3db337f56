package rdmatest

import (
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Benchmark runs the provider benchmarks as sub-benchmarks of b:
//
//   - SendRecv4KiB: a 4 KiB SEND one way and a 4 KiB SEND back, per
//     iteration (one round trip; bytes counted both ways).
//   - RDMAWrite1MiB: a signaled 1 MiB RDMA WRITE, waiting for its completion.
//   - RDMARead1MiB: a signaled 1 MiB RDMA READ, waiting for its completion.
//
// The benchmark goroutine drives both ends, so a provider must make progress
// without the peer polling (as every RDMA transport does).
func Benchmark(b *testing.B, f Factory) {
	b.Run("SendRecv4KiB", func(b *testing.B) { benchSendRecv(b, f, 4096) })
	b.Run("RDMAWrite1MiB", func(b *testing.B) { benchRDMA(b, f, rdma.OpRDMAWrite, 1<<20) })
	b.Run("RDMARead1MiB", func(b *testing.B) { benchRDMA(b, f, rdma.OpRDMARead, 1<<20) })
}

func benchSendRecv(b *testing.B, f Factory, size int) {
	e := newEnv(b, f)
	d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	const ring = 8
	db, ab := e.reg(e.b, ring*size, lw, 0), e.reg(e.a, ring*size, lw, 1)
	dr, ar := e.reg(e.b, ring*size, lw, 0), e.reg(e.a, ring*size, lw, 0)
	for i := range ring {
		if err := d.PostRecv(recv(uint64(i), dr, i*size, size)); err != nil {
			b.Fatal(err)
		}
		if err := a.PostRecv(recv(uint64(i), ar, i*size, size)); err != nil {
			b.Fatal(err)
		}
	}
	// waitRecv polls c until its receive completes (the SEND's completion
	// may come before or after it), then reposts that receive.
	waitRecv := func(c rdma.Conn, rbuf rdma.MemoryRegion, sends *int) {
		var out [4]rdma.Completion
		for {
			n, err := c.Poll(e.ctx, out[:])
			if err != nil {
				b.Fatal(err)
			}
			gotRecv := false
			for _, comp := range out[:n] {
				if comp.Status != rdma.StatusSuccess {
					b.Fatalf("completion %+v", comp)
				}
				if comp.Op == rdma.OpSend {
					*sends--
					continue
				}
				if err := c.PostRecv(recv(comp.ID, rbuf, int(comp.ID)*size, size)); err != nil {
					b.Fatal(err)
				}
				gotRecv = true
			}
			if gotRecv {
				return
			}
		}
	}
	dSends, aSends := 0, 0
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		slot := i % ring
		if err := d.PostSend(send(uint64(i), db, slot*size, size)); err != nil {
			b.Fatal(err)
		}
		dSends++
		waitRecv(a, ar, &aSends)
		if err := a.PostSend(send(uint64(i), ab, slot*size, size)); err != nil {
			b.Fatal(err)
		}
		aSends++
		waitRecv(d, dr, &dSends)
	}
	b.StopTimer()
	// Collect the outstanding send completions so nothing is left posted.
	for _, p := range []struct {
		c rdma.Conn
		n *int
	}{{d, &dSends}, {a, &aSends}} {
		for *p.n > 0 {
			for _, c := range e.pollN(p.c, 1) {
				if c.Op == rdma.OpSend {
					*p.n--
				}
			}
		}
	}
}

func benchRDMA(b *testing.B, f Factory, op rdma.Opcode, size int) {
	e := newEnv(b, f)
	d, _ := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
	tgt := e.reg(e.a, size, all, 0)
	local := e.reg(e.b, size, lw, 1)
	wr := rdmaWR(1, op, sge(local, 0, size), tgt, 0)
	var out [1]rdma.Completion
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		if err := d.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if n, err := d.Poll(e.ctx, out[:]); err != nil || n != 1 || out[0].Status != rdma.StatusSuccess {
			b.Fatalf("Poll = %d, %v, %+v", n, err, out[0])
		}
	}
}
