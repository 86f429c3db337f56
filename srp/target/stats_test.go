package target

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// counters sums the counters of the port's channels.
func (e *env) counters() (commands, wakes, polls, completions uint64) {
	e.port.mu.Lock()
	defer e.port.mu.Unlock()
	for c := range e.port.channels {
		commands += c.stats.commands.Load()
		wakes += c.stats.wakes.Load()
		polls += c.stats.polls.Load()
		completions += c.stats.completions.Load()
	}
	return
}

// TestChannelCounters: each command is one receive completion and one
// completion of its signaled SRP_RSP; the completions arrive in polls
// that found work, after notifications.
func TestChannelCounters(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	c0, w0, p0, n0 := e.counters()
	const n = 10
	for k := range n {
		i.sendIU(&srp.Cmd{Tag: uint64(k) + 1, CDB: []byte{0x00, 0, 0, 0, 0, 0}})
		checkGood(t, i.rspIU(), uint64(k)+1)
	}
	// The last response's send completion may still be on its way.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, w, p, m := e.counters()
		if c-c0 == n && m-n0 == 2*n {
			if p-p0 == 0 || p-p0 > 2*n || w-w0 == 0 {
				t.Fatalf("%d polls and %d wakes for %d completions", p-p0, w-w0, m-n0)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d commands: commands %d, completions %d (want %d, %d)", n, c-c0, m-n0, n, 2*n)
		}
		time.Sleep(time.Millisecond)
	}
}
