package scsi

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
)

type countObs struct{ started, finished atomic.Int64 }

func (o *countObs) Started()                        { o.started.Add(1) }
func (o *countObs) Finished(*Result, time.Duration) { o.finished.Add(1) }

type revCompleter struct {
	mu   sync.Mutex
	done map[*Command]int
	out  chan *Command
}

func (c *revCompleter) Complete(cmd *Command, r Result) {
	c.mu.Lock()
	c.done[cmd]++
	c.mu.Unlock()
	c.out <- cmd
}

// Random SIMPLE/ORDERED/HEAD OF QUEUE READs and WRITEs with
// ViewIn from two nexuses through Submit (inline and not), with ABORT
// TASK, ABORT TASK SET and LUN RESET mixed in and the fabric releasing
// views after a random delay: every command completes exactly once, the
// observer balances, and the task set ends empty with no view held.
func TestViewStress(t *testing.T) {
	obs := &countObs{}
	f := newFixture(t, LUConfig{Backstore: backstore.NewRAM(4 << 20), Observer: obs})
	ctx := testCtx(t)
	sB := f.tg.NewSession(nexusB)
	t.Cleanup(sB.Close)
	f.run(sB, 0, cdbTUR(), nil, 0)
	sessions := []Session{f.s, sB}
	obs.started.Store(0)
	obs.finished.Store(0)
	var wg sync.WaitGroup
	var total atomic.Int64
	for si, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(si), 7))
			comp := &revCompleter{done: map[*Command]int{}, out: make(chan *Command, 1024)}
			var rel sync.WaitGroup
			release := func(c *Command) {
				rel.Add(1)
				go func() {
					defer rel.Done()
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					c.ReleaseViews()
				}()
			}
			pending := 0
			var tags []uint64
			for k := range 3000 {
				tag := uint64(si)<<32 | uint64(k+1)
				attr := TaskSimple
				switch rng.IntN(10) {
				case 0:
					attr = TaskOrdered
				case 1:
					attr = TaskHeadOfQueue
				}
				lba := uint64(rng.IntN(8)) * 128
				var cmd *Command
				if rng.IntN(4) == 0 {
					cmd = &Command{Tag: tag, CDB: cdb16(0x8a, 0, lba, 128), DataOut: make([]byte, 64<<10), Attr: attr}
				} else {
					cmd = &Command{Tag: tag, CDB: cdb16(0x88, 0, lba, 128), DataIn: make([]byte, 64<<10), Attr: attr, ViewIn: true}
				}
				total.Add(1)
				if r, inline := s.Submit(ctx, cmd, comp); inline {
					_ = r
					comp.mu.Lock()
					comp.done[cmd]++
					comp.mu.Unlock()
					release(cmd)
				} else {
					pending++
					tags = append(tags, tag)
				}
				switch rng.IntN(50) {
				case 0:
					if len(tags) > 0 {
						tg := tags[rng.IntN(len(tags))]
						go s.TaskManagement(ctx, TMFAbortTask, 0, tg)
					}
				case 1:
					go s.TaskManagement(ctx, TMFAbortTaskSet, 0, 0)
				case 2:
					go s.TaskManagement(ctx, TMFLUNReset, 0, 0)
				}
				// drain completions without blocking
				for drained := false; !drained; {
					select {
					case c := <-comp.out:
						pending--
						release(c)
					default:
						drained = true
					}
				}
			}
			deadline := time.After(20 * time.Second)
			for pending > 0 {
				select {
				case c := <-comp.out:
					pending--
					release(c)
				case <-deadline:
					t.Errorf("session %d: %d commands never completed", si, pending)
					return
				}
			}
			rel.Wait()
			comp.mu.Lock()
			for c, n := range comp.done {
				if n != 1 {
					t.Errorf("tag %#x completed %d times", c.Tag, n)
				}
			}
			comp.mu.Unlock()
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	ts := &f.lu.ts
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.nexusView) != 0 || ts.n != 0 || ts.waiting != 0 || ts.head != nil || ts.phead != nil {
		t.Errorf("task set not idle: views %v, n %d, waiting %d", ts.nexusView, ts.n, ts.waiting)
	}
	if s, fi := obs.started.Load(), obs.finished.Load(); s != fi {
		t.Errorf("observer: %d started, %d finished", s, fi)
	}
}
