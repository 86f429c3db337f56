//go:build verbs && cgo

package verbs

// #include "verbs.h"
import "C"

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/gosrp/gosrp/rdma"
)

// srqBit marks, with recvBit, the work request IDs of receives posted to a
// shared receive queue; the rest of the ID is the SRQ's post sequence.
const srqBit = uint64(1) << 62

var _ rdma.SRQDevice = (*Device)(nil)

// CreateSRQ creates a shared receive queue (ibv_create_srq, one SGE per
// receive) holding at most depth receives, 1 up to the device's max_srq_wr.
// Queue pairs dialled or accepted with it in QPConfig.SRQ take their
// receives from it; each such connection's completion queue is sized for
// depth receive completions besides its sends. Errors: rdma.ErrClosed after
// Close, a range error for depth, or the failed call.
func (d *Device) CreateSRQ(depth int) (rdma.SRQ, error) {
	if d.lim.maxSRQWR <= 0 {
		return nil, fmt.Errorf("verbs: %s has no shared receive queues (max_srq 0)", d.info.Name)
	}
	if depth < 1 || depth > d.lim.maxSRQWR {
		return nil, fmt.Errorf("verbs: SRQ depth %d out of range 1..%d (max_srq_wr of %s)", depth, d.lim.maxSRQWR, d.info.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	cs := C.gs_create_srq(d.pd, C.int(depth))
	if cs == nil {
		return nil, fmt.Errorf("verbs: ibv_create_srq of %d receives on %s failed", depth, d.info.Name)
	}
	s := &srq{d: d, s: cs, depth: depth, ids: map[uint64]uint64{}, users: map[*conn]struct{}{}}
	d.srqs[s] = struct{}{}
	return s, nil
}

// srq implements rdma.SRQ on an ibv_srq.
//
// The adapter does not report when it takes a receive from the SRQ, only its
// completion on the consuming QP's CQ: a buffer counts as posted (Posted, and
// against the depth) until that completion has been polled. A receive that a
// QP consumed but that never completes (its QP destroyed first) keeps its
// slot until Close.
type srq struct {
	d     *Device
	s     *C.struct_ibv_srq // nil after Close
	depth int

	mu    sync.Mutex
	seq   uint64            // next post sequence number
	ids   map[uint64]uint64 // post sequence -> RecvWR.ID, for buffers not yet completed
	users map[*conn]struct{}
}

func (s *srq) attach(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return false
	}
	s.users[c] = struct{}{}
	return true
}

func (s *srq) detach(c *conn) {
	s.mu.Lock()
	delete(s.users, c)
	s.mu.Unlock()
}

// complete returns the RecvWR.ID of the receive posted as seq and frees its
// slot.
func (s *srq) complete(seq uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[seq]
	delete(s.ids, seq)
	return id
}

// PostRecv posts receives (ibv_post_srq_recv), up to 64 per call into the
// library. It stops at the first it cannot post, leaving the earlier ones
// posted: rdma.ErrInvalidWR (a region of another device, deregistered, or
// without local write access; an SGE outside its region), rdma.ErrQueueFull
// (depth receives posted and not completed, or the adapter's ENOMEM),
// rdma.ErrClosed.
func (s *srq) PostRecv(wrs ...rdma.RecvWR) error { return inChunks(wrs, s.postRecv) }

func (s *srq) postRecv(wrs []rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return rdma.ErrClosed
	}
	var ids [maxChunk]C.uint64_t
	var sges [maxChunk]C.struct_ibv_sge
	n := 0
	var stop error
	for _, w := range wrs {
		if len(s.ids)+n >= s.depth {
			stop = rdma.ErrQueueFull
			break
		}
		sg, err := s.d.recvSGE(w)
		if err != nil {
			stop = err
			break
		}
		ids[n], sges[n] = C.uint64_t((s.seq+uint64(n))|recvBit|srqBit), sg
		n++
	}
	if n == 0 {
		return stop
	}
	// Map the IDs first: a completion may be polled as soon as they are posted.
	for i := range n {
		s.ids[s.seq+uint64(i)] = wrs[i].ID
	}
	var posted C.int
	rc := C.gs_post_recv(nil, s.s, &ids[0], &sges[0], C.int(n), &posted)
	for i := int(posted); i < n; i++ {
		delete(s.ids, s.seq+uint64(i))
	}
	s.seq += uint64(n)
	if err := postErr(rc, "ibv_post_srq_recv"); err != nil {
		return err
	}
	return stop
}

// Posted is how many receives are posted and not yet completed.
func (s *srq) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// Close destroys the SRQ (ibv_destroy_srq). It fails while a queue pair
// created on it still exists: a connection's QP is freed once it is closed
// and Poll has drained it (or at Device.Close). Safe to call more than once.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return nil
	}
	if n := len(s.users); n > 0 {
		return fmt.Errorf("verbs: shared receive queue still used by %d queue pairs (close and drain them first)", n)
	}
	rc := C.ibv_destroy_srq(s.s)
	s.s = nil
	s.ids = nil
	s.d.mu.Lock()
	delete(s.d.srqs, s)
	s.d.mu.Unlock()
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_destroy_srq: %w", syscall.Errno(rc))
	}
	return nil
}
