package scsi

import (
	"context"

	"github.com/gosrp/gosrp/scsi/pr"
)

// This file is the meeting point of the SCSI target core and a fabric (the SRP
// target). It plays the part of LIO's target_core_fabric_ops, kept small: the
// fabric moves data-out in before Execute and data-in out after it, and sends
// the status; the core never sees the transport.

// TaskAttr is a command's task attribute (SAM-5 §8.6; SRP_CMD task_attr).
type TaskAttr uint8

const (
	TaskSimple      TaskAttr = 0 // SIMPLE
	TaskHeadOfQueue TaskAttr = 1 // HEAD OF QUEUE
	TaskOrdered     TaskAttr = 2 // ORDERED
	TaskACA         TaskAttr = 4 // ACA
)

// Nexus identifies an I_T nexus (SAM-5 §4.7): one initiator port talking to
// one target port. The core keeps unit attentions, reservations and
// registrations per nexus.
type Nexus struct {
	// InitiatorPortID is the initiator's transport ID as text (SRP: the
	// 16-byte initiator port identifier as 32 lowercase hex digits).
	InitiatorPortID string
	// TargetPortID is the target port's name (SRP: 32 lowercase hex digits).
	TargetPortID string
	// RelativeTargetPort is the target port's relative port identifier
	// (SPC-4 §7.8.6.3), 1-based.
	RelativeTargetPort uint16
	// TargetPortName, when set, is the target port's SCSI name (SPC-4
	// §7.8.6.11): VPD page 83h then carries the SCSI name string designators
	// "<name>,t,0x<relative port, 4 hex digits>" (association target port)
	// and "<name>" (association target device), as LIO's
	// spc_emulate_evpd_83 reports its target port group name and tag. An SRP
	// target on an HCA port uses ib_srpt's name for that port.
	TargetPortName string
	// TransportID is the SPC-4 §7.6.4 TransportID of the initiator port
	// (SRP: protocol identifier 4, 24 bytes), for PERSISTENT RESERVE IN READ
	// FULL STATUS and REGISTER AND MOVE.
	TransportID []byte
}

// Command is one SCSI command as the fabric received it.
type Command struct {
	// Tag is the fabric's task tag (SRP_CMD tag), unique per nexus while the
	// command is outstanding; ABORT TASK names it.
	Tag uint64
	// LUN is the 8-byte SAM LUN field as a big-endian integer.
	LUN uint64
	// CDB is the command descriptor block, 6 to 260 bytes.
	CDB  []byte
	Attr TaskAttr
	// DataOut holds the data-out buffer the initiator described, already
	// fetched by the fabric (len = bytes the initiator offered).
	DataOut []byte
	// DataIn is the buffer for data-in (len = bytes the initiator can take).
	// The core writes at most len(DataIn) bytes into it.
	DataIn []byte
	// DataOutLen is the data-out length the initiator described, in bytes
	// (LIO's data_length of a write), for Check: DataOut is not there yet.
	DataOutLen int
	// Checked is set by the fabric when Check accepted the command: its
	// unit attention check is not repeated.
	Checked bool
	// ViewIn, set by the fabric, lets a SIMPLE READ(6/10/12/16) of a
	// logical unit whose backstore is a backstore.Viewer give its data-in
	// as DataInViews, slices of the backstore's memory, instead of copying
	// it into DataIn. The fabric then sends from those slices and calls
	// ReleaseViews once it no longer reads them (the core has released
	// them already when the result is not GOOD); until then an ORDERED
	// task of the logical unit waits (SAM-5 §8.6.3: it starts after the
	// older tasks, their data transfers included, have ended), while
	// SIMPLE tasks, overlapping or not, may change the data being sent
	// (their order is unspecified anyway).
	ViewIn bool
	// DataInViews is where the core puts those slices (Result.DataInLen
	// bytes in all, in order); the fabric may give it capacity to reuse.
	// Empty when the data-in is in DataIn.
	DataInViews [][]byte
	// ViewOut, set by the fabric before Check, offers to place a WRITE's
	// data-out straight into the backstore's memory as it arrives, for a
	// command given to Submit with no DataOut. Check clears it unless the
	// command is a WRITE(6/10/12/16) of a logical unit whose backstore is
	// a backstore.WriteViewer that never blocks and has no cache to
	// flush: the fabric then fetches no data before Submit. Submit runs
	// such a command until its write would begin (the task enabled,
	// write protection and the range checked) and returns a result with
	// FetchViews set and the slices to fill in DataOutViews; the fabric
	// places the data-out there and calls DataOutPlaced for the final
	// result. Until then the task stays in the task set (an ABORT TASK or
	// an ORDERED task waits for it), and a COMPARE AND WRITE or resize of
	// the logical unit waits for it (a WRITE meanwhile places into a
	// buffer instead, written when the data is there). If the
	// fetch fails, the range is indeterminate, as after any failed WRITE
	// (SBC-3 §4.18): a mix of old and new data, or whatever else the
	// fabric's transfer put there. Execute ignores ViewOut.
	ViewOut bool
	// DataOutViews is where the core puts the slices to place data-out
	// into (Result.DataOutWanted bytes in all, in order); the fabric may
	// give it capacity to reuse.
	DataOutViews [][]byte
	// DataOutBuffered is set with DataOutViews when they are a buffer the
	// core allocated for this command alone (the write lock was held or
	// awaited), not the backstore's memory: a fabric that keeps
	// registrations of the memory it places into (rdma.RegionCache) does
	// not keep one of this.
	DataOutBuffered bool
	// viewTS is the task set that holds ORDERED tasks back until
	// ReleaseViews, viewKey the I_T nexus whose views they are.
	viewTS  *taskSet
	viewKey string
	// placing is the task waiting for DataOutPlaced, completer the
	// Completer Submit was given.
	placing   *task
	completer Completer
}

// DataOutPlaced ends the data-out transfer of a command whose result had
// FetchViews set: ok reports whether every byte of DataOutViews was
// placed (false: the transfer failed, and the command fails with WRITE
// ERROR unless it was aborted). It returns the final result as Submit
// does: inline true, or inline false when a goroutine of the core
// finishes the command and hands the result to the Completer given to
// Submit. A command not waiting for its data-out gets an aborted result.
func (c *Command) DataOutPlaced(ok bool) (Result, bool) {
	t := c.placing
	if t == nil {
		return Result{Aborted: true}, true
	}
	c.placing = nil
	return t.sess.placed(t, ok)
}

// ReleaseViews ends the fabric's use of DataInViews: the slices are
// dropped (their capacity kept) and the logical unit's ORDERED tasks may
// start. Safe to call when the command has no views, and twice.
func (c *Command) ReleaseViews() {
	if c.viewTS != nil {
		c.viewTS.releaseView(c.viewKey)
		c.viewTS = nil
	}
	clear(c.DataInViews)
	c.DataInViews = c.DataInViews[:0]
}

// Result is the outcome of a command.
type Result struct {
	// Status is the SCSI status byte (SAM-5 §5.3.1), e.g. StatusGood.
	Status uint8
	// Sense is the sense data (fixed or descriptor format) for CHECK
	// CONDITION, else empty.
	Sense []byte
	// DataInLen is how many bytes of Command.DataIn hold data-in.
	DataInLen int
	// DataOutUsed is how many bytes of Command.DataOut the command consumed.
	DataOutUsed int
	// DataInWanted / DataOutWanted are the transfer lengths the CDB asked for,
	// in bytes, so the fabric can report overflow and underflow residuals
	// (SAM-5 §5.4).
	DataInWanted, DataOutWanted int
	// Aborted is set when a task management function aborted the command:
	// the fabric sends no response for it (TAS=0) and returns its credit.
	Aborted bool
	// FetchViews is set when the command waits for its data-out in
	// Command.DataOutViews (Command.ViewOut); Status and Sense are not
	// yet known.
	FetchViews bool
}

// TMF is a task management function (SAM-5 §7). The values are the SRP_TSK_MGMT
// tsk_mgmt_func codes (T10 SRP r16a §6.7); the functions SRP has no code for
// take the codes of the SAS SSP TASK MANAGEMENT FUNCTION field (SPL-3,
// TASK frame), which agree with SRP on the shared ones.
type TMF uint8

const (
	TMFAbortTask    TMF = 0x01
	TMFAbortTaskSet TMF = 0x02
	TMFClearTaskSet TMF = 0x04
	TMFLUNReset     TMF = 0x08
	// TMFITNexusReset is I_T NEXUS RESET (SAM-5 §7): the LUN is ignored.
	TMFITNexusReset TMF = 0x10
	TMFClearACA     TMF = 0x40
	// TMFQueryTask is QUERY TASK (SAM-5 §7): taskTag names the task.
	TMFQueryTask TMF = 0x80
	// TMFQueryTaskSet is QUERY TASK SET (SAM-5 §7).
	TMFQueryTaskSet TMF = 0x81
	// TMFQueryAsyncEvent is QUERY ASYNCHRONOUS EVENT (SAM-5 §7).
	TMFQueryAsyncEvent TMF = 0x82
)

// TMFResponse is a task management service response (SAM-5 §7.1; the SRP
// response codes of T10 SRP r16a table 24).
type TMFResponse uint8

const (
	TMFComplete     TMFResponse = 0x00 // FUNCTION COMPLETE
	TMFNotSupported TMFResponse = 0x04 // TASK MANAGEMENT FUNCTION NOT SUPPORTED
	TMFFailed       TMFResponse = 0x05 // TASK MANAGEMENT FUNCTION FAILED
	// TMFSucceeded is FUNCTION SUCCEEDED, the positive answer of the QUERY
	// functions (SAM-5 §7.1; the code SAS SSP (SPL-3) and FCP-4 give it).
	TMFSucceeded    TMFResponse = 0x08
	TMFIncorrectLUN TMFResponse = 0x09 // INCORRECT LOGICAL UNIT NUMBER
)

// TMFInfoSession is implemented by sessions that return the ADDITIONAL
// RESPONSE INFORMATION argument of a task management function (SAM-5 §7.1),
// for fabrics whose response can carry it (SAS SSP RESPONSE IU bytes 0..2 of
// the response data). Only QUERY ASYNCHRONOUS EVENT with FUNCTION SUCCEEDED
// sets it (SAM-5 §7): byte 0 bits 5..4 UADE DEPTH, bits 3..0 SENSE KEY;
// byte 1 ADDITIONAL SENSE CODE; byte 2 ADDITIONAL SENSE CODE QUALIFIER. It is
// zero otherwise. The session the core returns from NewSession implements it.
type TMFInfoSession interface {
	Session
	// TaskManagementInfo is TaskManagement plus the additional response
	// information.
	TaskManagementInfo(ctx context.Context, fn TMF, lun uint64, taskTag uint64) (TMFResponse, [3]byte)
}

// Completer receives the result of a command given to Session.Submit that
// did not complete inline (LIO's queue_data_in / queue_status /
// aborted_task, as one call: the result says which).
type Completer interface {
	// Complete delivers cmd's result. It is called once, from a goroutine
	// of the core, and must not block for long: a fabric queues the result
	// to the goroutine that owns the command.
	Complete(cmd *Command, res Result)
}

// Session is the core's view of one I_T nexus. A fabric gets one from the
// core when a login succeeds and closes it when the nexus ends.
//
// Check, Execute, Submit and TaskManagement may be called concurrently
// from many goroutines.
type Session interface {
	// Check runs, before the fabric moves any data for cmd, the checks that
	// can refuse it (LIO target_setup_cmd_from_cdb and
	// transport_lookup_cmd_lun): the logical unit through the nexus's view,
	// a read-only mapping, a pending unit attention, the opcode and CDB
	// fields, the target port group's ALUA state, the data-out length of a WRITE-type command against
	// cmd.DataOutLen (LIO target_cmd_size_check), the task attribute and
	// reservations. A refused command gets its final result and ok false:
	// the fabric answers it without fetching data-out; its DataOutWanted
	// and DataInWanted are -1 (no residual) except for a data-out length
	// that disagrees with the CDB. Otherwise ok is true and res.DataOutWanted and
	// res.DataInWanted hold the transfer lengths the CDB asks for, in
	// bytes, or -1 where only the command's execution knows them; the
	// fabric sizes its buffers from them, then passes cmd (with
	// Command.Checked set) to Submit or Execute, which do not repeat the
	// checks that consume state (the unit attention). cmd.DataOut and
	// cmd.DataIn are not used.
	Check(cmd *Command) (res Result, ok bool)
	// Execute runs cmd to completion, honouring task attributes, the task set
	// and reservations. It returns when the command is done or aborted. A
	// cancelled ctx aborts the command as ABORT TASK would.
	Execute(ctx context.Context, cmd *Command) Result
	// Submit starts cmd as Execute would, without blocking the caller on
	// the backstore or the task set. A data transfer command on a logical
	// unit whose backstore never blocks (backstore.NonBlocking), with
	// nothing in the task set it must wait for, runs on the caller's
	// goroutine: Submit returns its result and inline true. Any other
	// command runs on a goroutine of the core, which hands the result to
	// c.Complete; Submit then returns inline false. The fabric keeps cmd
	// and its buffers until it has the result.
	Submit(ctx context.Context, cmd *Command, c Completer) (res Result, inline bool)
	// Refuse returns the result of a command the fabric itself refuses
	// for reason r, such as malformed data descriptors (INVALID FIELD IN
	// CDB) or a tag already in use (OVERLAPPED COMMANDS ATTEMPTED): its
	// status and the sense data of the one reason table, in the format the
	// control mode page of the logical unit cmd.LUN addresses selects
	// (D_SENSE), as LIO's transport_send_check_condition_and_sense. Only
	// cmd.LUN is used; nothing is executed.
	Refuse(cmd *Command, r Reason) Result
	// Abandon ends a command submitted on a connection that is gone: no
	// response can reach the initiator (SAM-5 §6.3.4, I_T nexus loss for
	// that command). The task is aborted silently and its tag is free for
	// the nexus's next command at once, even while the backstore still
	// works on the old one; its Completer still gets the (aborted) result.
	// A command the core does not hold is ignored.
	Abandon(cmd *Command)
	// TaskManagement performs fn on lun. taskTag names the task for ABORT
	// TASK. It returns after the affected commands have finished.
	TaskManagement(ctx context.Context, fn TMF, lun uint64, taskTag uint64) TMFResponse
	// Close ends the nexus: outstanding commands are aborted and waited for.
	Close()
}

// forPR is the nexus as the persistent reservation state identifies it.
func (n Nexus) forPR() pr.Nexus {
	return pr.Nexus{
		InitiatorPortID:    n.InitiatorPortID,
		TargetPortID:       n.TargetPortID,
		RelativeTargetPort: n.RelativeTargetPort,
		TransportID:        n.TransportID,
	}
}
