package scsi

import (
	"strings"

	"github.com/gosrp/gosrp/scsi/pr"
)

// Reservations: the opcode table rows of PERSISTENT RESERVE IN/OUT and
// RESERVE/RELEASE(6)/(10), the conflict check of every command, and the
// application of the side effects package pr returns (unit attentions,
// PREEMPT AND ABORT). The decisions themselves are pr's.

// reservationRows returns the opcode table rows of the reservation
// commands.
func reservationRows() []opEntry {
	var rows []opEntry
	// SPC-4 §6.15 PERSISTENT RESERVE IN: SERVICE ACTION, ALLOCATION LENGTH (7..8).
	for sa, name := range []string{"READ KEYS", "READ RESERVATION", "REPORT CAPABILITIES", "READ FULL STATUS"} {
		rows = append(rows, opEntry{op: opPersistentReserveIn, sa: uint16(sa), hasSA: true,
			name:  "PERSISTENT RESERVE IN " + name,
			usage: []byte{0x5E, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0}, exec: execPRIn})
	}
	// SPC-4 §6.16 PERSISTENT RESERVE OUT: SERVICE ACTION, SCOPE+TYPE (2),
	// PARAMETER LIST LENGTH (5..8).
	for sa, name := range []string{"REGISTER", "RESERVE", "RELEASE", "CLEAR", "PREEMPT",
		"PREEMPT AND ABORT", "REGISTER AND IGNORE EXISTING KEY", "REGISTER AND MOVE"} {
		rows = append(rows, opEntry{op: opPersistentReserveOut, sa: uint16(sa), hasSA: true,
			name:  "PERSISTENT RESERVE OUT " + name,
			usage: []byte{0x5F, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0}, exec: execPROut})
	}
	// SPC-2 §7.21–7.24: only whole logical unit, first-party reservations
	// (third party, extent and LONGID bits are rejected by the mask).
	rows = append(rows,
		opEntry{op: opReserve6, name: "RESERVE(6)", usage: []byte{0x16, 0, 0, 0, 0, 0}, exec: execReserveRelease},
		opEntry{op: opRelease6, name: "RELEASE(6)", usage: []byte{0x17, 0, 0, 0, 0, 0}, exec: execReserveRelease},
		opEntry{op: opReserve10, name: "RESERVE(10)", usage: []byte{0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0}, exec: execReserveRelease},
		opEntry{op: opRelease10, name: "RELEASE(10)", usage: []byte{0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0}, exec: execReserveRelease},
	)
	return rows
}

// prFailure maps a pr.Outcome to the core's failure.
func prFailure(o pr.Outcome) failure {
	bit := -1
	if o.BitValid {
		bit = int(o.Bit)
	}
	switch o.Reason {
	case pr.OK:
		return ok
	case pr.ReservationConflict:
		return fail(ReasonReservationConflict)
	case pr.InvalidFieldInCDB:
		return badCDB(int(o.Byte), bit)
	case pr.InvalidFieldInParamList:
		return badParam(int(o.Byte), bit)
	case pr.ParamListLengthError:
		return fail(ReasonParamListLength)
	case pr.InvalidReleaseOfPersistentReservation:
		return fail(ReasonInvalidRelease)
	case pr.InsufficientRegistrationResources:
		return fail(ReasonInsufficientRegistrationResources)
	}
	return fail(ReasonInternalFailure)
}

// checkReservation returns RESERVATION CONFLICT when the command may not
// run for its I_T nexus (SPC-4 §5.13.1 table 45, SBC-3 §4.17 table 13,
// SPC-2 §5.5.1), as decided by pr.State.Check.
func (lu *LogicalUnit) checkReservation(c *cmdCtx) failure {
	return prFailure(lu.pr.Check(c.s.nexus.forPR(), pr.Classify(c.cdb)))
}

// resetReservations releases the SPC-2 reservation on logical unit reset
// (SPC-2 §5.5.1); persistent reservations survive.
func (lu *LogicalUnit) resetReservations() { lu.pr.LUNReset() }

// execPRIn: PERSISTENT RESERVE IN, SPC-4 §6.15.
func execPRIn(c *cmdCtx) failure {
	n, o := c.lu.pr.In(c.s.nexus.forPR(), c.cdb, c.cmd.DataIn)
	c.res.DataInWanted = int(be16(c.cdb[7:]))
	if !o.OK() {
		return prFailure(o)
	}
	c.res.DataInLen = n
	return ok
}

// execPROut: PERSISTENT RESERVE OUT, SPC-4 §6.16, then its effects: unit
// attentions for the nexuses pr names, and for PREEMPT AND ABORT the
// preempted nexuses' tasks aborted as by ABORT TASK SET (reported TASK
// ABORTED when TAS=1) and waited for.
func execPROut(c *cmdCtx) failure {
	lu := c.lu
	pll := int(be32(c.cdb[5:]))
	c.res.DataOutWanted = pll
	c.res.DataOutUsed = min(pll, len(c.cmd.DataOut))
	eff, o := lu.pr.Out(c.s.nexus.forPR(), c.cdb, c.cmd.DataOut)
	if !o.OK() {
		return prFailure(o)
	}
	if len(eff.UnitAttentions) > 0 {
		lu.mu.Lock()
		for _, ua := range eff.UnitAttentions {
			r := ReasonUAReservationsPreempted
			switch uint16(ua.ASC)<<8 | uint16(ua.ASCQ) {
			case pr.ReservationsReleased:
				r = ReasonUAReservationsReleased
			case pr.RegistrationsPreempted:
				r = ReasonUARegistrationsPreempted
			}
			for k := range lu.uas {
				if k != c.s.key && ua.To.Contains(nexusOfKey(k)) {
					lu.establishUALocked(k, r)
				}
			}
		}
		lu.mu.Unlock()
	}
	if len(eff.Abort) > 0 {
		lu.mu.Lock()
		tas := lu.mode.tas()
		lu.mu.Unlock()
		in := func(t *task) bool {
			if t.sess.key == c.s.key {
				return false
			}
			n := t.sess.nexus.forPR()
			for _, set := range eff.Abort {
				if set.Contains(n) {
					return true
				}
			}
			return false
		}
		ab := lu.ts.abortMatching(in, func(*task) bool { return tas })
		if !tas {
			lu.uaCommandsCleared(ab, c.s.key)
		}
		for _, t := range ab {
			lu.ts.waitDone(c.ctx, t)
		}
	}
	return ok
}

// execReserveRelease: RESERVE(6)/(10), RELEASE(6)/(10), SPC-2 §7.21–7.24.
func execReserveRelease(c *cmdCtx) failure {
	n := c.s.nexus.forPR()
	switch c.cdb[0] {
	case opReserve6, opReserve10:
		return prFailure(c.lu.pr.Reserve(n, c.cdb))
	default:
		return prFailure(c.lu.pr.Release(n, c.cdb))
	}
}

// nexusOfKey recovers the port identifiers from a nexus key.
func nexusOfKey(k string) pr.Nexus {
	i, t, _ := strings.Cut(k, "\x00")
	return pr.Nexus{InitiatorPortID: i, TargetPortID: t}
}
