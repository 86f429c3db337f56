package scsi

import (
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
)

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// slowRAM is a RAM backstore whose reads take d: by the manual clock
// (advanced) or, with none, by sleeping.
type slowRAM struct {
	*backstore.RAM
	clock *manualClock
	d     time.Duration
}

func (r slowRAM) ReadAt(p []byte, off int64) (int, error) {
	if r.clock != nil {
		r.clock.advance(r.d)
	} else {
		time.Sleep(r.d)
	}
	return r.RAM.ReadAt(p, off)
}

type tookObs struct {
	mu   sync.Mutex
	took []time.Duration
}

func (o *tookObs) Started() {}
func (o *tookObs) Finished(_ *Result, took time.Duration) {
	o.mu.Lock()
	o.took = append(o.took, took)
	o.mu.Unlock()
}

// An Observer is given the time a command spent in the core, by the
// target's clock: a READ whose medium read takes 7 ms of a manual clock
// took exactly 7 ms; by the system clock, a read that sleeps 3 ms took at
// least 3 ms.
func TestObserverDuration(t *testing.T) {
	for _, manual := range []bool{true, false} {
		var clock *manualClock
		cfg := TargetConfig{}
		d := 3 * time.Millisecond
		if manual {
			clock = &manualClock{now: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
			cfg.Clock, d = clock, 7*time.Millisecond
		}
		obs := &tookObs{}
		lu, err := NewLogicalUnit(LUConfig{Backstore: slowRAM{backstore.NewRAM(1 << 20), clock, d}, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		tg := NewTarget(cfg)
		if err := tg.AddLUN(0, lu); err != nil {
			t.Fatal(err)
		}
		s := tg.NewSession(nexusA)
		f := &fixture{t: t, tg: tg, lu: lu, s: s}
		f.run(s, 0, cdbTUR(), nil, 0) // the power-on unit attention
		obs.took = nil
		if r := f.run(s, 0, cdb10(0x28, 0, 8, 8), nil, 8*512); r.Status != 0 {
			t.Fatalf("READ(10): status %#x", r.Status)
		}
		s.Close()
		if len(obs.took) != 1 {
			t.Fatalf("manual clock %v: %d commands observed, want 1", manual, len(obs.took))
		}
		got := obs.took[0]
		if manual && got != d {
			t.Errorf("manual clock: took %v, want %v", got, d)
		}
		if !manual && (got < d || got > 3*time.Second) {
			t.Errorf("system clock: took %v, want at least %v", got, d)
		}
	}
}
