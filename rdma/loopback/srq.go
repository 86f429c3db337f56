package loopback

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gosrp/gosrp/rdma"
)

// MaxSRQDepth is the largest depth CreateSRQ accepts, in receive work
// requests (ib_srpt's srpt_srq_size limit).
const MaxSRQDepth = 65535

// ErrSRQInUse is returned by SRQ.Close while queue pairs still use the SRQ.
var ErrSRQInUse = errors.New("loopback: shared receive queue still used by queue pairs")

var _ rdma.SRQDevice = (*Device)(nil)

// CreateSRQ creates a shared receive queue of depth receive work requests
// (1..MaxSRQDepth) on the device. Connections dialled or accepted with it in
// QPConfig.SRQ take their receives from it: an incoming SEND consumes the
// oldest buffer posted to the SRQ, whichever connection it arrives on, and
// completes through that connection's Poll. A buffer's slot is free again as
// soon as a SEND consumed it. A SEND finding the SRQ empty waits as one
// finding an empty receive queue does (RNR, see the package documentation),
// and executes when a buffer is posted to the SRQ. Errors: rdma.ErrClosed
// after Device.Close, or a range error for depth.
func (d *Device) CreateSRQ(depth int) (rdma.SRQ, error) {
	if depth < 1 || depth > MaxSRQDepth {
		return nil, fmt.Errorf("loopback: SRQ depth %d out of range 1..%d", depth, MaxSRQDepth)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	return &srq{dev: d, depth: depth, users: make(map[*Conn]struct{})}, nil
}

// srq implements rdma.SRQ. Its mutex is taken after a pair's mutex, never
// before: PostRecv releases it before executing the SENDs waiting on it.
type srq struct {
	dev   *Device
	depth int

	mu      sync.Mutex
	closed  bool
	bufs    []rdma.RecvWR      // posted, not consumed, oldest first
	users   map[*Conn]struct{} // live connections receiving through it
	waiters []*Conn            // senders whose SEND at the head waits for a buffer
}

// attach records c as a user; false when the SRQ is closed.
func (s *srq) attach(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.users[c] = struct{}{}
	return true
}

// detach forgets c (a receiving connection gone down) and sender (its peer,
// which may have been waiting). Called with the pair's mutex held.
func (s *srq) detach(c, sender *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, c)
	for i, w := range s.waiters {
		if w == sender {
			s.waiters = append(s.waiters[:i:i], s.waiters[i+1:]...)
			break
		}
	}
}

// take consumes the oldest buffer for a SEND of sender; with none posted it
// records sender as waiting and returns false. Called with sender's pair
// mutex held.
func (s *srq) take(sender *Conn) (rdma.RecvWR, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bufs) == 0 {
		for _, w := range s.waiters {
			if w == sender {
				return rdma.RecvWR{}, false
			}
		}
		s.waiters = append(s.waiters, sender)
		return rdma.RecvWR{}, false
	}
	r := s.bufs[0]
	s.bufs[0] = rdma.RecvWR{}
	s.bufs = s.bufs[1:]
	return r, true
}

// PostRecv posts receive buffers in order, then executes the SENDs that were
// waiting for one (in the order they started waiting; with
// WithAsyncExecution, on their connections' goroutines). It stops at the
// first request it cannot post, leaving the earlier ones posted, with
// rdma.ErrInvalidWR (bad SGE, region of another device or without
// AccessLocalWrite), rdma.ErrQueueFull (depth buffers posted and not
// consumed) or rdma.ErrClosed.
func (s *srq) PostRecv(wrs ...rdma.RecvWR) error {
	s.mu.Lock()
	var err error
	for i, wr := range wrs {
		if s.closed {
			err = rdma.ErrClosed
			break
		}
		if e := s.dev.validateSGE(wr.Local, rdma.AccessLocalWrite); e != nil {
			err = fmt.Errorf("loopback: SRQ recv WR %d (ID %d): %w", i, wr.ID, e)
			break
		}
		if len(s.bufs) >= s.depth {
			err = rdma.ErrQueueFull
			break
		}
		s.bufs = append(s.bufs, wr)
	}
	var waiters []*Conn
	if len(s.bufs) > 0 {
		waiters, s.waiters = s.waiters, nil
	}
	s.mu.Unlock()
	for _, w := range waiters {
		w.p.mu.Lock()
		if !w.p.down {
			w.pump()
		}
		w.p.mu.Unlock()
	}
	return err
}

// Posted is how many buffers are posted and not yet consumed.
func (s *srq) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bufs)
}

// Close destroys the SRQ, dropping the buffers still posted without
// completions. It fails with ErrSRQInUse while a connection using it is up
// (closed connections no longer count). Safe to call more than once.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if n := len(s.users); n > 0 {
		return fmt.Errorf("%w (%d)", ErrSRQInUse, n)
	}
	s.closed = true
	s.bufs = nil
	return nil
}
