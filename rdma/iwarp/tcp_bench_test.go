package iwarp

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// BenchmarkVsTCP compares the data path with raw TCP on loopback, in one
// run:
//
//   - TCP/<size>: a net.Conn writer goroutine writing size-byte buffers and a
//     reader doing io.ReadFull of size bytes (the ceiling: iWARP adds the
//     framing, placement and completions on top of this).
//   - Write/<size>, Read/<size>: pipelined RDMA WRITEs (READs) of size bytes,
//     16 outstanding (READs: the ORD), each completion awaited in turn.
//   - Send64B: pipelined 64-byte SENDs, 64 outstanding, the receiver reposting
//     in its own goroutine (message rate: see ns/op).
//
// Write and Read report "%tcp": their bandwidth as a percentage of raw TCP
// moving the same bytes in the same size-byte writes and reads, measured
// right after each (timer stopped), so both see the same machine load.
//
//	go test -run '^$' -bench VsTCP -benchtime 2s ./rdma/iwarp
func BenchmarkVsTCP(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		name := sizeName(size)
		b.Run("TCP/"+name, func(b *testing.B) {
			b.SetBytes(int64(size))
			d := tcpStream(b, size, b.N)
			b.ReportMetric(float64(size)*float64(b.N)/d.Seconds()/1e6, "MB/s-tcp")
		})
		for _, op := range []rdma.Opcode{rdma.OpRDMAWrite, rdma.OpRDMARead} {
			opName := "Write/"
			if op == rdma.OpRDMARead {
				opName = "Read/"
			}
			b.Run(opName+name, func(b *testing.B) {
				benchPipelined(b, Config{}, op, size, 16)
				b.StopTimer()
				rdmaTime := b.Elapsed()
				tcpTime := tcpStream(b, size, b.N)
				b.ReportMetric(100*tcpTime.Seconds()/rdmaTime.Seconds(), "%tcp")
			})
		}
	}
	b.Run("Send64B", func(b *testing.B) { benchSendRate(b, Config{}, 64, 64) })
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// tcpStream sends n size-byte buffers over a loopback TCP connection (as the
// iWARP provider sets it up: TCP_NODELAY) and returns the time until the
// reader has them all.
func tcpStream(tb testing.TB, size, n int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	w, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	w.(*net.TCPConn).SetNoDelay(true)
	r, ok := <-accepted
	if !ok {
		tb.Fatal("accept failed")
	}
	defer r.Close()
	r.(*net.TCPConn).SetNoDelay(true)
	stop := context.AfterFunc(ctx, func() { r.Close(); w.Close() })
	defer stop()
	wbuf, rbuf := make([]byte, size), make([]byte, size)
	werr := make(chan error, 1)
	start := time.Now()
	go func() {
		for range n {
			if _, err := w.Write(wbuf); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for range n {
		if _, err := io.ReadFull(r, rbuf); err != nil {
			tb.Fatal(err)
		}
	}
	el := time.Since(start)
	if err := <-werr; err != nil {
		tb.Fatal(err)
	}
	return el
}

// benchSendRate keeps depth SENDs of size bytes in flight; a goroutine at
// the acceptor polls and reposts the receives. A SEND is posted only against
// a receive known to be posted (a credit, as SRP's req_lim): iWARP has no
// RNR retry, so a SEND overtaking the reposting would be a Terminate.
func benchSendRate(b *testing.B, cfg Config, size, depth int) {
	p := connect(b, cfg, cfg, "127.0.0.1:0", rdma.QPConfig{SendDepth: 2 * depth, RecvDepth: 2 * depth})
	cdev, sdev := p.client.(*conn).dev, p.server.(*conn).dev
	src := mustReg(b, nil, cdev, make([]byte, size), 0)
	dst := mustReg(b, nil, sdev, make([]byte, size*2*depth), rdma.AccessLocalWrite)
	for i := range 2 * depth {
		if err := p.server.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: dst, Offset: i * size, Length: size}}); err != nil {
			b.Fatal(err)
		}
	}
	credits := make(chan struct{}, 2*depth)
	for range 2 * depth {
		credits <- struct{}{}
	}
	ctx, cancel := context.WithCancel(testCtx(b))
	defer cancel()
	rxErr := make(chan error, 1)
	go func() {
		var out [64]rdma.Completion
		for {
			n, err := p.server.Poll(ctx, out[:])
			if err != nil {
				rxErr <- nil
				return
			}
			for _, c := range out[:n] {
				if c.Status != rdma.StatusSuccess {
					rxErr <- &rdma.TerminateError{Detail: c.Status.String()}
					return
				}
				if err := p.server.PostRecv(rdma.RecvWR{ID: c.ID, Local: rdma.SGE{MR: dst, Offset: int(c.ID) * size, Length: size}}); err != nil {
					rxErr <- err
					return
				}
				credits <- struct{}{}
			}
		}
	}()
	wr := rdma.SendWR{Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: src, Length: size}}}
	var out [64]rdma.Completion
	b.SetBytes(int64(size))
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			select {
			case <-credits:
			default:
				if posted > done {
					goto poll // collect completions while the receiver reposts
				}
				select {
				case <-credits:
				case err := <-rxErr:
					b.Fatalf("receiver: %v", err)
				case <-ctx.Done():
					b.Fatal(ctx.Err())
				}
			}
			if err := p.client.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
	poll:
		n, err := p.client.Poll(ctx, out[:])
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range out[:n] {
			if c.Status != rdma.StatusSuccess {
				b.Fatalf("completion %+v", c)
			}
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	cancel()
	if err := <-rxErr; err != nil {
		b.Fatal(err)
	}
}
