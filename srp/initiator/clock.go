package initiator

import (
	"context"
	"sync/atomic"
	"time"
)

// Clock is the initiator's time source: the command and task management
// timeouts, reconnect_delay, fast_io_fail_tmo and dev_loss_tmo, and the
// bound on each reconnect's login. Tests inject a manual clock (as
// scsi.Config.Clock); nil in Options means the system clock.
type Clock interface {
	// NewTimer returns a stopped-or-running timer that fires once after d
	// (time.NewTimer).
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d (time.AfterFunc).
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a one-shot timer of a Clock (time.Timer's methods, with C as a
// method).
type Timer interface {
	// C delivers the time when the timer fires (nil for AfterFunc timers).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was
	// running.
	Stop() bool
	// Reset makes the timer fire after d, discarding a pending value; it
	// reports whether it was running.
	Reset(d time.Duration) bool
}

type systemClock struct{}

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return sysTimer{time.AfterFunc(d, f)}
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// after returns a channel that delivers once after d on the session's
// clock, and nil (never) for a negative d; stop releases the timer.
func (s *Session) after(d time.Duration) (c <-chan time.Time, stop func()) {
	if d < 0 {
		return nil, func() {}
	}
	t := s.clock.NewTimer(d)
	return t.C(), func() { t.Stop() }
}

// withTimeout is context.WithTimeout on the session's clock: after d the
// context ends and its Err is context.DeadlineExceeded.
func (s *Session) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancel(parent)
	ctx := &clockContext{Context: inner}
	t := s.clock.AfterFunc(d, func() {
		ctx.expired.Store(true)
		cancel()
	})
	return ctx, func() {
		t.Stop()
		cancel()
	}
}

// clockContext is a context whose deadline is a Clock timer.
type clockContext struct {
	context.Context
	expired atomic.Bool
}

func (c *clockContext) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}
