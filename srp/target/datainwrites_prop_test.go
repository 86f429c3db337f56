package target

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

type plainMR struct{ b []byte }

func (m plainMR) Bytes() []byte       { return m.b }
func (m plainMR) Addr() uint64        { return 0 }
func (m plainMR) LKey() uint32        { return 0 }
func (m plainMR) RKey() uint32        { return 0 }
func (m plainMR) Access() rdma.Access { return 0 }
func (m plainMR) Deregister() error   { return nil }

type plainLocal struct{}

func (plainLocal) LocalRegion(b []byte) rdma.MemoryRegion { return plainMR{b} }

// dataInWrites over random data-in descriptors, views and MaxRDMASize:
// the RDMA WRITEs place exactly the first n bytes of the views at the
// descriptors' addresses in order, with no WRITE over MaxRDMASize bytes or
// viewMaxSGE SGEs (or the queue pair's maximum, if lower) and no empty SGE
// or WRITE.
func TestDataInWritesProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := range 300 {
		maxRDMA := 4096 + r.IntN(300<<10)
		c := &channel{cfg: Config{MaxRDMASize: maxRDMA}, local: plainLocal{}, maxSGE: r.IntN(18)}
		limSGE := viewMaxSGE
		if c.maxSGE > 0 {
			limSGE = min(limSGE, c.maxSGE)
		}
		cmd := &command{}
		total := 0
		nd := 1 + r.IntN(6)
		va := uint64(1 << 40)
		for range nd {
			l := r.IntN(200 << 10)
			if r.IntN(5) == 0 {
				l = 0
			}
			cmd.in = append(cmd.in, srp.DirectBuf{VA: va, Key: 7, Len: uint32(l)})
			va += uint64(l) + 4096
			total += l
		}
		cmd.inLen = total
		// views: total length vlen >= n
		n := total
		if total > 0 && r.IntN(3) == 0 {
			n = r.IntN(total + 1)
		}
		vlen := n + r.IntN(3)*4096
		var src []byte
		seq := r.Uint32()
		for got := 0; got < vlen; {
			l := min(1+r.IntN(70<<10), vlen-got)
			v := make([]byte, l)
			for k := range v {
				v[k] = byte(seq)
				seq = seq*31 + 7
			}
			cmd.sc.DataInViews = append(cmd.sc.DataInViews, v)
			src = append(src, v...)
			got += l
		}
		if vlen == 0 {
			continue
		}
		c.dataInWrites(cmd, n)
		// replay writes into a model of initiator memory
		dst := make([]byte, va-(1<<40))
		written := make([]bool, len(dst))
		sum := 0
		for _, wr := range cmd.wrs {
			if len(wr.Local) > limSGE || len(wr.Local) == 0 {
				t.Fatalf("it %d: %d SGEs", it, len(wr.Local))
			}
			var b []byte
			for _, s := range wr.Local {
				if s.Length == 0 {
					t.Fatalf("it %d: empty SGE", it)
				}
				b = append(b, s.Bytes()...)
			}
			if len(b) > maxRDMA || len(b) == 0 {
				t.Fatalf("it %d: WR of %d bytes (max %d)", it, len(b), maxRDMA)
			}
			for k, x := range b {
				dst[wr.Remote.Addr-(1<<40)+uint64(k)] = x
				written[wr.Remote.Addr-(1<<40)+uint64(k)] = true
			}
			sum += len(b)
		}
		if sum != n {
			t.Fatalf("it %d: wrote %d bytes, want %d", it, sum, n)
		}
		// expected: first n bytes of src across descriptors
		var got []byte
		left := n
		for _, d := range cmd.in {
			for k := 0; k < int(d.Len) && left > 0; k++ {
				x, ok := dst[d.VA-(1<<40)+uint64(k)], written[d.VA-(1<<40)+uint64(k)]
				if !ok {
					t.Fatalf("it %d: byte not written", it)
				}
				got = append(got, x)
				left--
			}
		}
		if !bytes.Equal(got, src[:n]) {
			t.Fatalf("it %d: data differs", it)
		}
	}
}
