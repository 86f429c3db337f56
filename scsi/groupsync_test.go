package scsi

import (
	"errors"
	"sync"
	"testing"
)

// gateSyncer blocks each Sync until released and returns the queued errors.
type gateSyncer struct {
	mu    sync.Mutex
	calls int
	gate  chan struct{}
	errs  []error
}

func (g *gateSyncer) Sync() error {
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if len(g.errs) > 0 {
		e := g.errs[0]
		g.errs = g.errs[1:]
		return e
	}
	return nil
}

func TestGroupSyncCoalesces(t *testing.T) {
	bad := errors.New("writeback failed")
	fs := &gateSyncer{gate: make(chan struct{}), errs: []error{bad, nil}}
	g := &groupSync{syncer: fs}
	results := make(chan error, 4)
	go func() { results <- g.Sync() }() // starts flush 1 and blocks in it
	waitFor(t, "flush 1 running", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running })
	for i := 0; i < 3; i++ {
		go func() { results <- g.Sync() }()
	}
	// The three later callers need a flush started after their writes:
	// they wait, and share flush 2.
	waitFor(t, "callers waiting", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting == 3 })
	fs.gate <- struct{}{} // flush 1 fails
	fs.gate <- struct{}{} // flush 2 succeeds
	var nerr, nok int
	for i := 0; i < 4; i++ {
		if err := <-results; errors.Is(err, bad) {
			nerr++
		} else if err == nil {
			nok++
		}
	}
	if nerr != 1 || nok != 3 || fs.calls != 2 {
		t.Fatalf("errors %d, successes %d, flushes %d; want 1, 3, 2", nerr, nok, fs.calls)
	}
}
