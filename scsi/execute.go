package scsi

import (
	"context"
	"errors"
	"syscall"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// cmdCtx is what an opcode handler sees of a command.
type cmdCtx struct {
	ctx  context.Context
	s    *session
	lu   *LogicalUnit
	cmd  *Command
	cdb  []byte
	ent  *opEntry
	res  Result
	desc bool // descriptor format sense (control mode page D_SENSE)
	ro   bool // the nexus's view maps the logical unit read-only
	// place is where a WRITE with Command.ViewOut waits for its data-out
	// (placeNone: it does not); lba and fua are its write's.
	place placeMode
	lba   uint64
	fua   bool
}

// placeMode is where the fabric places a WRITE's data-out (Command.ViewOut).
type placeMode uint8

const (
	placeNone   placeMode = iota
	placeMedium           // the backstore's memory, counted by beginPlace
	placeBuffer           // a buffer written to the backstore afterwards
)

// Execute implements Session. The order of checks follows LIO's
// target_setup_cmd_from_cdb / target_cmd_parse_cdb: LUN lookup through the
// nexus's view (and its read-only mapping), overlapped tag, unit attention,
// opcode and CDB validation, task set admission, reservation check, then
// the command itself.
func (s *session) Execute(ctx context.Context, cmd *Command) Result {
	cmd.ViewOut = false
	res, _ := s.start(ctx, cmd, false)
	return res
}

// start is Execute. With inline set (the fabric's goroutine, which must
// not block) a command that would wait in the task set is returned as a
// dormant task instead, for resume to finish on another goroutine.
func (s *session) start(ctx context.Context, cmd *Command, inline bool) (Result, *task) {
	res, t := s.enter(ctx, cmd)
	if t == nil {
		return res, nil
	}
	return s.proceed(t, inline)
}

// enter is the part of start that never waits: the LUN lookup, the
// checks that need no task, and the task's registration (its tag, and its
// place in the logical unit's task set, where task management finds it).
// It returns the task, or nil and the command's result. A fabric runs it
// before it hands the command to another goroutine, so that a TMF it
// receives after the command finds the command's task.
func (s *session) enter(ctx context.Context, cmd *Command) (Result, *task) {
	cdb := cmd.CDB
	lu, ro := s.lookup(cmd.LUN)
	if len(cdb) == 0 {
		return checkResult(badCDB(0, -1), false), nil
	}
	if lu == nil {
		return s.executeNoLU(cmd), nil
	}
	if ro && WritesMedium(cdb) {
		return writeProtected(cmd, lu), nil
	}
	o := lu.cfg.Observer
	if o == nil {
		// (res below escapes through the Observer: not without one.)
		return s.register(ctx, cmd, lu, ro)
	}
	o.Started()
	t0 := s.t.elapsed()
	res, t := s.register(ctx, cmd, lu, ro)
	if t == nil {
		o.Finished(&res, s.t.elapsed()-t0)
		return res, nil
	}
	t.started = t0
	return Result{}, t
}

// proceed is the rest of start for a task enter registered: admission to
// the task set, then the command (see start for inline).
func (s *session) proceed(t *task, inline bool) (Result, *task) {
	f, entered, run, dormant := s.admit(t.cmdCtx.ctx, t, !inline)
	if dormant {
		return Result{}, t
	}
	o := t.cmdCtx.lu.cfg.Observer
	if o == nil {
		return s.finish(t, f, entered, run), nil
	}
	res := s.finish(t, f, entered, run)
	if !res.FetchViews {
		// A WRITE whose data-out is to be placed is finished by placed.
		o.Finished(&res, s.t.elapsed()-t.started)
	}
	return res, nil
}

// resume finishes a task start left dormant: it waits until the task is
// enabled, then runs it as Execute would have.
func (s *session) resume(t *task) Result {
	c := &t.cmdCtx
	f, run := enabled(c, t.ts.await(c.ctx, t))
	res := s.finish(t, f, true, run)
	if o := c.lu.cfg.Observer; o != nil && !res.FetchViews {
		o.Finished(&res, s.t.elapsed()-t.started)
	}
	return res
}

// placed ends the wait of a task for its data-out (Command.DataOutPlaced).
func (s *session) placed(t *task, ok bool) (Result, bool) {
	c := &t.cmdCtx
	var f failure
	if !ok {
		f = ioFailure(errFetchFailed, true, c.lba)
	}
	switch c.place {
	case placeMedium:
		c.lu.endPlace()
	case placeBuffer:
		if ok {
			buf := c.cmd.DataOutViews[0]
			go func() {
				f := c.lu.writeBlocks(buf, c.lba, c.fua)
				t.cmd.completer.Complete(t.cmd, s.placedResult(t, f))
			}()
			return Result{}, false
		}
	}
	return s.placedResult(t, f), true
}

// errFetchFailed is the backstore-side error of a data-out transfer that
// did not complete: the range may hold part of the new data.
var errFetchFailed = errors.New("scsi: data-out transfer failed")

// placedResult finishes a task whose data-out was placed (f: how its
// write ended) and returns the command's result.
func (s *session) placedResult(t *task, f failure) Result {
	c := &t.cmdCtx
	c.place = placeNone
	clear(c.cmd.DataOutViews)
	c.cmd.DataOutViews = c.cmd.DataOutViews[:0]
	c.cmd.DataOutBuffered = false
	res := s.endTask(t, f, true)
	if o := c.lu.cfg.Observer; o != nil {
		o.Finished(&res, s.t.elapsed()-t.started)
	}
	return res
}

// writeProtected refuses a medium write through a read-only mapping
// before the CDB is looked at further, as LIO's transport_lookup_cmd_lun
// does: no residual is reported.
func writeProtected(cmd *Command, lu *LogicalUnit) Result {
	r := checkResult(fail(ReasonWriteProtected), lu.dsense())
	r.DataOutWanted, r.DataInWanted = len(cmd.DataOut), len(cmd.DataIn)
	return r
}

// register gives a command addressed to logical unit lu its task: its tag
// in the session and its place in lu's task set, both under s.mu. It
// returns nil and the result when the command takes no task (session
// closed, tag in use, abandoned).
func (s *session) register(ctx context.Context, cmd *Command, lu *LogicalUnit, ro bool) (Result, *task) {
	t := &task{sess: s, tag: cmd.Tag, attr: cmd.Attr, ts: &lu.ts}
	t.cmd = cmd // before the tag is visible: Abandon matches it
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{Aborted: true}, nil
	}
	if _, dup := s.tags[cmd.Tag]; dup {
		s.mu.Unlock()
		return checkResult(fail(ReasonOverlappedCommands), lu.dsense()), nil
	}
	if ctx.Err() != nil {
		// Abandoned (Abandon) or closed before it began: it takes no tag.
		s.mu.Unlock()
		return Result{Aborted: true}, nil
	}
	s.tags[cmd.Tag] = t
	lu.ts.register(t) // under s.mu: no TMF sees the tag but misses the task
	_, known := s.seen[lu]
	if !known {
		s.seen[lu] = struct{}{} // admit creates the nexus's UA entry
	}
	s.mu.Unlock()
	t.knownLU = known

	c := &t.cmdCtx
	c.ctx, c.s, c.lu, c.cdb, c.ro = ctx, s, lu, cmd.CDB, ro // c.cmd is set before the tag is visible
	c.desc = lu.dsense()
	return Result{}, t
}

// finish runs an admitted task (run), leaves the task set (entered) or
// the pending list, and builds the command's result. A result that
// carries no data-in (aborted, or any status but GOOD) keeps no views.
func (s *session) finish(t *task, f failure, entered, run bool) Result {
	res := s.finishTask(t, f, entered, run)
	if res.Aborted || res.Status != sense.StatusGood {
		t.cmd.ReleaseViews()
	}
	return res
}

// finishTask is finish before the views are looked at. A WRITE that now
// waits for its data-out (cmdCtx.place) stays in the task set: its
// result has FetchViews set, and placed finishes it.
func (s *session) finishTask(t *task, f failure, entered, run bool) Result {
	if entered && run {
		c := &t.cmdCtx
		f = c.ent.exec(c)
		if c.place != placeNone {
			t.cmd.placing = t
			return Result{FetchViews: true, DataOutWanted: c.res.DataOutWanted, DataInWanted: c.res.DataInWanted}
		}
	}
	return s.endTask(t, f, entered)
}

// endTask takes a task that ran (or never could) out of the task set (when
// entered) or the pending list and builds its result from f.
func (s *session) endTask(t *task, f failure, entered bool) Result {
	c, lu, ctx := &t.cmdCtx, t.cmdCtx.lu, t.cmdCtx.ctx
	if entered {
		aborted, report := lu.ts.leave(t)
		s.untag(t)
		if aborted || ctx.Err() != nil {
			if report && ctx.Err() == nil {
				return Result{Status: sense.StatusTaskAborted}
			}
			return Result{Aborted: true}
		}
	} else {
		s.untag(t)
		aborted, report := lu.ts.unregister(t)
		if aborted || ctx.Err() != nil {
			if report && ctx.Err() == nil {
				return Result{Status: sense.StatusTaskAborted}
			}
			return Result{Aborted: true}
		}
	}
	res := c.res
	if f.failed() || f.status != 0 {
		st := f.reason.Status()
		if f.status != 0 && !f.failed() {
			st = f.status
		}
		res.Status = st
		if st == sense.StatusCheckCondition {
			res.Sense = buildSense(f, c.desc)
			res.DataInLen = 0
			s.applyQErr(lu, t)
		}
	}
	return res
}

// Check implements Session: the checks of admit that need no task, in
// its order, before any data moves.
func (s *session) Check(cmd *Command) (Result, bool) {
	cdb := cmd.CDB
	viewOut := cmd.ViewOut
	cmd.ViewOut = false
	lu, ro := s.lookup(cmd.LUN)
	desc := lu != nil && lu.dsense()
	refuse := func(f failure) (Result, bool) {
		r := checkResult(f, desc)
		r.DataOutWanted, r.DataInWanted = -1, -1
		if lu != nil && lu.cfg.Observer != nil {
			// A command of the logical unit, answered here.
			lu.cfg.Observer.Started()
			lu.cfg.Observer.Finished(&r, 0)
		}
		return r, false
	}
	if len(cdb) == 0 {
		return refuse(badCDB(0, -1))
	}
	op := cdb[0]
	if lu == nil {
		if op == opInquiry || op == opReportLUNs || op == opRequestSense {
			return Result{DataOutWanted: -1, DataInWanted: -1}, true
		}
		return refuse(fail(ReasonLUNNotSupported))
	}
	if ro && WritesMedium(cdb) {
		return refuse(fail(ReasonWriteProtected))
	}
	if op == opInquiry || op == opReportLUNs || op == opRequestSense {
		return Result{DataOutWanted: -1, DataInWanted: -1}, true
	}
	s.mu.Lock()
	_, known := s.seen[lu]
	if !known {
		s.seen[lu] = struct{}{} // takeUA creates the nexus's UA entry
	}
	s.mu.Unlock()
	if r := lu.takeUAFast(s.key, known); r != ReasonNone {
		return refuse(fail(r))
	}
	ent, f := s.t.ops.lookup(cdb)
	if f.failed() {
		return refuse(f)
	}
	if f := ent.validate(cdb); f.failed() {
		return refuse(f)
	}
	if f := s.aluaCheck(cdb); f.failed() {
		return refuse(f)
	}
	if cmd.Attr == TaskACA {
		return refuse(fail(ReasonInvalidCDBField))
	}
	c := cmdCtx{s: s, lu: lu, cmd: cmd, cdb: cdb, ent: ent, desc: desc}
	if f := lu.checkReservation(&c); f.failed() {
		return refuse(f)
	}
	if out, _ := lu.transferLengths(cdb); out > 0 || isReadWrite(op) {
		// The transfer length against MAXIMUM TRANSFER LENGTH and the
		// capacity, as LIO's sbc_parse_cdb does before write pending.
		if _, _, _, f := c.xferRange(); f.failed() {
			return refuse(f)
		}
	}
	out, in := lu.transferLengths(cdb)
	if out >= 0 && out != cmd.DataOutLen {
		r, _ := refuse(fail(ReasonInvalidCommandIU))
		r.DataOutWanted = out
		return r, false
	}
	cmd.ViewOut = viewOut && out > 0 && lu.wviewer != nil && isWrite(op)
	return Result{DataOutWanted: out, DataInWanted: in}, true
}

// Submit implements Session.
func (s *session) Submit(ctx context.Context, cmd *Command, c Completer) (Result, bool) {
	cmd.completer = c
	if !cmd.Checked {
		cmd.ViewOut = false
	}
	if s.runsInline(cmd) {
		res, t := s.start(ctx, cmd, true)
		if t == nil {
			return res, true
		}
		// An ORDERED or HEAD OF QUEUE task entered after runsInline
		// looked: waiting for it here could wait for this goroutine
		// itself (an ORDERED task waits for the data-in views the
		// fabric releases on it).
		go func() { c.Complete(cmd, s.resume(t)) }()
		return Result{}, false
	}
	// The task is registered here, before the fabric reads its next IU:
	// a task management function after this command finds it.
	res, t := s.enter(ctx, cmd)
	if t == nil {
		return res, true
	}
	go func() {
		res, _ := s.proceed(t, false)
		c.Complete(cmd, res)
	}()
	return Result{}, false
}

// runsInline reports whether cmd may run on the fabric's goroutine: a
// SIMPLE READ or WRITE to a logical unit whose backstore never blocks,
// while no ORDERED or HEAD OF QUEUE task is in its task set (one could
// still enter before cmd does; cmd then waits for it, which takes no
// longer than that task's own memory copy).
func (s *session) runsInline(cmd *Command) bool {
	if cmd.Attr != TaskSimple || len(cmd.CDB) == 0 || !isReadWrite(cmd.CDB[0]) {
		return false
	}
	lu, _ := s.lookup(cmd.LUN)
	return lu != nil && lu.nonBlocking && lu.ts.ordered.Load() == 0
}

// admit runs the checks before a command may execute and enters the task
// set. entered reports whether t joined the task set (then leave must be
// called); run whether the command may execute. With mayWait false a task
// that would wait in the task set is left dormant there (dormant true):
// nothing has been done for it but checks without effect (a unit
// attention fails the command before it gets here).
func (s *session) admit(ctx context.Context, t *task, mayWait bool) (f failure, entered, run, dormant bool) {
	c, lu := &t.cmdCtx, t.cmdCtx.lu
	op := c.cdb[0]
	// Unit attention (SAM-5 §5.14): INQUIRY and REPORT LUNS neither report
	// nor clear it; REQUEST SENSE returns it as its parameter data and
	// clears it (execRequestSense) instead of failing.
	if op == opInquiry || op == opReportLUNs || op == opRequestSense {
		if !t.knownLU {
			lu.touch(s.key)
		}
	} else if c.cmd.Checked {
		// Check took the unit attention before the data moved.
	} else if r := lu.takeUAFast(s.key, t.knownLU); r != ReasonNone {
		return fail(r), false, false, false
	}
	ent, f := s.t.ops.lookup(c.cdb)
	if f.failed() {
		return f, false, false, false
	}
	c.ent = ent
	if f := ent.validate(c.cdb); f.failed() {
		return f, false, false, false
	}
	if f := s.aluaCheck(c.cdb); f.failed() {
		return f, false, false, false
	}
	if t.attr == TaskACA {
		// NACA is not supported, so no ACA condition exists for an ACA task
		// to run in; LIO's transport_check_alloc_task_attr answers INVALID
		// FIELD IN CDB (no field pointer).
		return fail(ReasonInvalidCDBField), false, false, false
	}
	if h := s.t.hooks.beforeEnter; h != nil {
		h(t)
	}
	en, dormant := lu.ts.enter(ctx, t, mayWait)
	if dormant {
		return ok, true, false, true
	}
	f, run = enabled(c, en)
	return f, true, run, false
}

// enabled is the last check of a task that left the dormant state (en:
// it was not aborted), the reservation check at execution: it returns the
// failure and whether the command may run.
func enabled(c *cmdCtx, en bool) (failure, bool) {
	if !en {
		return ok, false
	}
	if f := c.lu.checkReservation(c); f.failed() {
		return f, false
	}
	return ok, true
}

func (s *session) untag(t *task) {
	s.mu.Lock()
	if s.tags[t.tag] == t {
		delete(s.tags, t.tag)
	}
	s.mu.Unlock()
}

// applyQErr implements the control mode page QERR field after a CHECK
// CONDITION (SPC-4 §7.5.8): 01b aborts every other task in the task set,
// 11b the tasks of the same I_T nexus.
func (s *session) applyQErr(lu *LogicalUnit, t *task) {
	lu.mu.Lock()
	qerr, tas := lu.mode.qerr(), lu.mode.tas()
	lu.mu.Unlock()
	switch qerr {
	case 1:
		ab := lu.ts.abortMatching(func(o *task) bool { return o != t },
			func(o *task) bool { return tas && o.sess.key != s.key })
		if !tas {
			lu.uaCommandsCleared(ab, s.key)
		}
	case 3:
		lu.ts.abortMatching(func(o *task) bool { return o != t && o.sess.key == s.key },
			func(*task) bool { return false })
	}
}

// uaCommandsCleared establishes COMMANDS CLEARED BY ANOTHER INITIATOR for
// the nexuses (other than except) that lost tasks (SAM-5 §5.6, TAS=0).
func (lu *LogicalUnit) uaCommandsCleared(ab []*task, except string) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for _, o := range ab {
		if o.sess.key != except {
			lu.establishUALocked(o.sess.key, ReasonUACommandsCleared)
		}
	}
}

// Abandon implements Session.
func (s *session) Abandon(cmd *Command) {
	s.mu.Lock()
	t := s.tags[cmd.Tag]
	if t == nil || t.cmd != cmd {
		s.mu.Unlock()
		return
	}
	delete(s.tags, cmd.Tag)
	s.mu.Unlock()
	t.ts.abort(t, false)
}

// Refuse implements Session.
func (s *session) Refuse(cmd *Command, r Reason) Result {
	lu, _ := s.lookup(cmd.LUN)
	return ResultFor(r, lu != nil && lu.dsense())
}

// ResultFor is the result of a command that fails for reason r: its status
// and, for CHECK CONDITION, sense data from the reason table in descriptor
// format (SPC-4 §4.5.2) when descriptorSense is set, else fixed format
// (§4.5.3).
func ResultFor(r Reason, descriptorSense bool) Result {
	return checkResult(fail(r), descriptorSense)
}

// checkResult turns a failure into a Result.
func checkResult(f failure, desc bool) Result {
	r := Result{Status: f.reason.Status()}
	if r.Status == sense.StatusCheckCondition {
		r.Sense = buildSense(f, desc)
	}
	return r
}

// executeNoLU serves a LUN with no logical unit (SPC-4 §4.6.5 / LIO
// transport_lookup_cmd_lun): INQUIRY reports peripheral qualifier 011b,
// REPORT LUNS works, REQUEST SENSE returns LOGICAL UNIT NOT SUPPORTED as
// sense data with GOOD status; every other command fails with LOGICAL UNIT
// NOT SUPPORTED.
func (s *session) executeNoLU(cmd *Command) Result {
	c := &cmdCtx{ctx: context.Background(), s: s, cmd: cmd, cdb: cmd.CDB}
	var f failure
	switch cmd.CDB[0] {
	case opInquiry, opReportLUNs, opRequestSense:
		ent, lf := s.t.ops.lookup(c.cdb)
		if lf.failed() {
			return checkResult(lf, false)
		}
		if vf := ent.validate(c.cdb); vf.failed() {
			return checkResult(vf, false)
		}
		c.ent = ent
		f = ent.exec(c)
	default:
		f = fail(ReasonLUNNotSupported)
	}
	if f.failed() {
		return checkResult(f, false)
	}
	return c.res
}

// TaskManagement implements Session (SAM-5 §7). Responses follow LIO where
// it implements the function: ABORT TASK for a tag not outstanding →
// FUNCTION FAILED (LIO's TMR_TASK_DOES_NOT_EXIST as ib_srpt reports it);
// CLEAR ACA → NOT SUPPORTED (NACA=1 is not supported, so the function is
// rejected, as LIO's core_tmr does).
func (s *session) TaskManagement(ctx context.Context, fn TMF, lun uint64, taskTag uint64) TMFResponse {
	r, _ := s.TaskManagementInfo(ctx, fn, lun, taskTag)
	return r
}

// TaskManagementInfo implements TMFInfoSession: TaskManagement plus the
// ADDITIONAL RESPONSE INFORMATION of QUERY ASYNCHRONOUS EVENT.
//
//   - ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET: the
//     named tasks are aborted (silently for the requesting nexus; TASK
//     ABORTED or COMMANDS CLEARED BY ANOTHER INITIATOR for others, by TAS)
//     and waited for; FUNCTION COMPLETE.
//   - I_T NEXUS RESET: as I_T nexus loss (SAM-5 §6.3.4) for the requesting
//     nexus on every logical unit, whatever lun says: its tasks are aborted
//     silently and waited for, its SPC-2 reservation is released, I_T NEXUS
//     LOSS OCCURRED (06/29/07) is established for it on the logical units it
//     has reached; persistent reservations and registrations stay (SPC-4
//     §5.13). FUNCTION COMPLETE.
//   - QUERY TASK: FUNCTION SUCCEEDED if the task tagged taskTag of this
//     session is in lun's task set and not aborted, else FUNCTION COMPLETE.
//   - QUERY TASK SET: FUNCTION SUCCEEDED if any task of this I_T nexus is in
//     lun's task set and not aborted, else FUNCTION COMPLETE.
//   - QUERY ASYNCHRONOUS EVENT: FUNCTION SUCCEEDED with the oldest pending
//     unit attention's sense key, ASC, ASCQ and the UADE DEPTH (01b one,
//     10b more) if one is pending for the I_T_L nexus, else FUNCTION
//     COMPLETE and zero; nothing is cleared. A nexus that never reached the
//     logical unit has POWER ON, RESET OR BUS DEVICE RESET OCCURRED pending.
//     The core keeps no deferred errors.
//
// An unknown LUN gives INCORRECT LOGICAL UNIT NUMBER; a ctx that ends while
// aborted tasks are still running gives FUNCTION FAILED.
func (s *session) TaskManagementInfo(ctx context.Context, fn TMF, lun uint64, taskTag uint64) (TMFResponse, [3]byte) {
	var info [3]byte
	switch fn {
	case TMFAbortTask, TMFAbortTaskSet, TMFClearTaskSet, TMFLUNReset,
		TMFQueryTask, TMFQueryTaskSet, TMFQueryAsyncEvent:
	case TMFITNexusReset:
		return s.itNexusReset(ctx), info
	default:
		return TMFNotSupported, info
	}
	lu, _ := s.lookup(lun)
	if lu == nil {
		return TMFIncorrectLUN, info
	}
	switch fn {
	case TMFQueryTask:
		s.mu.Lock()
		t := s.tags[taskTag]
		s.mu.Unlock()
		if t != nil && t.ts == &lu.ts && lu.ts.live(t) {
			return TMFSucceeded, info
		}
		return TMFComplete, info
	case TMFQueryTaskSet:
		if lu.ts.anyLive(func(o *task) bool { return o.sess.key == s.key }) {
			return TMFSucceeded, info
		}
		return TMFComplete, info
	case TMFQueryAsyncEvent:
		return lu.queryAsyncEvent(s.key)
	}
	lu.mu.Lock()
	tas := lu.mode.tas()
	perNexus := lu.mode.tst() == 1
	lu.mu.Unlock()
	var ab []*task
	switch fn {
	case TMFAbortTask:
		s.mu.Lock()
		t := s.tags[taskTag]
		s.mu.Unlock()
		if t == nil || t.ts != &lu.ts {
			return TMFFailed, info
		}
		lu.ts.abort(t, false)
		ab = []*task{t}
	case TMFAbortTaskSet:
		ab = lu.ts.abortMatching(func(o *task) bool { return o.sess.key == s.key },
			func(*task) bool { return false })
	case TMFClearTaskSet, TMFLUNReset:
		ab = lu.ts.abortMatching(func(o *task) bool { return !perNexus || fn == TMFLUNReset || o.sess.key == s.key },
			func(o *task) bool { return tas && o.sess.key != s.key })
		if !tas {
			lu.uaCommandsCleared(ab, s.key)
		}
	}
	if h := s.t.hooks.afterAbort; h != nil {
		h()
	}
	for _, t := range ab {
		if !lu.ts.waitDone(ctx, t) {
			return TMFFailed, info
		}
	}
	if fn == TMFLUNReset {
		lu.reset()
	}
	return TMFComplete, info
}

// itNexusReset performs I_T NEXUS RESET for the session's nexus (see
// TaskManagementInfo).
func (s *session) itNexusReset(ctx context.Context) TMFResponse {
	luns := *s.t.luns.Load()
	type aborted struct {
		lu    *LogicalUnit
		tasks []*task
	}
	var all []aborted
	for _, lu := range luns {
		ab := lu.ts.abortMatching(func(o *task) bool { return o.sess.key == s.key },
			func(*task) bool { return false })
		all = append(all, aborted{lu, ab})
	}
	if h := s.t.hooks.afterAbort; h != nil {
		h()
	}
	for _, a := range all {
		for _, t := range a.tasks {
			if !a.lu.ts.waitDone(ctx, t) {
				return TMFFailed
			}
		}
	}
	for _, lu := range luns {
		lu.mu.Lock()
		if _, ok := lu.uas[s.key]; ok {
			lu.establishUALocked(s.key, ReasonUAITNexusLoss)
		}
		lu.mu.Unlock()
		lu.pr.NexusLost(s.nexus.forPR())
	}
	return TMFComplete
}

// queryAsyncEvent answers QUERY ASYNCHRONOUS EVENT for the nexus key (see
// TaskManagementInfo).
func (lu *LogicalUnit) queryAsyncEvent(key string) (TMFResponse, [3]byte) {
	var info [3]byte
	lu.mu.Lock()
	q, ok := lu.uas[key]
	if !ok {
		q = []Reason{ReasonUAPowerOn} // what uaForLocked would create
	}
	lu.mu.Unlock()
	if len(q) == 0 {
		return TMFComplete, info
	}
	depth := byte(1) // UADE DEPTH 01b: one condition
	if len(q) > 1 {
		depth = 2 // 10b: more than one
	}
	key0, asc, ascq := q[0].SenseCodes()
	info[0] = depth<<4 | key0&0x0F
	info[1], info[2] = asc, ascq
	return TMFSucceeded, info
}

// reset performs the logical unit reset side effects (SAM-5 §6.3.3): mode
// parameters return to their saved values (the defaults without a store),
// RESERVE/RELEASE reservations are
// released, and every nexus gets BUS DEVICE RESET FUNCTION OCCURRED.
func (lu *LogicalUnit) reset() {
	lu.mu.Lock()
	lu.mode = lu.saved
	lu.applyModeLocked()
	for k := range lu.uas {
		lu.establishUALocked(k, ReasonUALUNReset)
	}
	lu.mu.Unlock()
	lu.resetReservations()
}

// dsense reports whether the control mode page asks for descriptor sense.
func (lu *LogicalUnit) dsense() bool { return lu.dsenseBit.Load() }

// ioFailure maps a backstore error to sense data: ENOSPC → SPACE
// ALLOCATION FAILED WRITE PROTECT, EROFS/EPERM → WRITE PROTECTED, range
// errors → LBA OUT OF RANGE, anything else → MEDIUM ERROR (read: UNRECOVERED
// READ ERROR, write: WRITE ERROR), as LIO's fd_execute_rw does.
func ioFailure(err error, write bool, lba uint64) failure {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fail(ReasonSpaceAllocFailed)
	case errors.Is(err, syscall.EROFS):
		return fail(ReasonWriteProtected)
	case errors.Is(err, backstore.ErrOutOfRange):
		return fail(ReasonLBAOutOfRange)
	}
	f := fail(ReasonReadError)
	if write {
		f = fail(ReasonWriteError)
	}
	f.infoValid, f.info = true, lba
	return f
}
