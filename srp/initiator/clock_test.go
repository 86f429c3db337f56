package initiator

import (
	"sync"
	"time"
)

// manualClock is a Clock whose time moves only when a test advances it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]bool // running timers
	added  chan struct{}         // signalled when a timer starts
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(0, 0), timers: map[*manualTimer]bool{}, added: make(chan struct{}, 1)}
}

type manualTimer struct {
	c    *manualClock
	when time.Time
	ch   chan time.Time
	f    func()
}

func (c *manualClock) NewTimer(d time.Duration) Timer {
	t := &manualTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &manualTimer{c: c, f: f}
	t.Reset(d)
	return t
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.c.timers[t]
	delete(t.c.timers, t)
	return was
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.c.timers[t]
	t.when = t.c.now.Add(d)
	t.c.timers[t] = true
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	t.c.mu.Unlock()
	select {
	case t.c.added <- struct{}{}:
	default:
	}
	return was
}

// Advance moves the clock on by d and fires the timers due by then.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*manualTimer
	for t := range c.timers {
		if !t.when.After(c.now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	now := c.now
	c.mu.Unlock()
	for _, t := range due {
		if t.f != nil {
			go t.f()
			continue
		}
		select {
		case t.ch <- now:
		default:
		}
	}
}

// running reports how many timers are running.
func (c *manualClock) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
