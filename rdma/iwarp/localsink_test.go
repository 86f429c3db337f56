package iwarp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// TestReadIntoLocalRegions: an RDMA Read whose sink is a list of local
// regions (Device.LocalRegion, no registration) goes out with a non-zero
// sink STag that names no registered region, and Read Responses that
// straddle the regions land in them in order, with MPA CRCs off and on,
// for payloads large enough to be gathered by one readv(2) and small ones
// read through the buffer.
func TestReadIntoLocalRegions(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, c := range []struct {
			pieces []int // sink regions, bytes
			fpdus  []int // Read Response payloads, bytes
		}{
			{[]int{20000, 30000, 14000}, []int{25000, 39000}},
			{[]int{1000, 1000, 1000, 500}, []int{1700, 1800}},
			{[]int{4096, 4096, 4096, 4096, 4096}, []int{20480}},
		} {
			t.Run(fmt.Sprintf("crc=%v/%v", crc, c.pieces), func(t *testing.T) {
				var flags byte
				if crc {
					flags = 0x40
				}
				p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, flags)
				if p.crc != crc {
					t.Fatalf("CRC negotiated %v, want %v", p.crc, crc)
				}
				var sgl []rdma.SGE
				var bufs [][]byte
				total := 0
				for _, n := range c.pieces {
					b := make([]byte, n)
					bufs = append(bufs, b)
					sgl = append(sgl, rdma.SGE{MR: p.dev.LocalRegion(b), Length: n})
					total += n
				}
				sinkSTag, sinkTO, size := p.postRead(9, sgl)
				if size != uint32(total) {
					t.Fatalf("Read size %d, want %d", size, total)
				}
				if sinkSTag == 0 || p.dev.lookup(sinkSTag) != nil {
					t.Fatalf("sink STag %#x: want one that is not 0 and names no registered region", sinkSTag)
				}
				want := make([]byte, total)
				for i := range want {
					want[i] = byte(i*13 + 5)
				}
				off := 0
				for i, n := range c.fpdus {
					c0 := byte(0x81)
					if i == len(c.fpdus)-1 {
						c0 = 0xc1 // Last
					}
					p.send(tagged(c0, 0x42, sinkSTag, sinkTO+uint64(off), want[off:off+n]))
					off += n
				}
				wc := pollOne(t, p.server)
				if wc.ID != 9 || wc.Status != rdma.StatusSuccess || wc.ByteLen != total {
					t.Fatalf("completion %+v", wc)
				}
				if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
					t.Fatal("the regions do not hold the Read Responses' payload in order")
				}
			})
		}
	}
}

// postRead posts RDMA Read id into the sink sgl (from remote TO 0x1000,
// STag 0x55) and reads its Read Request off the wire: it returns the
// request's sink STag, sink TO and size (RFC 5040 §4.4: sink STag, sink
// TO, size, source STag, source TO).
func (p *fakePeer) postRead(id uint64, sgl []rdma.SGE) (uint32, uint64, uint32) {
	p.t.Helper()
	if err := p.server.PostSend(rdma.SendWR{ID: id, Op: rdma.OpRDMARead, Signaled: true, Local: sgl,
		Remote: rdma.RemoteAddr{Addr: 0x1000, RKey: 0x55}}); err != nil {
		p.t.Fatal(err)
	}
	u, err := p.readFPDU()
	if err != nil {
		p.t.Fatal(err)
	}
	if u[0]&0x80 != 0 || u[1]&0x0f != opReadRequest {
		p.t.Fatalf("%x, want a Read Request", u)
	}
	return binary.BigEndian.Uint32(u[18:]), binary.BigEndian.Uint64(u[22:]), binary.BigEndian.Uint32(u[30:])
}

// TestLocalSinkCRCCheckedFirst: with MPA CRCs on, a Read Response for a
// sink of local regions (memory its consumer shares) whose CRC does not
// match ends the connection with a Terminate and leaves the sink as it
// was: the payload is checked before any of it is placed.
func TestLocalSinkCRCCheckedFirst(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 4, IRD: 4, ORD: 4}, mpaFlagCRC)
	if !p.crc {
		t.Fatal("CRC not negotiated")
	}
	a, b := make([]byte, 30000), make([]byte, 30000)
	sinkSTag, sinkTO, _ := p.postRead(1, []rdma.SGE{{MR: p.dev.LocalRegion(a), Length: len(a)}, {MR: p.dev.LocalRegion(b), Length: len(b)}})
	f := fpduBytes(tagged(0xc1, 0x42, sinkSTag, sinkTO, bytes.Repeat([]byte{0x5a}, 60000)), true)
	f[len(f)-1] ^= 0x01
	if _, err := p.nc.Write(f); err != nil {
		t.Fatal(err)
	}
	p.expectTerminate(LayerLLP, LLPTypeMPA, LLPCRCError, 0, nil)
	if !bytes.Equal(a, make([]byte, len(a))) || !bytes.Equal(b, make([]byte, len(b))) {
		t.Fatal("a payload that failed its CRC reached the sink")
	}
}
