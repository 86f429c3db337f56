package scsi

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

func (f *fixture) goExec(ctx context.Context, s Session, cmd *Command) <-chan Result {
	ch := make(chan Result, 1)
	go func() { ch <- s.Execute(ctx, cmd) }()
	return ch
}

func waitResult(t *testing.T, ch <-chan Result) Result {
	t.Helper()
	ctx := testCtx(t)
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		t.Fatal("command did not complete")
	}
	return Result{}
}

func readCmd(tag uint64, lba uint64, attr TaskAttr) *Command {
	return &Command{Tag: tag, CDB: cdb16(0x88, 0, lba, 1), DataIn: make([]byte, 512), Attr: attr}
}

// An ORDERED task starts only after every older task ended; a HEAD OF
// QUEUE task runs at once, even ahead of a dormant ORDERED task
// (SAM-5 §8.6).
func TestTaskAttributes(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	blk.block(1)
	a := f.goExec(ctx, f.s, readCmd(1001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	b := f.goExec(ctx, f.s, readCmd(1002, 2, TaskOrdered))
	waitFor(t, "ORDERED task dormant", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.waiting == 1
	})
	c := f.goExec(ctx, f.s, readCmd(1003, 3, TaskSimple)) // behind the ORDERED task
	waitFor(t, "SIMPLE task dormant", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.waiting == 2
	})
	// HEAD OF QUEUE completes while A still runs and B, C wait.
	if r := waitResult(t, f.goExec(ctx, f.s, readCmd(1004, 4, TaskHeadOfQueue))); r.Status != sense.StatusGood {
		t.Fatalf("HoQ: %+v", r)
	}
	blk.release(1)
	for _, ch := range []<-chan Result{a, b, c} {
		if r := waitResult(t, ch); r.Status != sense.StatusGood {
			t.Fatalf("%+v", r)
		}
	}
	ev := blk.events()
	idx := func(s string) int { return slices.Index(ev, s) }
	if !(idx("end 4") < idx("end 1") && idx("end 1") < idx("start 2") && idx("end 2") < idx("start 3")) {
		t.Fatalf("order of backstore events: %v", ev)
	}
}

func TestAbortTask(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	blk.block(1)
	a := f.goExec(ctx, f.s, readCmd(2001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	b := f.goExec(ctx, f.s, readCmd(2002, 2, TaskOrdered))
	waitFor(t, "dormant", func() bool { f.lu.ts.mu.Lock(); defer f.lu.ts.mu.Unlock(); return f.lu.ts.waiting == 1 })
	// Aborting the dormant ORDERED task: it returns Aborted without running.
	if resp := f.s.TaskManagement(ctx, TMFAbortTask, EncodeLUN(0), 2002); resp != TMFComplete {
		t.Fatalf("ABORT TASK: %v", resp)
	}
	if r := waitResult(t, b); !r.Aborted {
		t.Fatalf("%+v", r)
	}
	// Aborting the running task waits for it to end.
	tmf := make(chan TMFResponse, 1)
	go func() { tmf <- f.s.TaskManagement(ctx, TMFAbortTask, EncodeLUN(0), 2001) }()
	waitFor(t, "abort flagged", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.head != nil && f.lu.ts.head.aborted
	})
	blk.release(1)
	if r := waitResult(t, a); !r.Aborted {
		t.Fatalf("%+v", r)
	}
	if resp := <-tmf; resp != TMFComplete {
		t.Fatalf("%v", resp)
	}
	for _, e := range blk.events() {
		if e == "start 2" {
			t.Fatal("aborted dormant task ran")
		}
	}
	// Unknown tag, bad LUN, unsupported function.
	if resp := f.s.TaskManagement(ctx, TMFAbortTask, EncodeLUN(0), 9999); resp != TMFFailed {
		t.Fatalf("unknown tag: %v", resp)
	}
	if resp := f.s.TaskManagement(ctx, TMFAbortTaskSet, EncodeLUN(9), 0); resp != TMFIncorrectLUN {
		t.Fatalf("bad LUN: %v", resp)
	}
	if resp := f.s.TaskManagement(ctx, TMFClearACA, EncodeLUN(0), 0); resp != TMFNotSupported {
		t.Fatalf("CLEAR ACA: %v", resp)
	}
	if resp := f.s.TaskManagement(ctx, TMF(0x77), EncodeLUN(0), 0); resp != TMFNotSupported {
		t.Fatalf("unknown TMF: %v", resp)
	}
}

func TestContextCancelAborts(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	blk.block(1)
	a := f.goExec(ctx, f.s, readCmd(3001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	cctx, cancel := context.WithCancel(ctx)
	b := f.goExec(cctx, f.s, readCmd(3002, 2, TaskOrdered))
	waitFor(t, "dormant", func() bool { f.lu.ts.mu.Lock(); defer f.lu.ts.mu.Unlock(); return f.lu.ts.waiting == 1 })
	cancel()
	if r := waitResult(t, b); !r.Aborted {
		t.Fatalf("%+v", r)
	}
	blk.release(1)
	if r := waitResult(t, a); r.Status != sense.StatusGood {
		t.Fatalf("%+v", r)
	}
}

// CLEAR TASK SET and LUN RESET abort other nexuses' tasks: with TAS=1
// (default) they end with TASK ABORTED; LUN RESET leaves 29/03 for
// every nexus (SAM-5 §6.3.3).
func TestClearTaskSetAndLUNReset(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)
	blk.block(1)
	a := f.goExec(ctx, s2, readCmd(4001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	tmf := make(chan TMFResponse, 1)
	go func() { tmf <- f.s.TaskManagement(ctx, TMFClearTaskSet, EncodeLUN(0), 0) }()
	waitFor(t, "abort flagged", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.head != nil && f.lu.ts.head.aborted
	})
	blk.release(1)
	if r := waitResult(t, a); r.Status != sense.StatusTaskAborted || r.Aborted {
		t.Fatalf("TAS=1: %+v", r)
	}
	if resp := <-tmf; resp != TMFComplete {
		t.Fatalf("%v", resp)
	}
	if resp := f.s.TaskManagement(ctx, TMFLUNReset, EncodeLUN(0), 0); resp != TMFComplete {
		t.Fatalf("%v", resp)
	}
	for _, s := range []Session{f.s, s2} {
		wantSense(t, f.run(s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x03)
		f.good(cdbTUR(), nil)
	}
}

// With TAS=0 the other nexus's task disappears silently and that nexus
// gets COMMANDS CLEARED BY ANOTHER INITIATOR.
func TestClearTaskSetTAS0(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	cdb, p := modeSelect10(hx(`0a 0a 02 10 00 00 00 00 ff ff 00 1e`))
	f.good(cdb, p)
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0) // POWER ON
	blk.block(1)
	a := f.goExec(ctx, s2, readCmd(5001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	tmf := make(chan TMFResponse, 1)
	go func() { tmf <- f.s.TaskManagement(ctx, TMFClearTaskSet, EncodeLUN(0), 0) }()
	waitFor(t, "abort flagged", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.head != nil && f.lu.ts.head.aborted
	})
	blk.release(1)
	if r := waitResult(t, a); !r.Aborted {
		t.Fatalf("TAS=0: %+v", r)
	}
	<-tmf
	wantSense(t, f.run(s2, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2F, 0x00)
}

func TestUnitAttentionSequence(t *testing.T) {
	f := newFixture(t, LUConfig{})
	s2 := f.tg.NewSession(nexusB)
	// INQUIRY, REPORT LUNS, REQUEST SENSE... INQUIRY and REPORT LUNS leave
	// the POWER ON condition pending.
	f.run(s2, 0, cdbInquiry(false, 0, 36), nil, 36)
	f.run(s2, 0, []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, nil, 256)
	if got := f.lu.PendingUnitAttentions(nexusB); !slices.Equal(got, []uint16{0x2900}) {
		t.Fatalf("pending %x", got)
	}
	// Unknown opcodes report the UA first (UA check precedes CDB parsing).
	wantSense(t, f.run(s2, 0, []byte{0xC0, 0, 0, 0, 0, 0}, nil, 0), sense.KeyUnitAttention, 0x29, 0x00)
	wantSense(t, f.run(s2, 0, []byte{0xC0, 0, 0, 0, 0, 0}, nil, 0), sense.KeyIllegalRequest, 0x20, 0x00)
	// Closing the last session of a nexus forgets it: a new one sees POWER
	// ON again.
	s2.Close()
	s3 := f.tg.NewSession(nexusB)
	defer s3.Close()
	wantSense(t, f.run(s3, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)
	// Two conditions queue in order.
	f.lu.uaAllExisting(ReasonUAModeChanged, "")
	f.lu.uaAllExisting(ReasonUACapacityChanged, "")
	wantSense(t, f.run(s3, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x01)
	wantSense(t, f.run(s3, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x09)
	f.run(s3, 0, cdbTUR(), nil, 0)
}

func TestSessionClose(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	s2 := f.tg.NewSession(nexusB)
	f.run(s2, 0, cdbTUR(), nil, 0)
	blk.block(1)
	a := f.goExec(ctx, s2, readCmd(6001, 1, TaskSimple))
	blk.waitStarted(t, 1)
	closed := make(chan struct{})
	go func() { s2.Close(); close(closed) }()
	waitFor(t, "abort flagged", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.head != nil && f.lu.ts.head.aborted
	})
	blk.release(1)
	if r := waitResult(t, a); !r.Aborted {
		t.Fatalf("%+v", r)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close hung")
	}
	if r := s2.Execute(ctx, &Command{Tag: 1, CDB: cdbTUR()}); !r.Aborted {
		t.Fatalf("after Close: %+v", r)
	}
}

// An ACA task cannot exist without an ACA condition (NACA unsupported):
// INVALID FIELD IN CDB, as LIO.
func TestACAAttribute(t *testing.T) {
	f := newFixture(t, LUConfig{})
	r := f.s.Execute(testCtx(t), &Command{Tag: 7, CDB: cdbTUR(), Attr: TaskACA})
	if s := wantSense(t, r, sense.KeyIllegalRequest, 0x24, 0x00); s.SKSValid {
		t.Fatal("field pointer for a task attribute")
	}
}

// A SIMPLE READ with ViewIn on a RAM logical unit gives its data-in as
// slices of the backstore's memory; until the fabric releases them an
// ORDERED task stays dormant (its older tasks' data transfers have not
// ended, SAM-5 §8.6.3) while a HEAD OF QUEUE task runs at once.
func TestDataInViewsHoldOrderedTasks(t *testing.T) {
	ram := backstore.NewRAM(1 << 20)
	want := make([]byte, 8192)
	for i := range want {
		want[i] = byte(i * 13)
	}
	if _, err := ram.WriteAt(want, 4096); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, LUConfig{Backstore: ram})
	ctx := testCtx(t)
	// 16 blocks at LBA 8 (byte 4096): 8 KiB written, then 0 .. the rest of
	// the backstore never written (zeros).
	rd := &Command{Tag: 5001, CDB: cdb16(0x88, 0, 8, 32), DataIn: make([]byte, 16384), ViewIn: true}
	r := f.s.Execute(ctx, rd)
	if r.Status != sense.StatusGood || r.DataInLen != 16384 {
		t.Fatalf("READ: %+v", r)
	}
	if len(rd.DataInViews) == 0 {
		t.Fatal("no views: the data-in was copied")
	}
	if !bytes.Equal(rd.DataIn, make([]byte, 16384)) {
		t.Error("the core wrote DataIn although it gave views")
	}
	got := bytes.Join(rd.DataInViews, nil)
	wantAll := append(append([]byte(nil), want...), make([]byte, 8192)...)
	if !bytes.Equal(got, wantAll) {
		t.Fatalf("views hold %d bytes, not the backstore's %d", len(got), len(wantAll))
	}
	ord := f.goExec(ctx, f.s, readCmd(5002, 2, TaskOrdered))
	waitFor(t, "ORDERED task dormant behind the views", func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.waiting == 1
	})
	if r := waitResult(t, f.goExec(ctx, f.s, readCmd(5003, 3, TaskHeadOfQueue))); r.Status != sense.StatusGood {
		t.Fatalf("HEAD OF QUEUE READ beside the views: %+v", r)
	}
	select {
	case r := <-ord:
		t.Fatalf("ORDERED task ran while views were held: %+v", r)
	default:
	}
	rd.ReleaseViews()
	rd.ReleaseViews() // twice is harmless
	if r := waitResult(t, ord); r.Status != sense.StatusGood {
		t.Fatalf("ORDERED after the release: %+v", r)
	}
	if len(rd.DataInViews) != 0 || cap(rd.DataInViews) == 0 {
		t.Errorf("after ReleaseViews: %d views, capacity %d (want 0, kept)", len(rd.DataInViews), cap(rd.DataInViews))
	}
	// Without ViewIn, or for an ORDERED READ, the data is copied.
	for _, c := range []*Command{
		{Tag: 5004, CDB: cdb16(0x88, 0, 8, 16), DataIn: make([]byte, 8192)},
		{Tag: 5005, CDB: cdb16(0x88, 0, 8, 16), DataIn: make([]byte, 8192), ViewIn: true, Attr: TaskOrdered},
	} {
		if r := f.s.Execute(ctx, c); r.Status != sense.StatusGood || len(c.DataInViews) != 0 || !bytes.Equal(c.DataIn, want) {
			t.Errorf("tag %d: %+v, %d views, data equal %v", c.Tag, r, len(c.DataInViews), bytes.Equal(c.DataIn, want))
		}
	}
}

// chanCompleter hands Submit's asynchronous results to a channel.
type chanCompleter chan Result

func (c chanCompleter) Complete(_ *Command, r Result) { c <- r }

// A SIMPLE READ that Submit chose to run inline (no ORDERED task was in the
// task set when it looked) may meet an ORDERED task that entered just
// before it and waits for views the fabric's goroutine holds: it must not
// wait on that goroutine (which would release the views), so Submit hands
// it, still dormant behind the ORDERED task, to a goroutine of the core.
func TestInlineSubmitNeverWaits(t *testing.T) {
	f := newFixture(t, LUConfig{})
	ctx := testCtx(t)
	x := &Command{Tag: 1, CDB: cdb16(0x88, 0, 0, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	if r := f.s.Execute(ctx, x); r.Status != sense.StatusGood || len(x.DataInViews) == 0 {
		t.Fatalf("READ with views: %+v, %d views", r, len(x.DataInViews))
	}
	// Another initiator's ORDERED task enters after runsInline looked.
	sB := f.tg.NewSession(nexusB)
	t.Cleanup(sB.Close)
	f.run(sB, 0, cdbTUR(), nil, 0) // power-on unit attention
	var ord <-chan Result
	f.tg.hooks.beforeEnter = func(tk *task) {
		if tk.tag != 3 {
			return
		}
		ord = f.goExec(ctx, sB, readCmd(2, 0, TaskOrdered))
		waitFor(t, "ORDERED task dormant behind the views", func() bool {
			f.lu.ts.mu.Lock()
			defer f.lu.ts.mu.Unlock()
			return f.lu.ts.waiting == 1
		})
	}
	y := &Command{Tag: 3, CDB: cdb16(0x88, 0, 256, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	done := make(chanCompleter, 1)
	type ret struct {
		r      Result
		inline bool
	}
	sub := make(chan ret, 1)
	go func() { r, in := f.s.Submit(ctx, y, done); sub <- ret{r, in} }()
	select {
	case s := <-sub:
		if s.inline {
			t.Fatalf("Submit ran the READ inline behind a dormant ORDERED task: %+v", s.r)
		}
	case <-time.After(5 * time.Second):
		x.ReleaseViews()
		t.Fatal("Submit waited in the task set on the fabric's goroutine")
	}
	f.tg.hooks.beforeEnter = nil
	select {
	case r := <-done:
		t.Fatalf("the READ completed before the older ORDERED task: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	x.ReleaseViews()
	// The ORDERED task ran, then the READ, from the views again.
	if r := waitResult(t, ord); r.Status != sense.StatusGood {
		t.Fatalf("ORDERED READ: %+v", r)
	}
	r := waitResult(t, done)
	if r.Status != sense.StatusGood || r.DataInLen != 64<<10 || len(y.DataInViews) == 0 {
		t.Fatalf("the READ after the ORDERED task: %+v, %d views", r, len(y.DataInViews))
	}
	y.ReleaseViews()
}

// With a task set per I_T nexus (control mode page TST=001b) only the
// nexus's own views hold its ORDERED tasks: another nexus's steady reads
// cannot starve them.
func TestViewsPerNexusTaskSet(t *testing.T) {
	f := newFixture(t, LUConfig{})
	ctx := testCtx(t)
	cdb, p := modeSelect10(hx(`0a 0a 22 10 00 40 00 00 ff ff 00 1e`))
	f.good(cdb, p)
	sB := f.tg.NewSession(nexusB)
	t.Cleanup(sB.Close)
	for range 3 { // power-on, then mode parameters changed
		f.run(sB, 0, cdbTUR(), nil, 0)
	}
	x := &Command{Tag: 1, CDB: cdb16(0x88, 0, 0, 128), DataIn: make([]byte, 64<<10), ViewIn: true}
	if r := f.s.Execute(ctx, x); r.Status != sense.StatusGood || len(x.DataInViews) == 0 {
		t.Fatalf("READ with views: %+v, %d views", r, len(x.DataInViews))
	}
	if r := waitResult(t, f.goExec(ctx, sB, readCmd(2, 0, TaskOrdered))); r.Status != sense.StatusGood {
		t.Fatalf("nexus B's ORDERED READ: %+v", r)
	}
	ord := f.goExec(ctx, f.s, readCmd(3, 0, TaskOrdered))
	select {
	case r := <-ord:
		t.Fatalf("nexus A's ORDERED task ran while its views were held: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	x.ReleaseViews()
	if r := waitResult(t, ord); r.Status != sense.StatusGood {
		t.Fatalf("nexus A's ORDERED READ after the release: %+v", r)
	}
}
