package scsi

import (
	"context"
	"errors"
	"syscall"

	"github.com/gosrp/gosrp/backstore"
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
}

// Execute implements Session. The order of checks follows LIO's
// target_setup_cmd_from_cdb / target_cmd_parse_cdb: LUN lookup, overlapped
// tag, unit attention, opcode and CDB validation, task set admission,
// reservation check, then the command itself.
func (s *session) Execute(ctx context.Context, cmd *Command) Result {
	cdb := cmd.CDB
	num, okLUN := DecodeLUN(cmd.LUN)
	var lu *LogicalUnit
	if okLUN {
		lu = s.t.lookup(num)
	}
	if len(cdb) == 0 {
		return checkResult(badCDB(0, -1), false)
	}
	if lu == nil {
		return s.executeNoLU(cmd)
	}

	t := &task{sess: s, tag: cmd.Tag, attr: cmd.Attr, ts: &lu.ts}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{Aborted: true}
	}
	if _, dup := s.tags[cmd.Tag]; dup {
		s.mu.Unlock()
		return checkResult(fail(ReasonOverlappedCommands), lu.dsense())
	}
	s.tags[cmd.Tag] = t
	_, known := s.seen[lu]
	if !known {
		s.seen[lu] = struct{}{} // admit creates the nexus's UA entry
	}
	s.mu.Unlock()
	t.knownLU = known

	c := &t.cmdCtx
	c.ctx, c.s, c.lu, c.cmd, c.cdb = ctx, s, lu, cmd, cdb
	c.desc = lu.dsense()

	f, entered, run := s.admit(ctx, t)
	if entered {
		if run {
			f = c.ent.exec(c)
		}
		aborted, report := lu.ts.leave(t)
		s.untag(t)
		if aborted || ctx.Err() != nil {
			if report && ctx.Err() == nil {
				return Result{Status: StatusTaskAborted}
			}
			return Result{Aborted: true}
		}
	} else {
		s.untag(t)
		lu.ts.mu.Lock()
		t.finished = true
		aborted, report := t.aborted, t.reportAborted
		lu.ts.cond.Broadcast()
		lu.ts.mu.Unlock()
		if aborted || ctx.Err() != nil {
			if report && ctx.Err() == nil {
				return Result{Status: StatusTaskAborted}
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
		if st == StatusCheckCondition {
			res.Sense = buildSense(f, c.desc)
			res.DataInLen = 0
			s.applyQErr(lu, t)
		}
	}
	return res
}

// admit runs the checks before a command may execute and enters the task
// set. entered reports whether t joined the task set (then leave must be
// called); run whether the command may execute.
func (s *session) admit(ctx context.Context, t *task) (f failure, entered, run bool) {
	c, lu := &t.cmdCtx, t.cmdCtx.lu
	op := c.cdb[0]
	// Unit attention (SAM-5 §5.14): INQUIRY and REPORT LUNS neither report
	// nor clear it; REQUEST SENSE returns it as its parameter data and
	// clears it (execRequestSense) instead of failing.
	if op == opInquiry || op == opReportLUNs || op == opRequestSense {
		if !t.knownLU {
			lu.touch(s.key)
		}
	} else if r := lu.takeUAFast(s.key, t.knownLU); r != ReasonNone {
		return fail(r), false, false
	}
	ent, f := s.t.ops.lookup(c.cdb)
	if f.failed() {
		return f, false, false
	}
	c.ent = ent
	if f := ent.validate(c.cdb); f.failed() {
		return f, false, false
	}
	if t.attr == TaskACA {
		// NACA is not supported, so no ACA condition exists for an ACA task
		// to run in; LIO's transport_check_alloc_task_attr answers INVALID
		// FIELD IN CDB (no field pointer).
		return fail(ReasonInvalidCDBField), false, false
	}
	if !lu.ts.enter(ctx, t) {
		return ok, true, false
	}
	if f := lu.checkReservation(c); f.failed() {
		return f, true, false
	}
	return ok, true, true
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

// checkResult turns a failure into a Result.
func checkResult(f failure, desc bool) Result {
	r := Result{Status: f.reason.Status()}
	if r.Status == StatusCheckCondition {
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

// TaskManagement implements Session (SAM-5 §7). Responses follow LIO:
// ABORT TASK for a tag not outstanding → FUNCTION FAILED (LIO's
// TMR_TASK_DOES_NOT_EXIST as ib_srpt reports it); CLEAR ACA → NOT
// SUPPORTED (NACA is not supported).
func (s *session) TaskManagement(ctx context.Context, fn TMF, lun uint64, taskTag uint64) TMFResponse {
	num, okLUN := DecodeLUN(lun)
	var lu *LogicalUnit
	if okLUN {
		lu = s.t.lookup(num)
	}
	switch fn {
	case TMFAbortTask, TMFAbortTaskSet, TMFClearTaskSet, TMFLUNReset:
	default:
		return TMFNotSupported
	}
	if lu == nil {
		return TMFIncorrectLUN
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
			return TMFFailed
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
	for _, t := range ab {
		if !lu.ts.waitDone(ctx, t) {
			return TMFFailed
		}
	}
	if fn == TMFLUNReset {
		lu.reset()
	}
	return TMFComplete
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
