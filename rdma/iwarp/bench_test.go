package iwarp

import (
	"context"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// benchPipelined keeps depth SENDs (size bytes), RDMA WRITEs or READs in flight
// from the dialer to the acceptor, reposting receives as they complete: the
// shape of an SRP target's data path (the writer coalesces the FPDUs of
// several work requests into one writev).
func benchPipelined(b *testing.B, cfg Config, op rdma.Opcode, size, depth int) {
	p := connect(b, cfg, cfg, "127.0.0.1:0", rdma.QPConfig{SendDepth: 2 * depth, RecvDepth: 2 * depth})
	cdev, sdev := p.client.(*conn).dev, p.server.(*conn).dev
	// src is the RDMA READ sink too; dst the WRITE and READ target.
	src := mustReg(b, nil, cdev, make([]byte, size), rdma.AccessLocalWrite)
	dst := mustReg(b, nil, sdev, make([]byte, size*depth), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if op == rdma.OpSend {
		for i := range depth {
			if err := p.server.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: dst, Offset: i * size, Length: size}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	wr := rdma.SendWR{Op: op, Signaled: true, Local: []rdma.SGE{{MR: src, Length: size}},
		Remote: rdma.RemoteAddr{Addr: dst.Addr(), RKey: dst.RKey()}}
	var out [64]rdma.Completion
	b.SetBytes(int64(size))
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if err := p.client.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		if op == rdma.OpSend {
			// Receive side: repost what completed (non-blocking drain).
			for {
				pctx, cancel := context.WithCancel(ctx)
				cancel()
				n, _ := p.server.Poll(pctx, out[:])
				if n == 0 {
					break
				}
				for _, c := range out[:n] {
					if err := p.server.PostRecv(rdma.RecvWR{ID: c.ID, Local: rdma.SGE{MR: dst, Offset: int(c.ID) * size, Length: size}}); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
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
}

func BenchmarkPipelined(b *testing.B) {
	for _, m := range []struct {
		name string
		cfg  Config
	}{{"confirmed", Config{}}, {"complete-on-transmit", Config{CompleteOnTransmit: true}}, {"crc", Config{CRC: true}}} {
		b.Run(m.name+"/Write64KiB", func(b *testing.B) { benchPipelined(b, m.cfg, rdma.OpRDMAWrite, 64<<10, 16) })
		b.Run(m.name+"/Write4KiB", func(b *testing.B) { benchPipelined(b, m.cfg, rdma.OpRDMAWrite, 4<<10, 32) })
	}
}
