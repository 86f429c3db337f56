package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// ErrQueueFull reports that Submit found no free command slot or no credit
// (req_lim) on the channel it picked; Execute would have waited for one.
var ErrQueueFull = errors.New("srp initiator: no command slot or credit free")

// watchdogTicks is how many watchdog periods make Options.CommandTimeout
// for submitted commands: a command times out between CommandTimeout and
// (watchdogTicks+1)/watchdogTicks of it, as the Linux block layer rounds
// request timeouts up to its timer's next tick (blk_add_timer).
const watchdogTicks = 4

// Submit starts cmd on one of the session's channels and returns without
// waiting for its response: the asynchronous form of Execute, for callers
// that keep many commands in flight from few goroutines (as fio's
// asynchronous engines do). done is called exactly once, with nil when the
// target responded (res then holds the outcome, as Execute returns it) or
// with the error Execute would return: ErrChannelDown when the channel went
// down first (Submit does not re-issue the command), ErrAborted after a
// timeout (Options.CommandTimeout, with ABORT TASK as in Execute) or a
// LOGICAL UNIT RESET. cmd, its data and res belong to the command until
// done runs. Close ends the submitted commands before it returns, except
// those being aborted after a timeout, whose ABORT TASK ends first.
// done must not call Close.
//
// done runs on the channel's completion goroutine when the response
// arrives, with the completions of the same batch: it must not block, and
// it may call Submit, whose SRP_CMDs then go out together in one post
// (rdma.Doorbeller) after the batch. After a timeout or a channel loss it
// runs on a goroutine of its own.
//
// Submit itself never waits: it returns ErrQueueFull when the channel has
// no free slot or credit, ErrChannelDown while the session reconnects, the
// session's ErrFastIOFail, ErrDevLoss or ErrClosed, and Execute's mapping
// errors; done is then not called.
func (s *Session) Submit(cmd *Command, res *Result, done func(error)) error {
	var r *request
	// The first choice is the channel res last completed on while it is
	// handling completions (so a callback submitting the next command
	// into the same Result): the command goes out with that batch's
	// doorbell.
	ch := res.ch
	if ch != nil && ch.s == s && ch.draining.Load() && !ch.down() {
		r = ch.takeNow()
	}
	for try, n := 0, 1; r == nil && try < n; try++ {
		var err error
		if ch, n, err = s.pickNow(); err != nil {
			return err
		}
		r = ch.takeNow()
	}
	if r == nil {
		return ErrQueueFull
	}
	ch.startWatchdog()
	r.lun = cmd.LUN
	r.activate(2)
	n, inLen, err := ch.build(r, cmd)
	if err != nil {
		return ch.unissue(r, err)
	}
	ch.mu.Lock()
	if ch.down() {
		// Gone down before the watchdog could see this command.
		ch.mu.Unlock()
		return ch.unissue(r, ErrChannelDown)
	}
	r.cb, r.res, r.inLen, r.tick, r.posting = done, res, inLen, ch.tick, true
	tag := r.tag
	ch.mu.Unlock()
	err = r.postAsync(n)
	ch.mu.Lock()
	if err == nil {
		// The command may have completed meanwhile, and its slot been
		// submitted again by the callback: the tag tells.
		if r.tag == tag {
			r.posting = false
		}
		ch.mu.Unlock()
		return nil
	}
	// Not posted: no response can have come.
	r.posting = false
	owned := r.cb != nil
	r.cb, r.res, r.active = nil, nil, false
	ch.mu.Unlock()
	if !owned {
		// The channel's loss already finished the command.
		return nil
	}
	return ch.unissue(r, err)
}

// pickNow is pick without waiting: the next live channel in turn and how
// many the session has, or the reason there is none (ErrChannelDown while
// the session is blocked).
func (s *Session) pickNow() (*channel, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case StateRunning:
		ch := s.chans[int(s.rr.Add(1))%len(s.chans)]
		if ch.down() {
			return nil, 0, ErrChannelDown
		}
		return ch, len(s.chans), nil
	case StateFailFast:
		return nil, 0, fmt.Errorf("%w (last error: %v)", ErrFastIOFail, s.lastErr)
	case StateLost:
		return nil, 0, fmt.Errorf("%w (last error: %v)", ErrDevLoss, s.lastErr)
	case StateClosed:
		return nil, 0, ErrClosed
	default:
		return nil, 0, ErrChannelDown
	}
}

// takeNow takes a free command slot and a credit of the channel, or
// returns nil when either is lacking.
func (ch *channel) takeNow() *request {
	var r *request
	select {
	case r = <-ch.free:
	default:
		return nil
	}
	if !ch.tryTakeCredit(tmfReserve) {
		ch.free <- r
		return nil
	}
	return r
}

// postAsync posts a submitted command's SRP_CMD. On a connection with a
// doorbell the post is deferred while the channel's completions are being
// handled: the handler rings once after the batch (drain), so that the
// commands its callbacks submit go out in one write.
func (r *request) postAsync(n int) error {
	r.sge[0].Length = n
	r.wr[0] = rdma.SendWR{ID: wrSend | uint64(r.idx), Op: rdma.OpSend, Local: r.sge[:], Signaled: true}
	b, ok := r.ch.conn.(rdma.Doorbeller)
	if !ok {
		return r.queue(r.ch.conn.PostSend)
	}
	if err := r.queue(b.PostSendDeferred); err != nil {
		return err
	}
	// deferred is set before draining is read, and drain clears draining
	// before it reads deferred: one of the two rings.
	r.ch.deferred.Store(true)
	if !r.ch.draining.Load() {
		b.Doorbell()
	}
	return nil
}

// finishSubmitted completes a submitted command whose response arrived
// (receiveRsp, after it took cb from r): the result into the caller's
// Result, the slot back, then the callback.
func (ch *channel) finishSubmitted(r *request, cb func(error)) {
	res := r.res
	r.res = nil
	ch.fill(r, res, r.inLen)
	res.ch = ch
	r.unmap()
	r.put()
	cb(nil)
}

// startWatchdog starts the channel's watchdog once: it times submitted
// commands out and ends them when the channel goes down.
func (ch *channel) startWatchdog() {
	ch.watchdogOnce.Do(func() {
		ch.watchdogOn.Store(true)
		go ch.watchdog()
	})
}

// watchdog ticks every CommandTimeout/watchdogTicks; a submitted command
// that has seen more than watchdogTicks ticks (so at least CommandTimeout
// old) is aborted (abort, on a goroutine of
// its own). When the channel goes down it finishes every submitted command
// still waiting with ErrChannelDown (ErrClosed when the session was
// closed).
func (ch *channel) watchdog() {
	defer close(ch.watchdogDone)
	d := ch.s.opts.CommandTimeout
	var tickC <-chan time.Time
	var t Timer
	if d > 0 {
		t = ch.s.clock.NewTimer(max(d/watchdogTicks, time.Millisecond))
		defer t.Stop()
		tickC = t.C()
	}
	for {
		select {
		case <-ch.dead:
			err := ErrChannelDown
			if ch.s.State() == StateClosed {
				err = ErrClosed
			}
			ch.endSubmitted(err)
			return
		case <-tickC:
		}
		t.Reset(max(d/watchdogTicks, time.Millisecond))
		ch.mu.Lock()
		ch.tick++
		for i := range ch.reqs {
			r := &ch.reqs[i]
			if r.kind != slotCmd || !r.active || r.cb == nil || ch.tick-r.tick <= watchdogTicks {
				continue
			}
			// The waiting passes to a goroutine, as Execute's: the
			// response, if it comes now, is delivered on r.done.
			cb, res := r.cb, r.res
			r.cb, r.res = nil, nil
			go func() {
				cb(ch.abort(r, r.lun, context.DeadlineExceeded, res, r.inLen))
			}()
		}
		ch.mu.Unlock()
	}
}

// endSubmitted finishes every submitted command still waiting with err:
// the channel is down and no response will come for them.
func (ch *channel) endSubmitted(err error) {
	var ended []*request
	var cbs []func(error)
	ch.mu.Lock()
	for i := range ch.reqs {
		r := &ch.reqs[i]
		if r.kind == slotCmd && r.active && r.cb != nil {
			ended = append(ended, r)
			cbs = append(cbs, r.cb)
			r.cb, r.res, r.active = nil, nil, false
		}
	}
	ch.mu.Unlock()
	endAll(ended, cbs, err)
}

// endAll finishes submitted commands taken from their slots with err.
func endAll(ended []*request, cbs []func(error), err error) {
	for i, r := range ended {
		r.unmap()
		r.put()
		cbs[i](err)
	}
}
