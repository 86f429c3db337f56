package initiator

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// countHandler counts the records of one message by level.
type countHandler struct {
	msg string
	mu  sync.Mutex
	n   map[slog.Level]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.mu.Lock()
		h.n[r.Level]++
		h.mu.Unlock()
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// TestReconnectWarningsRateLimited: a target that refuses every reconnect
// gets a Warn line for the first failure and then only at powers of two
// (the rest at Debug), so a long outage does not flood the log. The
// session runs on a manual clock: exactly one reconnect per
// reconnect_delay, and none after dev_loss_tmo.
func TestReconnectWarningsRateLimited(t *testing.T) {
	h := &countHandler{msg: "srp: reconnect failed", n: map[slog.Level]int{}}
	clk := newManualClock()
	// dev_loss_tmo falls between the 20th and the 21st reconnect.
	const delay, devLoss, attempts = 100 * time.Millisecond, 2050 * time.Millisecond, 20
	ft, s := setup(t, func(ft *fakeTarget, o *Options) {
		o.ReconnectDelay, o.FastIOFailTmo, o.DevLossTmo = delay, -1, devLoss
		o.Logger, o.Clock = slog.New(h), clk
	})
	ctx := testCtx(t)
	ft.mu.Lock()
	ft.reject = srp.RejInsufficientResources
	ft.mu.Unlock()
	ft.dropAll()
	failed := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.n[slog.LevelWarn] + h.n[slog.LevelDebug]
	}
	// dev_loss_tmo and reconnect_delay run while the session is blocked.
	waitFor(t, ctx, "the recovery timers", func() bool { return s.State() == StateBlocked && clk.running() == 2 })
	for k := 1; k <= attempts; k++ {
		clk.Advance(delay)
		waitFor(t, ctx, fmt.Sprintf("reconnect %d", k), func() bool { return failed() == k && clk.running() == 2 })
	}
	clk.Advance(devLoss - attempts*delay)
	waitFor(t, ctx, "dev_loss_tmo", func() bool { return s.State() == StateLost })
	h.mu.Lock()
	defer h.mu.Unlock()
	warn, debug := h.n[slog.LevelWarn], h.n[slog.LevelDebug]
	if warn+debug != attempts {
		t.Fatalf("%d reconnect attempts, want %d", warn+debug, attempts)
	}
	if want := bits.Len(uint(attempts)); warn != want {
		t.Errorf("%d failed reconnects: %d at Warn, want %d (1, 2, 4, ...)", attempts, warn, want)
	}
}

// TestReconnectLoginTimeout: a reconnect whose login the target never
// answers gives up after max(reconnect_delay, 5 s) on the session's clock.
func TestReconnectLoginTimeout(t *testing.T) {
	h := &countHandler{msg: "srp: reconnect failed", n: map[slog.Level]int{}}
	clk := newManualClock()
	const delay, loginBound = 100 * time.Millisecond, 5 * time.Second
	ft, s := setup(t, func(ft *fakeTarget, o *Options) {
		o.ReconnectDelay, o.FastIOFailTmo, o.DevLossTmo = delay, -1, -1
		o.Logger, o.Clock = slog.New(h), clk
	})
	ctx := testCtx(t)
	ft.mu.Lock()
	ft.silent = true
	ft.mu.Unlock()
	ft.dropAll()
	failed := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.n[slog.LevelWarn] + h.n[slog.LevelDebug]
	}
	logins := func() int {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		return len(ft.logins)
	}
	// Only reconnect_delay runs: fast_io_fail_tmo and dev_loss_tmo are off.
	waitFor(t, ctx, "reconnect_delay", func() bool { return s.State() == StateBlocked && clk.running() == 1 })
	clk.Advance(delay)
	// The login is pending; its bound is the one timer running.
	waitFor(t, ctx, "the reconnect's login", func() bool { return logins() == 2 && clk.running() == 1 })
	clk.Advance(loginBound - time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n := failed(); n != 0 {
		t.Fatalf("reconnect gave up %d times before its bound", n)
	}
	clk.Advance(time.Millisecond)
	// Well within the 5 s the bound would take in real time.
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	waitFor(t, soon, "the reconnect to give up", func() bool { return failed() == 1 })
	if st := s.State(); st != StateBlocked {
		t.Errorf("state %v, want blocked (still reconnecting)", st)
	}
}

func TestReconnectWarn(t *testing.T) {
	a, b := errString("refused"), errString("timeout")
	for _, c := range []struct {
		n        int
		err, was error
		want     bool
	}{{1, a, nil, true}, {2, a, a, true}, {3, a, a, false}, {4, a, a, true}, {5, a, a, false}, {6, b, a, true}, {1000, a, a, false}, {1024, a, a, true}} {
		if got := reconnectWarn(c.n, c.err, c.was); got != c.want {
			t.Errorf("attempt %d err %v last warned %v: %v, want %v", c.n, c.err, c.was, got, c.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
