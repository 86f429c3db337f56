package scsi

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// viewOutWrite checks a WRITE(16) of n 512-byte blocks at lba offered for
// placement into the backstore's memory (Command.ViewOut) and submits it;
// it returns the command and Submit's result.
func viewOutWrite(t *testing.T, s Session, tag, lba uint64, n uint32, attr TaskAttr, c Completer) (*Command, Result, bool) {
	t.Helper()
	cmd := &Command{Tag: tag, CDB: cdb16(0x8a, 0, lba, n), Attr: attr, DataOutLen: int(n) * 512, ViewOut: true}
	if r, ok := s.Check(cmd); !ok || r.DataOutWanted != int(n)*512 {
		t.Fatalf("Check: %+v %v", r, ok)
	}
	if !cmd.ViewOut {
		t.Fatal("Check cleared ViewOut of a WRITE to a RAM logical unit")
	}
	cmd.Checked = true
	res, inline := s.Submit(testCtx(t), cmd, c)
	// A test that fails half-way ends the placement, so that closing
	// the session does not wait for it.
	t.Cleanup(func() { cmd.DataOutPlaced(false) })
	return cmd, res, inline
}

// mustPlace submits viewOutWrite's SIMPLE WRITE and requires it to wait
// for its data-out (FetchViews).
func mustPlace(t *testing.T, s Session, tag, lba uint64, n uint32) *Command {
	t.Helper()
	cmd, res, _ := viewOutWrite(t, s, tag, lba, n, TaskSimple, make(chanCompleter, 1))
	if !res.FetchViews {
		t.Fatalf("Submit: %+v", res)
	}
	return cmd
}

// fillViews writes data into the command's DataOutViews, in order, and
// reports whether they hold exactly len(data) bytes.
func fillViews(cmd *Command, data []byte) bool {
	k := 0
	for _, v := range cmd.DataOutViews {
		if k+len(v) > len(data) {
			return false
		}
		k += copy(v, data[k:])
	}
	return k == len(data)
}

// A WRITE with ViewOut on a RAM logical unit: Submit stops where the write
// would begin with FetchViews set and the medium's slices for the range
// (one per 64 KiB chunk touched); the bytes placed there are the medium
// once DataOutPlaced reports GOOD with the whole data-out used, and the
// observer sees one command.
func TestViewOutWrite(t *testing.T) {
	obs := &countObs{}
	f := newFixture(t, LUConfig{Observer: obs})
	base := obs.started.Load()
	done := make(chanCompleter, 1)
	// 128 blocks at LBA 100: bytes [51200, 116736) touch chunks 0 and 1.
	cmd, res, inline := viewOutWrite(t, f.s, 1, 100, 128, TaskSimple, done)
	if !inline || !res.FetchViews || res.DataOutWanted != 65536 {
		t.Fatalf("Submit: %+v inline %v; want FetchViews inline for 65536 bytes", res, inline)
	}
	if len(cmd.DataOutViews) != 2 || len(cmd.DataOutViews[0]) != 65536-51200 {
		t.Fatalf("views of lengths %v, want the two chunks' pieces", lens(cmd.DataOutViews))
	}
	data := pattern(65536, 0x5a)
	if !fillViews(cmd, data) {
		t.Fatal("views do not hold the data-out")
	}
	if obs.finished.Load() != base {
		t.Fatal("observer saw the WRITE finish before its data-out was placed")
	}
	res, inline = cmd.DataOutPlaced(true)
	if !inline || res.Status != sense.StatusGood || res.DataOutUsed != 65536 || res.FetchViews {
		t.Fatalf("DataOutPlaced: %+v inline %v", res, inline)
	}
	if len(cmd.DataOutViews) != 0 {
		t.Fatal("views kept after DataOutPlaced")
	}
	if got := f.in(cdb16(0x88, 0, 100, 128), 65536); !bytes.Equal(got, data) {
		t.Fatal("READ after the placed WRITE returns other data")
	}
	if s, e := obs.started.Load(), obs.finished.Load(); s != e {
		t.Fatalf("observer: %d started, %d finished", s, e)
	}
	// A second call ends nothing.
	if r, _ := cmd.DataOutPlaced(true); !r.Aborted {
		t.Fatalf("DataOutPlaced twice: %+v", r)
	}
}

// Check keeps ViewOut only for WRITE(6/10/12/16) of a backstore that is a
// WriteViewer; Execute ignores it and writes DataOut.
func TestViewOutOnlyWhereItApplies(t *testing.T) {
	f := newFixture(t, LUConfig{})
	for _, c := range []struct {
		name string
		cdb  []byte
		out  int
	}{
		{"READ(16)", cdb16(0x88, 0, 0, 8), 0},
		{"WRITE AND VERIFY(16)", cdb16(0x8e, 0, 0, 8), 4096},
		{"WRITE SAME(16)", cdb16(0x93, 0, 0, 8), 512},
	} {
		cmd := &Command{Tag: 9, CDB: c.cdb, DataOutLen: c.out, ViewOut: true}
		if _, ok := f.s.Check(cmd); !ok || cmd.ViewOut {
			t.Errorf("%s: Check ok %v, ViewOut %v; want ok and ViewOut cleared", c.name, ok, cmd.ViewOut)
		}
	}
	plain := newFixture(t, LUConfig{Backstore: struct{ backstore.Backstore }{backstore.NewRAM(1 << 20)}})
	cmd := &Command{Tag: 9, CDB: cdb16(0x8a, 0, 0, 8), DataOutLen: 4096, ViewOut: true}
	if _, ok := plain.s.Check(cmd); !ok || cmd.ViewOut {
		t.Fatalf("WRITE to a backstore without WriteView: ok %v ViewOut %v", ok, cmd.ViewOut)
	}
	data := pattern(4096, 3)
	cmd = &Command{Tag: 10, CDB: cdb16(0x8a, 0, 8, 8), DataOut: data, DataOutLen: 4096, ViewOut: true}
	if r := f.s.Execute(testCtx(t), cmd); r.Status != sense.StatusGood || r.FetchViews {
		t.Fatalf("Execute with ViewOut: %+v", r)
	}
	if got := f.in(cdb16(0x88, 0, 8, 8), 4096); !bytes.Equal(got, data) {
		t.Fatal("Execute with ViewOut did not write DataOut")
	}
}

// A data-out transfer that fails ends the WRITE with CHECK CONDITION,
// MEDIUM ERROR, WRITE ERROR (03/0C/00) naming its first block.
func TestViewOutFetchFailed(t *testing.T) {
	f := newFixture(t, LUConfig{})
	cmd := mustPlace(t, f.s, 1, 64, 64)
	res, inline := cmd.DataOutPlaced(false)
	if !inline {
		t.Fatal("failed placement not inline")
	}
	d := wantSense(t, res, sense.KeyMediumError, 0x0c, 0x00)
	if !d.InfoValid || d.Info != 64 {
		t.Fatalf("INFORMATION %d (valid %v), want LBA 64", d.Info, d.InfoValid)
	}
}

// While a WRITE waits for its data-out it is in the task set: ABORT TASK
// returns only after DataOutPlaced, which then reports the command
// aborted; an ORDERED READ submitted meanwhile runs after it and reads
// its data; a COMPARE AND WRITE waits for the write lock it holds.
func TestViewOutHoldsTask(t *testing.T) {
	f := newFixture(t, LUConfig{})
	ctx := testCtx(t)
	cmd := mustPlace(t, f.s, 1, 0, 8)
	tmf := make(chan TMFResponse, 1)
	go func() { tmf <- f.s.TaskManagement(ctx, TMFAbortTask, 0, 1) }()
	select {
	case r := <-tmf:
		t.Fatalf("ABORT TASK returned %v while the data-out was being placed", r)
	case <-time.After(100 * time.Millisecond):
	}
	if r, _ := cmd.DataOutPlaced(true); !r.Aborted {
		t.Fatalf("aborted WRITE: %+v", r)
	}
	select {
	case r := <-tmf:
		if r != TMFComplete {
			t.Fatalf("ABORT TASK: %v", r)
		}
	case <-ctx.Done():
		t.Fatal("ABORT TASK did not return after DataOutPlaced")
	}

	data := pattern(4096, 0x77)
	cmd = mustPlace(t, f.s, 2, 16, 8)
	ord := &Command{Tag: 3, CDB: cdb16(0x88, 0, 16, 8), DataIn: make([]byte, 4096), Attr: TaskOrdered}
	ordDone := f.goExec(ctx, f.s, ord)
	select {
	case r := <-ordDone:
		t.Fatalf("ORDERED READ ran before the older WRITE's data-out was placed: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	if !fillViews(cmd, data) {
		t.Fatal("views do not hold the data-out")
	}
	if r, _ := cmd.DataOutPlaced(true); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	if r := waitResult(t, ordDone); r.Status != sense.StatusGood || !bytes.Equal(ord.DataIn, data) {
		t.Fatalf("ORDERED READ: %+v, data equal %v", r, bytes.Equal(ord.DataIn, data))
	}

	cmd = mustPlace(t, f.s, 4, 32, 8)
	caw := cdb16(0x89, 0, 32, 0)
	caw[13] = 1
	cawDone := f.goExec(ctx, f.s, &Command{Tag: 5, CDB: caw, DataOut: append(bytes.Clone(data[:512]), make([]byte, 512)...)})
	select {
	case r := <-cawDone:
		t.Fatalf("COMPARE AND WRITE ran before the WRITE's data-out was placed: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	fillViews(cmd, data)
	if r, _ := cmd.DataOutPlaced(true); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	// The compare saw the placed data: it matched, and wrote zeros.
	if r := waitResult(t, cawDone); r.Status != sense.StatusGood {
		t.Fatalf("COMPARE AND WRITE after the WRITE: %+v", r)
	}
	want := append(make([]byte, 512), data[512:]...)
	if got := f.in(cdb16(0x88, 0, 32, 8), 4096); !bytes.Equal(got, want) {
		t.Fatal("medium after WRITE then COMPARE AND WRITE")
	}
}

// When the write lock is held or awaited (a COMPARE AND WRITE, a resize),
// the data-out goes to a buffer: DataOutPlaced then finishes on a
// goroutine of the core once the lock is free, through the Completer.
func TestViewOutWriteLockBusy(t *testing.T) {
	f := newFixture(t, LUConfig{})
	done := make(chanCompleter, 1)
	f.lu.lockExclusive()
	cmd, res, _ := viewOutWrite(t, f.s, 1, 8, 16, TaskSimple, done)
	if !res.FetchViews || len(cmd.DataOutViews) != 1 || len(cmd.DataOutViews[0]) != 8192 {
		t.Fatalf("Submit under the write lock: %+v, views %v", res, lens(cmd.DataOutViews))
	}
	data := pattern(8192, 0x11)
	fillViews(cmd, data)
	if _, inline := cmd.DataOutPlaced(true); inline {
		t.Fatal("DataOutPlaced finished inline while the write lock is held")
	}
	select {
	case r := <-done:
		t.Fatalf("completed under the write lock: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	f.lu.unlockExclusive()
	if r := waitResult(t, done); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	if got := f.in(cdb16(0x88, 0, 8, 16), 8192); !bytes.Equal(got, data) {
		t.Fatal("buffered WRITE did not reach the medium")
	}
}

// Abandon frees the tag of a WRITE waiting for its data-out at once (a
// new command may take it), while the task stays until DataOutPlaced,
// which reports it aborted.
func TestViewOutAbandon(t *testing.T) {
	f := newFixture(t, LUConfig{})
	cmd := mustPlace(t, f.s, 7, 0, 8)
	f.s.Abandon(cmd)
	tur := &Command{Tag: 7, CDB: cdbTUR()}
	if r := f.s.Execute(testCtx(t), tur); r.Status != sense.StatusGood {
		t.Fatalf("TEST UNIT READY reusing the abandoned tag: %+v", r)
	}
	inSet := func() bool {
		f.lu.ts.mu.Lock()
		defer f.lu.ts.mu.Unlock()
		return f.lu.ts.head != nil
	}
	if !inSet() {
		t.Fatal("abandoned WRITE left the task set before its data-out ended")
	}
	if r, _ := cmd.DataOutPlaced(false); !r.Aborted {
		t.Fatalf("abandoned WRITE: %+v", r)
	}
	if inSet() {
		t.Fatal("a task is left in the task set")
	}
}

func lens(v [][]byte) []int {
	var n []int
	for _, b := range v {
		n = append(n, len(b))
	}
	return n
}

// The fabric's goroutine must never wait for a data-out placement it is
// itself to deliver: with a WRITE placing data-out and a COMPARE AND
// WRITE waiting for it to end, an ordinary WRITE that Submit runs inline
// completes (it does not queue behind the COMPARE AND WRITE on the write
// lock), and once the placement ends the COMPARE AND WRITE runs.
func TestViewOutInlineWriteNotBlocked(t *testing.T) {
	f := newFixture(t, LUConfig{})
	ctx := testCtx(t)
	cmd := mustPlace(t, f.s, 1, 0, 128)
	caw := cdb16(0x89, 0, 1000, 0)
	caw[13] = 1
	cawDone := f.goExec(ctx, f.s, &Command{Tag: 2, CDB: caw, DataOut: make([]byte, 1024)})
	time.Sleep(50 * time.Millisecond) // the COMPARE AND WRITE waits for the lock
	small := &Command{Tag: 3, CDB: cdb16(0x8a, 0, 2000, 8), DataOut: pattern(4096, 9), DataOutLen: 4096}
	if _, ok := f.s.Check(small); !ok {
		t.Fatal("Check of the small WRITE")
	}
	small.Checked = true
	done := make(chanCompleter, 1)
	inlineDone := make(chan Result, 1)
	go func() {
		r, inline := f.s.Submit(ctx, small, done)
		if !inline {
			r = <-done
		}
		inlineDone <- r
	}()
	select {
	case r := <-inlineDone:
		if r.Status != sense.StatusGood {
			t.Fatalf("small WRITE: %+v", r)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a WRITE on the fabric's goroutine waits behind a COMPARE AND WRITE that waits for that goroutine's placement")
	}
	fillViews(cmd, make([]byte, 65536))
	if r, _ := cmd.DataOutPlaced(true); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	if r := waitResult(t, cawDone); r.Status != sense.StatusGood {
		t.Fatalf("COMPARE AND WRITE: %+v", r)
	}
}

// A resize waits for a placement under way (a shrink could otherwise
// detach the chunks being written from the medium).
func TestViewOutResizeWaits(t *testing.T) {
	f := newFixture(t, LUConfig{})
	cmd := mustPlace(t, f.s, 1, 1000, 128)
	resized := make(chan error, 1)
	go func() { resized <- f.lu.Resize(512 << 10) }()
	select {
	case err := <-resized:
		t.Fatalf("Resize returned (%v) during the placement", err)
	case <-time.After(100 * time.Millisecond):
	}
	fillViews(cmd, pattern(65536, 1))
	if r, _ := cmd.DataOutPlaced(true); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	select {
	case err := <-resized:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Resize did not return after the placement")
	}
}

// A LUN mapped to another logical unit, whose backstore has no WriteView,
// between Check (which kept ViewOut) and Submit: the data-out goes to a
// buffer, written to the new logical unit once placed.
func TestViewOutLUNRemappedAfterCheck(t *testing.T) {
	f := newFixture(t, LUConfig{})
	cmd := &Command{Tag: 1, CDB: cdb16(0x8a, 0, 0, 64), DataOutLen: 64 * 512, ViewOut: true}
	if _, ok := f.s.Check(cmd); !ok || !cmd.ViewOut {
		t.Fatal("Check did not keep ViewOut")
	}
	cmd.Checked = true
	other, err := NewLogicalUnit(LUConfig{Backstore: struct{ backstore.Backstore }{backstore.NewRAM(1 << 20)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tg.RemoveLUN(0); err != nil {
		t.Fatal(err)
	}
	if err := f.tg.AddLUN(0, other); err != nil {
		t.Fatal(err)
	}
	done := make(chanCompleter, 1)
	res, inline := f.s.Submit(testCtx(t), cmd, done)
	if !inline { // the new logical unit's backstore may block
		res = waitResult(t, done)
	}
	if !res.FetchViews || len(cmd.DataOutViews) != 1 {
		t.Fatalf("Submit: %+v", res)
	}
	data := pattern(64*512, 4)
	fillViews(cmd, data)
	res, inline = cmd.DataOutPlaced(true)
	if !inline {
		res = waitResult(t, done)
	}
	if res.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", res)
	}
	got := make([]byte, len(data))
	if _, err := other.bs.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the new logical unit does not hold the data (%v)", err)
	}
}

// An UNMAP of blocks a WRITE is placing data-out into waits for the
// placement (else pages reported deallocated would hold the new data),
// and then deallocates them.
func TestViewOutUnmapWaits(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	ctx := testCtx(t)
	cmd := mustPlace(t, f.s, 1, 0, 128)
	// UNMAP blocks 8..15: parameter list header, one descriptor (LBA, count).
	param := make([]byte, 24)
	param[1], param[3] = 22, 16
	param[15], param[19] = 8, 8
	unmapDone := f.goExec(ctx, f.s, &Command{Tag: 2, CDB: cdb10(0x42, 0, 0, 24), DataOut: param})
	select {
	case r := <-unmapDone:
		t.Fatalf("UNMAP ran during the placement: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	fillViews(cmd, pattern(65536, 7))
	if r, _ := cmd.DataOutPlaced(true); r.Status != sense.StatusGood {
		t.Fatalf("WRITE: %+v", r)
	}
	if r := waitResult(t, unmapDone); r.Status != sense.StatusGood {
		t.Fatalf("UNMAP: %+v", r)
	}
	if got := f.in(cdb16(0x88, 0, 8, 8), 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("unmapped blocks do not read zeros")
	}
}
