package scsi

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// Service response codes as SAS SSP and FCP-4 carry them (SAM-5 §7.1):
// FUNCTION COMPLETE 00h, NOT SUPPORTED 04h, FUNCTION SUCCEEDED 08h,
// INCORRECT LOGICAL UNIT NUMBER 09h.
const (
	rspComplete     = 0x00
	rspNotSupported = 0x04
	rspSucceeded    = 0x08
	rspIncorrectLUN = 0x09
)

// addLU attaches a second RAM logical unit at lun.
func (f *fixture) addLU(lun uint64) *LogicalUnit {
	f.t.Helper()
	lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.tg.AddLUN(lun, lu); err != nil {
		f.t.Fatal(err)
	}
	return lu
}

// QUERY TASK answers FUNCTION SUCCEEDED while the tagged task is in the
// task set of the addressed I_T_L nexus, FUNCTION COMPLETE otherwise;
// QUERY TASK SET likewise for any task of the I_T nexus (SAM-5 §7).
func TestQueryTaskAndTaskSet(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	f.addLU(1)
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
	sB := f.tg.NewSession(nexusB)
	defer sB.Close()
	ctx := testCtx(t)
	blk.block(7)
	a := f.goExec(ctx, f.s, readCmd(3001, 7, TaskSimple))
	blk.waitStarted(t, 7)

	type query struct {
		name string
		s    Session
		fn   TMF
		lun  uint64
		tag  uint64
		want TMFResponse
	}
	during := []query{
		{"QUERY TASK running tag", f.s, TMFQueryTask, 0, 3001, rspSucceeded},
		{"QUERY TASK unknown tag", f.s, TMFQueryTask, 0, 3002, rspComplete},
		{"QUERY TASK tag on another LU", f.s, TMFQueryTask, 1, 3001, rspComplete},
		{"QUERY TASK tag of another nexus", sB, TMFQueryTask, 0, 3001, rspComplete},
		{"QUERY TASK no such LU", f.s, TMFQueryTask, 9, 3001, rspIncorrectLUN},
		{"QUERY TASK SET own nexus", f.s, TMFQueryTaskSet, 0, 0, rspSucceeded},
		{"QUERY TASK SET other LU", f.s, TMFQueryTaskSet, 1, 0, rspComplete},
		{"QUERY TASK SET other nexus", sB, TMFQueryTaskSet, 0, 0, rspComplete},
		{"QUERY TASK SET no such LU", f.s, TMFQueryTaskSet, 9, 0, rspIncorrectLUN},
		{"CLEAR ACA (NACA=1 unsupported)", f.s, TMFClearACA, 0, 0, rspNotSupported},
		{"unassigned function 20h", f.s, TMF(0x20), 0, 0, rspNotSupported},
	}
	for _, q := range during {
		if got := q.s.TaskManagement(ctx, q.fn, EncodeLUN(q.lun), q.tag); got != q.want {
			t.Errorf("%s: response %#02x, want %#02x", q.name, got, q.want)
		}
	}
	blk.release(7)
	if r := waitResult(t, a); r.Status != sense.StatusGood {
		t.Fatalf("read: %+v", r)
	}
	after := []query{
		{"QUERY TASK after completion", f.s, TMFQueryTask, 0, 3001, rspComplete},
		{"QUERY TASK SET after completion", f.s, TMFQueryTaskSet, 0, 0, rspComplete},
	}
	for _, q := range after {
		if got := q.s.TaskManagement(ctx, q.fn, EncodeLUN(q.lun), q.tag); got != q.want {
			t.Errorf("%s: response %#02x, want %#02x", q.name, got, q.want)
		}
	}
}

// QUERY ASYNCHRONOUS EVENT reports the pending unit attention without
// clearing it; ADDITIONAL RESPONSE INFORMATION byte 0 is UADE DEPTH (bits
// 5..4: 01b one condition, 10b more) and SENSE KEY (bits 3..0), then ASC
// and ASCQ (SAM-5 §7).
func TestQueryAsyncEvent(t *testing.T) {
	f := newFixture(t, LUConfig{})
	ctx := testCtx(t)
	sB := f.tg.NewSession(nexusB).(TMFInfoSession)
	defer sB.Close()
	qae := func(s Session) (TMFResponse, [3]byte) {
		return s.(TMFInfoSession).TaskManagementInfo(ctx, TMFQueryAsyncEvent, EncodeLUN(0), 0)
	}
	check := func(what string, s Session, wantRsp TMFResponse, want [3]byte) {
		t.Helper()
		rsp, info := qae(s)
		if rsp != wantRsp || info != want {
			t.Fatalf("%s: %#02x % x, want %#02x % x", what, rsp, info, wantRsp, want)
		}
	}
	// B never reached LUN 0: POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
	// (06/29/00), one condition.
	check("fresh nexus", sB, rspSucceeded, [3]byte{0x16, 0x29, 0x00})
	check("still pending", sB, rspSucceeded, [3]byte{0x16, 0x29, 0x00})
	wantSense(t, f.run(sB, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)
	check("after TUR took it", sB, rspComplete, [3]byte{})
	check("nexus A, nothing pending", f.s, rspComplete, [3]byte{})

	// Two conditions: CAPACITY DATA HAS CHANGED (06/2A/09) then REPORTED
	// LUNS DATA HAS CHANGED (06/3F/0E); the oldest is reported, depth 10b.
	if err := f.lu.Resize(2 << 20); err != nil {
		t.Fatal(err)
	}
	f.addLU(1)
	check("two pending", f.s, rspSucceeded, [3]byte{0x26, 0x2A, 0x09})
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x09)
	check("one left", f.s, rspSucceeded, [3]byte{0x16, 0x3F, 0x0E})
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
	check("none left", f.s, rspComplete, [3]byte{})

	if rsp, _ := f.s.(TMFInfoSession).TaskManagementInfo(ctx, TMFQueryAsyncEvent, EncodeLUN(9), 0); rsp != rspIncorrectLUN {
		t.Fatalf("no such LU: %#02x", rsp)
	}
}

// I_T NEXUS RESET acts as I_T nexus loss for the requesting nexus on every
// logical unit (SAM-5 §6.3.4, §7): its tasks are aborted without a
// response, other nexuses' tasks run on, its RESERVE(6) reservation is
// released (SPC-2 §5.5.1), I_T NEXUS LOSS OCCURRED (06/29/07) is
// established for it alone, and persistent reservation registrations stay
// (SPC-4 §5.13).
func TestITNexusReset(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	f.addLU(1)
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x3F, 0x0E)
	wantSense(t, f.run(f.s, 1, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)
	sB := f.tg.NewSession(nexusB)
	defer sB.Close()
	wantSense(t, f.run(sB, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)
	wantSense(t, f.run(sB, 1, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)

	// A: SPC-2 RESERVE(6) on LUN 1, PR REGISTER key 0xA1 on LUN 0.
	if r := f.run(f.s, 1, []byte{0x16, 0, 0, 0, 0, 0}, nil, 0); r.Status != sense.StatusGood {
		t.Fatalf("RESERVE(6): %+v", r)
	}
	cdb, p := prOut(0x00, 0, 0, 0xA1)
	f.good(cdb, p)
	if r := f.run(sB, 1, cdb16(0x88, 0, 0, 1), nil, 512); r.Status != sense.StatusReservationConflict {
		t.Fatalf("B read under A's RESERVE: %+v", r)
	}

	ctx := testCtx(t)
	blk.block(5)
	blk.block(6)
	a := f.goExec(ctx, f.s, readCmd(4001, 5, TaskSimple))
	b := f.goExec(ctx, sB, readCmd(4001, 6, TaskSimple))
	blk.waitStarted(t, 5)
	blk.waitStarted(t, 6)
	// A's running read is released once the reset has flagged it; B's only
	// after the reset completed, so the reset must not wait for it.
	f.tg.hooks.afterAbort = func() { blk.release(5) }
	// The LUN field is ignored: an unknown LUN still resets the nexus.
	if rsp := f.s.TaskManagement(ctx, TMFITNexusReset, EncodeLUN(9), 0); rsp != rspComplete {
		t.Fatalf("I_T NEXUS RESET: %#02x", rsp)
	}
	if r := waitResult(t, a); !r.Aborted {
		t.Fatalf("A's task not aborted silently: %+v", r)
	}
	blk.release(6)
	if r := waitResult(t, b); r.Status != sense.StatusGood || r.Aborted {
		t.Fatalf("B's task: %+v", r)
	}

	for _, lun := range []uint64{0, 1} {
		if got := f.tg.LogicalUnit(lun).PendingUnitAttentions(nexusB); len(got) != 0 {
			t.Fatalf("B's unit attentions on LUN %d: %04x", lun, got)
		}
		wantSense(t, f.run(f.s, lun, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x07)
		if r := f.run(f.s, lun, cdbTUR(), nil, 0); r.Status != sense.StatusGood {
			t.Fatalf("LUN %d second TUR: %+v", lun, r)
		}
	}
	// The SPC-2 reservation is gone: B reads LUN 1.
	if r := f.run(sB, 1, cdb16(0x88, 0, 0, 1), nil, 512); r.Status != sense.StatusGood {
		t.Fatalf("B read after reset: %+v", r)
	}
	// READ KEYS: PRGENERATION 1, ADDITIONAL LENGTH 8, key A1 (SPC-4 §6.15.2).
	got := f.in([]byte{0x5E, 0x00, 0, 0, 0, 0, 0, 0, 64, 0}, 64)
	wantBytes(t, "READ KEYS", got, hx(`00000001 00000008 00000000000000a1`))
}

// A command whose tag is registered but which has not entered the task
// set yet must not escape a task management function that completes in
// that window: the command is held in the window by a hook, the TMF marks
// it aborted, and the command then ends aborted without touching the
// medium (SAM-5 §7; TAS=1 and another nexus: TASK ABORTED status).
func TestTMFAbortsCommandBeforeTaskSetEntry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fn    TMF
		other bool // the TMF comes from nexus B
		tas   bool
		want  func(Result) bool
	}{
		{"ABORT TASK SET", TMFAbortTaskSet, false, false, func(r Result) bool { return r.Aborted }},
		{"CLEAR TASK SET", TMFClearTaskSet, false, false, func(r Result) bool { return r.Aborted }},
		{"CLEAR TASK SET other nexus TAS=1", TMFClearTaskSet, true, true,
			func(r Result) bool { return !r.Aborted && r.Status == 0x40 }},
		{"LOGICAL UNIT RESET", TMFLUNReset, false, false, func(r Result) bool { return r.Aborted }},
		{"LOGICAL UNIT RESET other nexus TAS=0", TMFLUNReset, true, false, func(r Result) bool { return r.Aborted }},
		{"I_T NEXUS RESET", TMFITNexusReset, false, false, func(r Result) bool { return r.Aborted }},
		{"ABORT TASK", TMFAbortTask, false, false, func(r Result) bool { return r.Aborted }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, LUConfig{})
			ctx := testCtx(t)
			f.lu.mu.Lock()
			f.lu.mode.control[5] &^= 0x40 // TAS (SPC-4 §7.5.8, table 452)
			if tc.tas {
				f.lu.mode.control[5] |= 0x40
			}
			f.lu.mu.Unlock()
			tmfSess := f.s
			if tc.other {
				tmfSess = f.tg.NewSession(nexusB)
				defer tmfSess.Close()
			}
			const tag = 5001
			inWindow, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			f.tg.hooks.beforeEnter = func(tk *task) {
				if tk.tag == tag && tk.sess == f.s {
					close(inWindow)
					<-release
				}
			}
			f.tg.hooks.afterAbort = func() { once.Do(func() { close(release) }) }
			t.Cleanup(func() { once.Do(func() { close(release) }) })

			data := bytes.Repeat([]byte{0x5A}, 512)
			w := f.goExec(ctx, f.s, &Command{Tag: tag, CDB: cdb10(0x2A, 0, 5, 1), DataOut: data})
			select {
			case <-inWindow:
			case <-ctx.Done():
				t.Fatal("command never reached the task set entry")
			}
			tmf := make(chan TMFResponse, 1)
			go func() { tmf <- tmfSess.TaskManagement(ctx, tc.fn, EncodeLUN(0), tag) }()
			r := waitResult(t, w)
			if !tc.want(r) {
				t.Fatalf("command result %+v", r)
			}
			select {
			case rsp := <-tmf:
				if rsp != rspComplete {
					t.Fatalf("TMF response %#02x", rsp)
				}
			case <-ctx.Done():
				t.Fatal("TMF did not complete")
			}
			f.tg.hooks.beforeEnter, f.tg.hooks.afterAbort = nil, nil
			// The medium is untouched (after the reset's unit attention).
			if r := f.run(f.s, 0, cdbTUR(), nil, 0); r.Status == sense.StatusCheckCondition {
				if si, _ := sense.Parse(r.Sense); si.Key != sense.KeyUnitAttention || si.ASC != 0x29 {
					t.Fatalf("TUR after the TMF: %+v", r)
				}
			}
			if got := f.in(cdb10(0x28, 0, 5, 1), 512); !bytes.Equal(got, make([]byte, 512)) {
				t.Fatal("aborted WRITE reached the medium")
			}
		})
	}
}
