package scsi

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// TestCheckBeforeData: Check refuses, before any data moves, what Execute
// would refuse (SAM-5 §5.14 unit attention, an invalid CDB, the WRITE
// PROTECTED of a read-only mapping, the data-out length of a WRITE against its
// CDB as LIO's target_cmd_size_check), consumes the unit attention once,
// and gives the CDB's transfer lengths of an accepted command.
func TestCheckBeforeData(t *testing.T) {
	tg := NewTarget(TargetConfig{})
	lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	s := tg.OpenSession(nexusA, View{LUNs: map[uint64]uint64{0: 0, 1: 0}, ReadOnly: map[uint64]bool{1: true}})
	defer s.Close()
	write8 := cdb10(opWrite10, 0, 0, 8)
	// The first command of the nexus gets the power-on unit attention,
	// without residuals; the second is accepted.
	r, ok := s.Check(&Command{Tag: 1, LUN: EncodeLUN(0), CDB: write8, DataOutLen: 4096})
	if ok {
		t.Fatal("Check accepted the first command: want the power-on unit attention")
	}
	wantSense(t, r, sense.KeyUnitAttention, 0x29, 0x00)
	if r.DataOutWanted != -1 || r.DataInWanted != -1 {
		t.Fatalf("refused command wants %d/%d bytes: want -1/-1 (no residual)", r.DataOutWanted, r.DataInWanted)
	}
	r, ok = s.Check(&Command{Tag: 2, LUN: EncodeLUN(0), CDB: write8, DataOutLen: 4096})
	if !ok || r.DataOutWanted != 4096 || r.DataInWanted != 0 {
		t.Fatalf("WRITE(10) of 8 blocks: ok %v, wants out %d in %d; want accepted, 4096 and 0", ok, r.DataOutWanted, r.DataInWanted)
	}
	// A READ: the data-in length comes from the CDB.
	r, ok = s.Check(&Command{Tag: 3, LUN: EncodeLUN(0), CDB: cdb10(opRead10, 0, 0, 3)})
	if !ok || r.DataInWanted != 1536 || r.DataOutWanted != 0 {
		t.Fatalf("READ(10) of 3 blocks: ok %v, wants out %d in %d", ok, r.DataOutWanted, r.DataInWanted)
	}
	// The write through the read-only mapping, a bad CDB field, an
	// unmapped LUN, and a data-out shorter than the CDB.
	for _, c := range []struct {
		name           string
		cmd            Command
		key, asc, ascq uint8
		out            int
	}{
		{"read-only LUN 1", Command{LUN: EncodeLUN(1), CDB: write8, DataOutLen: 4096}, sense.KeyDataProtect, 0x27, 0x00, -1},
		{"CDB shorter than READ(10)", Command{LUN: EncodeLUN(0), CDB: cdb10(opRead10, 0, 0, 1)[:9:9]}, sense.KeyIllegalRequest, 0x24, 0x00, -1},
		{"unmapped LUN 2", Command{LUN: EncodeLUN(2), CDB: write8, DataOutLen: 4096}, sense.KeyIllegalRequest, 0x25, 0x00, -1},
		{"data-out 512 of 4096", Command{LUN: EncodeLUN(0), CDB: write8, DataOutLen: 512}, sense.KeyIllegalRequest, 0x0e, 0x03, 4096},
		// 1 MiB of 512-byte blocks: the last block is 2047.
		{"WRITE past the capacity", Command{LUN: EncodeLUN(0), CDB: cdb10(opWrite10, 0, 2047, 2), DataOutLen: 1024}, sense.KeyIllegalRequest, 0x21, 0x00, -1},
		{"READ past the capacity", Command{LUN: EncodeLUN(0), CDB: cdb10(opRead10, 0, 2048, 1)}, sense.KeyIllegalRequest, 0x21, 0x00, -1},
		// MaxTransferBytes defaults to 8 MiB: 16385 blocks is one more.
		{"READ over the maximum transfer length", Command{LUN: EncodeLUN(0), CDB: cdb16(opRead16, 0, 0, 16385)}, sense.KeyIllegalRequest, 0x24, 0x00, -1},
	} {
		c.cmd.Tag = 10
		r, ok := s.Check(&c.cmd)
		if ok {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		wantSense(t, r, c.key, c.asc, c.ascq)
		if r.DataOutWanted != c.out {
			t.Errorf("%s: DataOutWanted %d, want %d", c.name, r.DataOutWanted, c.out)
		}
	}
	// Execute of a checked command does not report a unit attention that
	// arrived after Check, the next command does.
	cmd := &Command{Tag: 4, LUN: EncodeLUN(0), CDB: write8, DataOutLen: 4096}
	if _, ok := s.Check(cmd); !ok {
		t.Fatal("WRITE refused")
	}
	lu.uaAllExisting(ReasonUAModeChanged, "")
	cmd.Checked, cmd.DataOut = true, bytes.Repeat([]byte{7}, 4096)
	if r := s.Execute(context.Background(), cmd); r.Status != sense.StatusGood {
		t.Fatalf("checked WRITE: status %#x sense % x", r.Status, r.Sense)
	}
	r = s.Execute(context.Background(), &Command{Tag: 5, LUN: EncodeLUN(0), CDB: cdbTUR()})
	wantSense(t, r, sense.KeyUnitAttention, 0x2a, 0x01)
}

// TestViewMapping: a view renumbers logical units, hides the others from
// commands, REPORT LUNS and task management (SPC-4 §4.6, §6.33).
func TestViewMapping(t *testing.T) {
	tg := NewTarget(TargetConfig{})
	var lus []*LogicalUnit
	for n := range uint64(3) {
		lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20), BlockSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.AddLUN(n, lu); err != nil {
			t.Fatal(err)
		}
		lus = append(lus, lu)
	}
	s := tg.OpenSession(nexusA, View{LUNs: map[uint64]uint64{0: 2, 3: 1}})
	defer s.Close()
	ctx := context.Background()
	in := make([]byte, 64)
	r := s.Execute(ctx, &Command{Tag: 1, CDB: []byte{opReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, DataIn: in})
	want := []byte{0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0}
	if r.Status != sense.StatusGood || !bytes.Equal(in[:r.DataInLen], want) {
		t.Fatalf("REPORT LUNS: status %#x data % x, want % x", r.Status, in[:r.DataInLen], want)
	}
	// LUN 3 reaches logical unit 1: a write through it reads back there.
	data := bytes.Repeat([]byte{0x5a}, 512)
	for tag := uint64(2); tag < 4; tag++ { // the first gets the power-on unit attention
		r = s.Execute(ctx, &Command{Tag: tag, LUN: EncodeLUN(3), CDB: cdb10(opWrite10, 0, 0, 1), DataOut: data})
	}
	if r.Status != sense.StatusGood {
		t.Fatalf("WRITE through LUN 3: status %#x", r.Status)
	}
	got := make([]byte, 512)
	if _, err := lus[1].bs.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("logical unit 1 holds % x..., want the block written through LUN 3", got[:4])
	}
	// LUN 1 is not in the view; logical unit 0 is nowhere.
	r = s.Execute(ctx, &Command{Tag: 4, LUN: EncodeLUN(1), CDB: cdbTUR()})
	wantSense(t, r, sense.KeyIllegalRequest, 0x25, 0x00)
	if got := s.TaskManagement(ctx, TMFLUNReset, EncodeLUN(1), 0); got != TMFIncorrectLUN {
		t.Fatalf("LOGICAL UNIT RESET of unmapped LUN 1: %#x, want INCORRECT LOGICAL UNIT NUMBER", got)
	}
	// INQUIRY of the unmapped LUN: peripheral qualifier 011b (SPC-4 §6.6.2).
	in = make([]byte, 36)
	r = s.Execute(ctx, &Command{Tag: 5, LUN: EncodeLUN(1), CDB: cdbInquiry(false, 0, 36), DataIn: in})
	if r.Status != sense.StatusGood || in[0] != 0x7f {
		t.Fatalf("INQUIRY of unmapped LUN 1: status %#x byte 0 %#x, want 7Fh", r.Status, in[0])
	}
}

// completer collects the results of Submit's goroutines.
type completer chan Result

func (c completer) Complete(_ *Command, r Result) { c <- r }

// blockingRAM is a RAM backstore that does not declare NonBlocking.
type blockingRAM struct{ *backstore.RAM }

func (blockingRAM) NonBlocking() bool { return false }

// TestSubmitInline: READ and WRITE on a backstore that never blocks run on
// the caller's goroutine; other commands, other backstores and commands
// behind an ORDERED task go to a goroutine and report through Complete.
func TestSubmitInline(t *testing.T) {
	for _, c := range []struct {
		name   string
		bs     backstore.Backstore
		cdb    []byte
		attr   TaskAttr
		inline bool
	}{
		{"READ on RAM", backstore.NewRAM(1 << 20), cdb10(opRead10, 0, 0, 1), TaskSimple, true},
		{"TEST UNIT READY on RAM", backstore.NewRAM(1 << 20), cdbTUR(), TaskSimple, false},
		{"ORDERED READ on RAM", backstore.NewRAM(1 << 20), cdb10(opRead10, 0, 0, 1), TaskOrdered, false},
		{"READ on a blocking backstore", blockingRAM{backstore.NewRAM(1 << 20)}, cdb10(opRead10, 0, 0, 1), TaskSimple, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, LUConfig{Backstore: c.bs, BlockSize: 512})
			done := make(completer, 1)
			cmd := &Command{Tag: 100, CDB: c.cdb, Attr: c.attr, DataIn: make([]byte, 512)}
			r, inline := f.s.Submit(testCtx(t), cmd, done)
			if inline != c.inline {
				t.Fatalf("inline %v, want %v", inline, c.inline)
			}
			if !inline {
				select {
				case r = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("no completion")
				}
			}
			if r.Status != sense.StatusGood {
				t.Fatalf("status %#x sense % x", r.Status, r.Sense)
			}
		})
	}
}

// hangingRAM blocks ReadAt until release is closed.
type hangingRAM struct {
	*backstore.RAM
	release chan struct{}
}

// NonBlocking hides RAM's: this backstore blocks.
func (hangingRAM) NonBlocking() bool { return false }

func (h hangingRAM) ReadAt(p []byte, off int64) (int, error) {
	<-h.release
	return h.RAM.ReadAt(p, off)
}

// TestAbandon: a command whose connection is gone is aborted silently and
// its tag is free at once for the nexus's next command, while the old one
// still waits for its backstore (SAM-5 §6.3.4 for that command); its
// completion then reports it aborted.
func TestAbandon(t *testing.T) {
	h := hangingRAM{RAM: backstore.NewRAM(1 << 20), release: make(chan struct{})}
	f := newFixture(t, LUConfig{Backstore: h, BlockSize: 512})
	done := make(completer, 1)
	ctx, cancel := context.WithCancel(testCtx(t))
	old := &Command{Tag: 7, CDB: cdb10(opRead10, 0, 0, 1), DataIn: make([]byte, 512)}
	if _, inline := f.s.Submit(ctx, old, done); inline {
		t.Fatal("READ on a blocking backstore ran inline")
	}
	// The same tag is an overlapped command while the first one holds it.
	wantTag := func(want uint8) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := f.s.Execute(testCtx(t), &Command{Tag: 7, CDB: cdbTUR()})
			if r.Status == want || time.Now().After(deadline) {
				if r.Status != want {
					t.Fatalf("TEST UNIT READY with tag 7: status %#x, want %#x", r.Status, want)
				}
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The probes take tag 7 themselves: one made before the READ took it
	// would make the READ the overlapped command. Wait for the READ's.
	sess := f.s.(*session)
	waitFor(t, "the READ's tag registered", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		_, ok := sess.tags[7]
		return ok
	})
	wantTag(sense.StatusCheckCondition)
	cancel()
	f.s.Abandon(old)
	wantTag(sense.StatusGood)
	close(h.release)
	select {
	case r := <-done:
		if !r.Aborted {
			t.Fatalf("abandoned command's result %+v, want Aborted", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no completion for the abandoned command")
	}
}

// TestSubmitRegistersTaskBeforeReturning: a command Submit hands to a
// goroutine has its task registered before Submit returns, so a LOGICAL
// UNIT RESET the fabric takes next aborts it, and it does not run after
// the reset reported it gone (the fabric ends it as aborted). Check has
// looked for a unit attention already and the next command takes the
// reset's, so nothing else stops it. With one P the goroutine cannot run
// until the test waits for it.
func TestSubmitRegistersTaskBeforeReturning(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ram := backstore.NewRAM(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blockingRAM{ram}, BlockSize: 512})
	ctx := testCtx(t)
	old, repl := bytes.Repeat([]byte{0xa1}, 512), bytes.Repeat([]byte{0xb2}, 512)
	if r := f.s.Execute(ctx, &Command{Tag: 1, CDB: cdb10(opWrite10, 0, 0, 1), DataOut: old}); r.Status != sense.StatusGood {
		t.Fatalf("first WRITE: %+v", r)
	}
	done := make(completer, 1)
	cmd := &Command{Tag: 2, CDB: cdb10(opWrite10, 0, 0, 1), DataOut: repl, DataOutLen: 512}
	// As a fabric does: Check (unit attention taken there), then Submit.
	if r, ok := f.s.Check(cmd); !ok {
		t.Fatalf("Check: %+v", r)
	}
	if _, inline := f.s.Submit(ctx, cmd, done); inline {
		t.Fatal("WRITE to a blocking backstore ran inline")
	}
	if r := f.s.TaskManagement(ctx, TMFLUNReset, 0, 0); r != TMFComplete {
		t.Fatalf("LOGICAL UNIT RESET: %v", r)
	}
	// The next command of the nexus takes the reset's unit attention.
	r := f.s.Execute(ctx, &Command{Tag: 3, CDB: cdbTUR()})
	wantSense(t, r, sense.KeyUnitAttention, 0x29, 0x03)
	select {
	case r := <-done:
		if !r.Aborted {
			t.Fatalf("WRITE submitted before the reset: %+v, want aborted", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no completion")
	}
	got := make([]byte, 512)
	if _, err := ram.ReadAt(got, 0); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("block 0 holds % x..., want the first WRITE's data (the reset's WRITE must not run)", got[:4])
	}
}
