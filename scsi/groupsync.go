package scsi

import (
	"sync"

	"github.com/gosrp/gosrp/backstore"
)

// groupSync coalesces concurrent flushes of one backstore (group commit):
// a caller needs a flush that starts after its write completed; callers
// arriving while a flush runs share the next one. Each caller still gets a
// flush that covers its data, and a failure of any flush a caller waited
// on is reported to it (a later success does not vouch for data an
// earlier failed writeback dropped).
type groupSync struct {
	mu       sync.Mutex
	cond     sync.Cond
	running  bool
	waiting  int    // callers blocked for a later flush
	started  uint64 // flushes started
	done     uint64 // flushes finished (in order: one runs at a time)
	failGen  uint64 // latest failed flush, 0 if none
	failErr  error  // its error
	syncer   backstore.Syncer
	initOnce sync.Once
}

// Sync makes every write that completed before the call durable.
func (g *groupSync) Sync() error {
	g.initOnce.Do(func() { g.cond.L = &g.mu })
	g.mu.Lock()
	defer g.mu.Unlock()
	// A flush already running may have started before our write finished:
	// we need one that starts after now.
	target := g.started + 1
	for g.done < target {
		if g.running {
			g.waiting++
			g.cond.Wait()
			g.waiting--
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := g.syncer.Sync()
		g.mu.Lock()
		g.running = false
		g.done = gen
		if err != nil {
			g.failGen, g.failErr = gen, err
		}
		g.cond.Broadcast()
	}
	if g.failGen >= target {
		return g.failErr
	}
	return nil
}
