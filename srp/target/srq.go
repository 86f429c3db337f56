package target

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

// recvRing is a set of receive buffers in one registered region: n slots
// of stride bytes; the IU of slot i starts at base + i*stride + align, so
// immediate data at the offset the ring was laid out for lands 512-byte
// aligned (ib_srpt srpt_alloc_ioctx_ring's alignment_offset). A channel
// owns its ring; the port owns the ring of its shared receive queue.
type recvRing struct {
	mr     rdma.MemoryRegion
	base   int // offset of slot 0 in mr (a 512-byte aligned address)
	stride int // bytes between slots, a multiple of 512
	align  int // offset of the IU within its slot
	size   int // bytes of one IU buffer (MaxReqSize)
	n      int // slots
	// lens holds the byte count of the IU last received in each slot. An
	// element is written only by the channel whose receive completed into
	// the slot, before the slot is posted again.
	lens []int
}

// newRecvRing registers a ring of n buffers of size bytes laid out for
// immediate data at offset imm (0: no alignment).
func (p *Port) newRecvRing(n, size, imm int) (*recvRing, error) {
	r := &recvRing{size: size, n: n, lens: make([]int, n)}
	if imm > 0 {
		r.align = (imm+511)&^511 - imm
	}
	r.stride = (r.align + size + 511) &^ 511
	buf := make([]byte, n*r.stride+512)
	r.base = int((512 - uintptr(unsafe.Pointer(&buf[0]))&511) & 511)
	var err error
	if r.mr, err = p.register(buf, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *recvRing) slot(i int) []byte {
	off := r.base + i*r.stride + r.align
	return r.mr.Bytes()[off : off+r.size]
}

func (r *recvRing) wrs(slots ...int) []rdma.RecvWR {
	wrs := make([]rdma.RecvWR, len(slots))
	for i, s := range slots {
		wrs[i] = r.wr(s)
	}
	return wrs
}

// wr is the receive work request of slot s.
func (r *recvRing) wr(s int) rdma.RecvWR {
	return rdma.RecvWR{ID: uint64(s), Local: rdma.SGE{MR: r.mr, Offset: r.base + s*r.stride + r.align, Length: r.size}}
}

func allSlots(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// ErrNoSRQ is returned by NewPort when Config.UseSRQ is set and the device
// does not implement rdma.SRQDevice.
var ErrNoSRQ = errors.New("srp target: use_srq: the RDMA device has no shared receive queues")

// setupSRQ creates the port's shared receive queue (ib_srpt
// srpt_alloc_srq: one SRQ of srp_srq_size buffers per device, posted
// whole) when the configuration asks for one.
func (p *Port) setupSRQ() error {
	if !p.cfg.UseSRQ {
		return nil
	}
	sd, ok := p.dev.(rdma.SRQDevice)
	if !ok {
		return fmt.Errorf("%w (device %T)", ErrNoSRQ, p.dev)
	}
	srq, err := sd.CreateSRQ(p.cfg.SRQSize)
	if err != nil {
		return fmt.Errorf("srp target: use_srq: create a shared receive queue of %d buffers: %w", p.cfg.SRQSize, err)
	}
	// Laid out for ib_srp's immediate data offset, as the receive ring of
	// an IU-form login is.
	ring, err := p.newRecvRing(p.cfg.SRQSize, p.cfg.MaxReqSize, srp.DefaultImmDataOffset)
	if err != nil {
		_ = srq.Close()
		return fmt.Errorf("srp target: use_srq: receive buffers: %w", err)
	}
	if err := srq.PostRecv(ring.wrs(allSlots(ring.n)...)...); err != nil {
		_ = srq.Close()
		_ = ring.mr.Deregister()
		return fmt.Errorf("srp target: use_srq: post receive buffers: %w", err)
	}
	p.srq, p.srqRing = srq, ring
	return nil
}

// releaseSRQ destroys the shared receive queue and deregisters its
// buffers once no channel uses it.
func (p *Port) releaseSRQ() {
	p.mu.Lock()
	srq, ring := p.srq, p.srqRing
	if len(p.channels) > 0 || srq == nil {
		p.mu.Unlock()
		return
	}
	p.srq, p.srqRing = nil, nil
	p.mu.Unlock()
	if err := srq.Close(); err != nil {
		p.log.Warn("destroying the shared receive queue", "err", err)
	}
	_ = ring.mr.Deregister()
}
