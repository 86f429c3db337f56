package main

import (
	"log/slog"
	"sync"
	"time"

	"github.com/gosrp/gosrp/scsi"
)

// capacityPoll is how often an RBD LUN's capacity is re-read: a resize made
// through another gateway or the rbd tool reaches initiators as CAPACITY
// DATA HAS CHANGED within this time.
const capacityPoll = 2 * time.Second

// watchCapacity re-reads lu's capacity from its backstore every period
// (scsi.LogicalUnit.Resize(-1): a change raises CAPACITY DATA HAS CHANGED
// for every nexus). The returned stop ends the watch and waits for it.
func watchCapacity(lu *scsi.LogicalUnit, period time.Duration, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		failing := false
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			err := lu.Resize(-1)
			if err != nil && !failing {
				log.Warn("capacity not re-read", "err", err)
			}
			failing = err != nil
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
