package initiator

import (
	"context"
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
// (the rest at Debug), so a long outage does not flood the log.
func TestReconnectWarningsRateLimited(t *testing.T) {
	h := &countHandler{msg: "srp: reconnect failed", n: map[slog.Level]int{}}
	ft, s := setup(t, func(ft *fakeTarget, o *Options) {
		o.ReconnectDelay = time.Millisecond
		o.FastIOFailTmo = -1
		o.DevLossTmo = 500 * time.Millisecond
		o.Logger = slog.New(h)
	})
	ft.mu.Lock()
	ft.reject = srp.RejInsufficientResources
	ft.mu.Unlock()
	ft.dropAll()
	deadline := time.Now().Add(30 * time.Second)
	for s.State() != StateLost {
		if time.Now().After(deadline) {
			t.Fatalf("state %v after dev_loss_tmo", s.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	warn, debug := h.n[slog.LevelWarn], h.n[slog.LevelDebug]
	attempts := warn + debug
	if attempts < 8 {
		t.Fatalf("only %d reconnect attempts in dev_loss_tmo", attempts)
	}
	if want := bits.Len(uint(attempts)); warn != want {
		t.Errorf("%d failed reconnects: %d at Warn, want %d (1, 2, 4, ...)", attempts, warn, want)
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
