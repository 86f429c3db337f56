package scsi

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/scsi/sense"
)

// A SIMPLE READ that Submit left dormant (behind an ORDERED task
// waiting for views) and finishes on a goroutine: ABORT TASK ends it at
// once, it completes exactly once (aborted), and the observer balances.
func TestAbortDormantInlineTask(t *testing.T) {
	obs := &countObs{}
	f := newFixture(t, LUConfig{Observer: obs})
	ctx := testCtx(t)
	x := &Command{Tag: 1, CDB: cdb16(0x88, 0, 0, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	if r := f.s.Execute(ctx, x); r.Status != sense.StatusGood || len(x.DataInViews) == 0 {
		t.Fatalf("READ with views: %+v", r)
	}
	sB := f.tg.NewSession(nexusB)
	t.Cleanup(sB.Close)
	f.run(sB, 0, cdbTUR(), nil, 0)
	ord := f.goExec(ctx, sB, readCmd(2, 0, TaskOrdered))
	waitFor(t, "ORDERED dormant", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.waiting == 1
	})
	// runsInline looked before the ORDERED task entered: emulate by forcing
	// the inline start (Submit would now hand it to a goroutine at once).
	y := &Command{Tag: 3, CDB: cdb16(0x88, 0, 256, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	s := f.s.(*session)
	done := make(chanCompleter, 2)
	res, tk := s.start(ctx, y, true)
	if tk == nil {
		t.Fatalf("not dormant: %+v", res)
	}
	go func() { done.Complete(y, s.resume(tk)) }()
	if r := f.s.TaskManagement(ctx, TMFAbortTask, 0, 3); r != TMFComplete {
		t.Fatalf("ABORT TASK: %v", r)
	}
	select {
	case r := <-done:
		if !r.Aborted {
			t.Fatalf("aborted dormant READ: %+v", r)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("dormant READ not ended by ABORT TASK")
	}
	x.ReleaseViews()
	waitResult(t, ord)
	select {
	case r := <-done:
		t.Fatalf("completed twice: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if len(y.DataInViews) != 0 {
		t.Fatal("aborted READ holds views")
	}
	if s, fi := obs.started.Load(), obs.finished.Load(); s != fi {
		t.Errorf("observer: %d started, %d finished", s, fi)
	}
	f.lu.ts.mu.Lock()
	defer f.lu.ts.mu.Unlock()
	if len(f.lu.ts.nexusView) != 0 || f.lu.ts.n != 0 {
		t.Errorf("views %v, tasks %d", f.lu.ts.nexusView, f.lu.ts.n)
	}
}
