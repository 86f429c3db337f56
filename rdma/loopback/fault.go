package loopback

import (
	"errors"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Fault makes chosen work requests misbehave, for testing how upper layers
// cope. A send fault is checked when a send work request reaches the head of
// its send queue for the first time; a receive fault (Op rdma.OpRecv) when an
// incoming SEND consumes a receive. It hits the matching requests after
// skipping Skip of them, Count times in all, and is then spent.
//
// A receive fault completes the receive with Status (the SEND that consumed
// it fails with rdma.StatusRemoteOperation, as when a responder hits a local
// error) and the QP goes to error; with Drop it loses the connection instead
// (the receive is flushed). Delay does not apply to receives.
//
// What a hit does, in order of precedence:
//   - Drop: the connection is lost: the hit request completes with
//     rdma.StatusRetryExceeded (as when the transport's retries run out),
//     everything else flushes, and Err is ErrConnectionLost on both sides.
//   - Delay: the hit request (and, by RC ordering, everything posted after it
//     on the same send queue) waits that long, then executes normally — or
//     fails with Status if Status is set.
//   - Status (not StatusSuccess): the request completes with Status without
//     executing and the QP goes to error as on a real failure; Err is an
//     *rdma.TerminateError (Local on the requester, Code 0xff, Detail
//     "injected fault: ..."). With the QP in error, a Count above 1 matters
//     only together with Delay.
type Fault struct {
	// Op limits the fault to one opcode (rdma.OpSend, rdma.OpSendInvalidate,
	// rdma.OpRDMAWrite, rdma.OpRDMARead, or rdma.OpRecv for receives); 0
	// matches every send work request.
	Op rdma.Opcode
	// Skip is how many matching requests pass unharmed first.
	Skip int
	// Count is how many matching requests the fault hits; 0 means 1.
	Count int
	// Status is the hit request's completion status.
	Status rdma.Status
	// Delay holds the hit request back for this long before it executes.
	Delay time.Duration
	// Drop loses the connection at the hit request.
	Drop bool
}

type faultState struct {
	f         Fault
	skip, hit int // remaining
}

var errUselessFault = errors.New("loopback: fault has no Status, Delay or Drop")

func newFaultState(f Fault) (*faultState, error) {
	if f.Status == rdma.StatusSuccess && f.Delay <= 0 && !f.Drop {
		return nil, errUselessFault
	}
	if f.Skip < 0 || f.Count < 0 {
		return nil, errors.New("loopback: fault with negative Skip or Count")
	}
	if f.Op == rdma.OpRecv && !f.Drop && (f.Delay > 0 || f.Status == rdma.StatusSuccess) {
		return nil, errors.New("loopback: a receive fault needs Status or Drop, and no Delay")
	}
	n := f.Count
	if n == 0 {
		n = 1
	}
	return &faultState{f: f, skip: f.Skip, hit: n}, nil
}

// take reports whether this fault hits a request with opcode op, counting it.
// Op 0 matches send work requests only.
func (s *faultState) take(op rdma.Opcode) bool {
	if s.hit == 0 || (s.f.Op != op && (s.f.Op != 0 || op == rdma.OpRecv)) {
		return false
	}
	if s.skip > 0 {
		s.skip--
		return false
	}
	s.hit--
	return true
}

// InjectFault arms f on this connection. Faults armed on the connection are
// consulted before those of its device, in the order armed; the first that
// hits a request applies. It fails when f would do nothing or has negative
// counts.
func (c *Conn) InjectFault(f Fault) error {
	s, err := newFaultState(f)
	if err != nil {
		return err
	}
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	c.faults = append(c.faults, s)
	return nil
}

// InjectFault arms f on every connection of the device (existing and
// future): the first matching work requests on any of them, in execution
// order, are hit. Errors as Conn.InjectFault.
func (d *Device) InjectFault(f Fault) error {
	s, err := newFaultState(f)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, s)
	return nil
}

// matchFault returns the fault hitting a request with opcode op, if any.
// Called with p.mu held (device faults are guarded by dev.mu, taken after).
func (c *Conn) matchFault(op rdma.Opcode) *Fault {
	if f := takeFault(&c.faults, op); f != nil {
		return f
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	return takeFault(&d.faults, op)
}

// takeFault counts a hit of the first fault in *list that matches op and
// returns a copy of it; a fault with no hit left leaves the list.
func takeFault(list *[]*faultState, op rdma.Opcode) *Fault {
	for i, s := range *list {
		if s.take(op) {
			f := s.f
			if s.hit == 0 {
				*list = append((*list)[:i:i], (*list)[i+1:]...)
			}
			return &f
		}
	}
	return nil
}
