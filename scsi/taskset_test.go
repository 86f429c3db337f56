package scsi

import (
	"context"
	"slices"
	"testing"

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
