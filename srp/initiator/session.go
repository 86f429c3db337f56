// Package initiator is gosrp's SCSI RDMA Protocol initiator: it logs in to
// an SRP target over an injected rdma.Device, runs SCSI commands on one or
// more RDMA channels, manages tags and credits, maps data buffers to SRP
// descriptors, sends task management functions and reconnects after a
// channel is lost. Its behaviour follows the Linux ib_srp driver and the
// srp_transport rport state machine (T10 SRP r16a; SRP-2 immediate data).
//
// Retry policy: a command whose channel goes down before its response
// arrives is re-issued on the next channel (at most MaxRetries times) unless
// Command.NoRetry is set; then it fails with ErrChannelDown. A command is
// never completed twice: responses are matched to tags carrying a slot
// generation, and a channel's late responses die with the channel.
package initiator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

// MaxRetries is how many times Execute re-issues a command whose channel
// went down (the SCSI midlayer's default of 5 retries).
const MaxRetries = 5

// State is the session's transport state (Linux srp_rport_state).
type State int

const (
	// StateRunning: every channel is logged in.
	StateRunning State = iota
	// StateBlocked: a channel was lost; commands wait for a reconnect.
	StateBlocked
	// StateFailFast: fast_io_fail_tmo expired; commands fail with
	// ErrFastIOFail while reconnecting continues.
	StateFailFast
	// StateLost: dev_loss_tmo expired (or reconnecting is off and the
	// session failed); commands fail with ErrDevLoss.
	StateLost
	// StateClosed: Close was called.
	StateClosed
)

func (s State) String() string {
	return [...]string{"running", "blocked", "fail-fast", "lost", "closed"}[s]
}

// Session is a login to one SRP target over ChCount channels. Its methods
// may be called from many goroutines at once.
type Session struct {
	dev   rdma.Device
	opts  Options
	clock Clock // opts.Clock
	log   *slog.Logger
	rr    atomic.Uint32
	// nexusTaken is set once the target logged a channel out because
	// another login of this initiator port took the I_T nexus over
	// (SRP_T_LOGOUT reason multi-channel action): reconnects then log in
	// with MULTI and share the nexus, instead of taking it back with
	// SINGLE and so logging the other session out in turn, forever.
	nexusTaken atomic.Bool
	// tagTop is bits 56..63 of every tag the session sends, random per
	// session. Sessions of one initiator port that share the I_T nexus
	// (JoinNexus: several processes on one host) cannot coordinate their
	// tags, and a target refuses a tag another command of the nexus still
	// holds (OVERLAPPED COMMANDS ATTEMPTED); with this byte and the random
	// first generation of each slot, their tags do not meet in practice.
	tagTop uint64

	mu      sync.Mutex
	state   State
	chans   []*channel
	wake    chan struct{} // closed on every state change
	lastErr error         // why the session left StateRunning
	closed  chan struct{}
	wg      sync.WaitGroup
}

// Dial logs in to the target opts describe, over dev: channel 0 with
// multichannel action SINGLE (MULTI with opts.JoinNexus), the others MULTI
// (Linux srp_connect_target).
// A rejected login returns *LoginRejectError.
func Dial(ctx context.Context, dev rdma.Device, opts Options) (*Session, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Session{dev: dev, opts: opts, clock: opts.Clock, log: opts.Logger, wake: make(chan struct{}), closed: make(chan struct{}),
		tagTop: uint64(rand.Uint32N(256)) << 56}
	chans, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.chans = chans
	return s, nil
}

func (s *Session) connect(ctx context.Context) ([]*channel, error) {
	chans := make([]*channel, 0, s.opts.ChCount)
	for i := 0; i < s.opts.ChCount; i++ {
		ch, err := dialChannel(ctx, s, i)
		if err != nil {
			for _, c := range chans {
				c.close()
			}
			return nil, err
		}
		chans = append(chans, ch)
	}
	return chans, nil
}

// close shuts a channel down without starting recovery.
func (ch *channel) close() {
	ch.failOnce.Do(func() {
		ch.err = ErrClosed
		close(ch.dead)
		ch.conn.Close()
	})
	<-ch.pollDone
	if ch.watchdogOn.Load() {
		// Submitted commands are finished (their callbacks run) on close.
		<-ch.watchdogDone
	}
}

// Info returns channel 0's login facts.
func (s *Session) Info() LoginInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chans) == 0 {
		return LoginInfo{}
	}
	return s.chans[0].info
}

// State returns the session's transport state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Options returns the options in effect (defaults filled in).
func (s *Session) Options() Options { return s.opts }

func (s *Session) setState(st State, err error) {
	s.state = st
	if err != nil {
		s.lastErr = err
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// channelDown is called once per lost channel. The first loss blocks the
// session, takes the other channels down and starts recovery (Linux
// srp_start_tl_fail_timers + srp_reconnect_rport).
func (s *Session) channelDown(ch *channel, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateRunning || !s.current(ch) {
		return
	}
	s.log.Warn("srp channel lost", "ch", ch.idx, "err", err)
	s.setState(StateBlocked, err)
	old := s.chans
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, c := range old {
			c.close()
			c.release()
		}
		s.recover()
	}()
}

func (s *Session) current(ch *channel) bool {
	for _, c := range s.chans {
		if c == ch {
			return true
		}
	}
	return false
}

// recover reconnects every reconnect_delay until it succeeds or
// dev_loss_tmo expires; fast_io_fail_tmo switches to failing commands fast.
func (s *Session) recover() {
	o := s.opts
	fastFail, stopFastFail := s.after(o.FastIOFailTmo)
	defer stopFastFail()
	devLoss, stopDevLoss := s.after(o.DevLossTmo)
	defer stopDevLoss()
	retry, stopRetry := s.after(o.ReconnectDelay)
	defer func() { stopRetry() }()
	if o.ReconnectDelay < 0 && o.FastIOFailTmo < 0 && o.DevLossTmo < 0 {
		// Nothing would ever end the blocked state: give up now.
		s.mu.Lock()
		if s.state != StateClosed {
			s.setState(StateLost, nil)
		}
		s.mu.Unlock()
		return
	}
	attempts := 0    // failed reconnects so far
	var warned error // the last failure logged at Warn
	for {
		select {
		case <-s.closed:
			return
		case <-fastFail:
			s.mu.Lock()
			if s.state == StateBlocked {
				s.log.Warn("srp: fast_io_fail_tmo expired", "tmo", o.FastIOFailTmo)
				s.setState(StateFailFast, nil)
			}
			s.mu.Unlock()
		case <-devLoss:
			s.mu.Lock()
			if s.state != StateClosed {
				s.log.Warn("srp: dev_loss_tmo expired; giving up", "tmo", o.DevLossTmo)
				s.setState(StateLost, nil)
			}
			s.mu.Unlock()
			return
		case <-retry:
			ctx, cancel := s.withTimeout(context.Background(), max(o.ReconnectDelay, 5*time.Second))
			chans, err := s.connect(ctx)
			cancel()
			if err != nil {
				attempts++
				lvl := slog.LevelDebug
				if reconnectWarn(attempts, err, warned) {
					lvl, warned = slog.LevelWarn, err
				}
				s.log.Log(context.Background(), lvl, "srp: reconnect failed", "attempts", attempts, "err", err)
				s.mu.Lock()
				s.lastErr = err
				s.mu.Unlock()
				stopRetry()
				retry, stopRetry = s.after(o.ReconnectDelay)
				continue
			}
			s.mu.Lock()
			if s.state == StateClosed {
				s.mu.Unlock()
				for _, c := range chans {
					c.close()
					c.release()
				}
				return
			}
			s.chans = chans
			s.log.Info("srp: reconnected", "channels", len(chans))
			s.setState(StateRunning, nil)
			s.mu.Unlock()
			return
		}
	}
}

// reconnectWarn reports whether failed reconnect number attempts (1, 2,
// ...) is logged at Warn rather than Debug: the first, every power of two
// (so a target away for dev_loss_tmo's 600 s at a reconnect_delay of 1 s
// gives 10 lines, not 600), and any whose error differs from the last
// one logged.
func reconnectWarn(attempts int, err, warned error) bool {
	return attempts&(attempts-1) == 0 || warned == nil || err.Error() != warned.Error()
}

// pick returns a live channel, waiting while the session is blocked.
func (s *Session) pick(ctx context.Context) (*channel, error) {
	for {
		s.mu.Lock()
		switch s.state {
		case StateRunning:
			ch := s.chans[int(s.rr.Add(1))%len(s.chans)]
			if !ch.down() {
				s.mu.Unlock()
				return ch, nil
			}
			// Gone down, and channelDown has not yet blocked the session:
			// wait for that state change rather than burn a retry.
		case StateFailFast:
			err := s.lastErr
			s.mu.Unlock()
			return nil, fmt.Errorf("%w (last error: %v)", ErrFastIOFail, err)
		case StateLost:
			err := s.lastErr
			s.mu.Unlock()
			return nil, fmt.Errorf("%w (last error: %v)", ErrDevLoss, err)
		case StateClosed:
			s.mu.Unlock()
			return nil, ErrClosed
		}
		w := s.wake
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Execute runs one SCSI command and returns its SRP_RSP outcome. SCSI status
// and sense are data in Result (see Result.Err); the error reports transport
// and mapping failures: ErrChannelDown, ErrFastIOFail, ErrDevLoss,
// ErrAborted (timeout or ctx cancelled, then ABORT TASK), ErrTooManySegments,
// ErrTransferTooLarge, ErrClosed.
func (s *Session) Execute(ctx context.Context, cmd *Command) (Result, error) {
	var res Result
	for attempt := 0; ; attempt++ {
		ch, err := s.pick(ctx)
		if err != nil {
			return res, err
		}
		err = ch.execute(ctx, cmd, &res)
		if errors.Is(err, ErrChannelDown) && !cmd.NoRetry && attempt < MaxRetries && ctx.Err() == nil {
			s.log.Debug("srp: re-issuing command after channel loss", "lun", cmd.LUN, "attempt", attempt+1)
			continue
		}
		return res, err
	}
}

// TaskManagement sends task management function fn for lun and returns an
// error unless the target answered FUNCTION COMPLETE (*TMFError carries the
// response code). ABORT TASK goes to the channel its taskTag names (tag bits
// 48..55), the others to any channel (ib_srp sends a LUN reset on one
// channel too). The wait is bounded by Options.TMFTimeout.
func (s *Session) TaskManagement(ctx context.Context, fn srp.TMF, lun, taskTag uint64) error {
	ch, err := s.pick(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	chans := s.chans
	s.mu.Unlock()
	if fn == srp.TMFAbortTask {
		if i := int(taskTag >> 48 & 0xff); i < len(chans) {
			ch = chans[i]
		}
	}
	var before []uint64
	if fn == srp.TMFLUNReset {
		// How far each other channel had queued when the reset went out.
		before = make([]uint64, len(chans))
		for i, c := range chans {
			before[i] = c.sentSoFar()
		}
	}
	code, sent, err := ch.tmfSent(ctx, fn, lun, taskTag)
	if err != nil {
		return err
	}
	if code != 0 {
		return &TMFError{Function: fn, Response: code}
	}
	if fn == srp.TMFLUNReset {
		// One reset covers the logical unit; the commands outstanding on it
		// were aborted without a response. On the reset's channel those
		// queued before its TMF reached the target before it: they are
		// ended, and those queued after it run. Another channel has no
		// order against the TMF: its commands queued before the TMF was
		// are ended (as ib_srp's srp_reset_device ends every channel's,
		// where the SCSI error handler has stopped new commands first),
		// and a caller that needs certainty keeps commands off the
		// logical unit while it resets it, or uses one channel.
		for i, c := range chans {
			b := before[i]
			if c == ch {
				b = sent - 1
			}
			c.resetDone(lun, b)
		}
	}
	return nil
}

// Close logs out: every channel is disconnected (ib_srp sends no
// SRP_I_LOGOUT either) and reconnecting stops. Outstanding commands fail
// with ErrChannelDown or ErrClosed.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.state == StateClosed {
		s.mu.Unlock()
		return nil
	}
	s.setState(StateClosed, ErrClosed)
	close(s.closed)
	chans := s.chans
	s.mu.Unlock()
	for _, c := range chans {
		c.close()
	}
	s.wg.Wait()
	for _, c := range chans {
		c.release()
	}
	return nil
}

// Drop takes channel i down as a transport failure would, starting
// recovery. It is meant for tests and fault drills.
func (s *Session) Drop(i int) {
	s.mu.Lock()
	var ch *channel
	if i >= 0 && i < len(s.chans) {
		ch = s.chans[i]
	}
	s.mu.Unlock()
	if ch != nil {
		ch.fail(fmt.Errorf("%w: dropped locally", ErrChannelDown))
	}
}
