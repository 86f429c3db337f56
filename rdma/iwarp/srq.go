package iwarp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosrp/gosrp/rdma"
)

// ErrSRQInUse is returned by SRQ.Close while queue pairs still use the SRQ
// (ibv_destroy_srq fails with EBUSY then).
var ErrSRQInUse = errors.New("iwarp: shared receive queue in use by queue pairs")

// srq is a shared receive queue (rdma.SRQ): a ring of receive work requests
// that Sends arriving on any of its connections consume in posting order
// (RFC 5041 §5.3 untagged queue 0, the buffer taken from the SRQ instead of
// the connection's own receive queue).
//
// Lock order: a connection's mu before the SRQ's mu.
type srq struct {
	dev *Device

	mu     sync.Mutex
	ring   []rdma.RecvWR // depth entries
	head   int
	n      int  // posted, not yet consumed
	held   int  // posted or consumed with the completion not yet polled: at most depth
	users  int  // connections made on the SRQ and not yet closed
	closed bool // destroyed
}

var (
	_ rdma.SRQDevice = (*Device)(nil)
	_ rdma.SRQ       = (*srq)(nil)
)

// CreateSRQ creates a shared receive queue of depth receive work requests
// (ibv_create_srq max_wr). A depth below 1 fails with rdma.ErrInvalidWR; a
// closed device with rdma.ErrClosed. Connections take their receives from it
// when QPConfig.SRQ names it; a Send arriving while it is empty is answered
// with the Terminate for an empty receive queue (DDP 1/2/0x02, RFC 5041
// §7.2), as on a connection's own queue.
func (d *Device) CreateSRQ(depth int) (rdma.SRQ, error) {
	if depth < 1 {
		return nil, fmt.Errorf("iwarp: SRQ depth %d: %w", depth, rdma.ErrInvalidWR)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, rdma.ErrClosed
	}
	return &srq{dev: d, ring: make([]rdma.RecvWR, depth)}, nil
}

// PostRecv posts receive buffers in order (see rdma.SRQ). A slot stays held
// from posting until the completion of the Send that consumed the buffer is
// polled, as on a connection's own receive queue.
func (s *srq) PostRecv(wrs ...rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, wr := range wrs {
		if s.closed {
			return rdma.ErrClosed
		}
		if err := s.dev.checkSGE(wr.Local, true); err != nil {
			return err
		}
		if s.held >= len(s.ring) {
			return rdma.ErrQueueFull
		}
		s.ring[(s.head+s.n)%len(s.ring)] = wr
		s.n++
		s.held++
	}
	return nil
}

// Posted is how many buffers are posted and not yet consumed.
func (s *srq) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Close destroys the SRQ; buffers still posted are dropped without
// completions. It fails with ErrSRQInUse while connections made on it are
// not closed. Later calls return nil.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.users > 0 {
		return fmt.Errorf("%w (%d)", ErrSRQInUse, s.users)
	}
	s.closed = true
	clear(s.ring)
	s.n = 0
	return nil
}

// take removes the oldest posted buffer for an arriving Send.
func (s *srq) take() (rdma.RecvWR, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 || s.closed {
		return rdma.RecvWR{}, false
	}
	wr := s.ring[s.head]
	s.ring[s.head] = rdma.RecvWR{}
	s.head = (s.head + 1) % len(s.ring)
	s.n--
	return wr, true
}

// release frees the slot of a consumed buffer whose completion was polled.
func (s *srq) release() {
	s.mu.Lock()
	if s.held > 0 {
		s.held--
	}
	s.mu.Unlock()
}

// attach counts a connection being made on the SRQ; it fails once the SRQ
// is closed.
func (s *srq) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("iwarp: SRQ destroyed: %w", rdma.ErrClosed)
	}
	s.users++
	return nil
}

func (s *srq) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// srqOf returns the SRQ a QPConfig names, which must be one of d's
// (rdma.ErrInvalidWR otherwise), attached for a new connection; nil when the
// QPConfig names none. The caller detaches it if the connection is not made.
func (d *Device) srqOf(q rdma.QPConfig) (*srq, error) {
	if q.SRQ == nil {
		return nil, nil
	}
	s, ok := q.SRQ.(*srq)
	if !ok || s.dev != d {
		return nil, fmt.Errorf("iwarp: SRQ not created on this device: %w", rdma.ErrInvalidWR)
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}
