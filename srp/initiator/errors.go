package initiator

import (
	"errors"
	"fmt"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

var (
	// ErrChannelDown reports that the channel a command was queued on went
	// down before the command's response arrived. Execute re-issues such a
	// command on a new channel up to MaxRetries times unless
	// Command.NoRetry forbids it.
	ErrChannelDown = errors.New("srp initiator: channel down")
	// ErrFastIOFail reports that the session has been without a live channel
	// for longer than Options.FastIOFailTmo (Linux srp_transport
	// fast_io_fail_tmo: the rport is in the FAIL_FAST state).
	ErrFastIOFail = errors.New("srp initiator: target unreachable (fast_io_fail_tmo expired)")
	// ErrDevLoss reports that the session gave up after Options.DevLossTmo
	// without a live channel (Linux srp_transport dev_loss_tmo: rport LOST).
	ErrDevLoss = errors.New("srp initiator: target lost (dev_loss_tmo expired)")
	// ErrClosed reports use of a closed session.
	ErrClosed = errors.New("srp initiator: session closed")
	// ErrTooManySegments reports a scatter/gather list with more elements
	// than Options.CmdSGEntries (Linux ib_srp: -EIO when ndesc >
	// cmd_sg_cnt without allow_ext_sg).
	ErrTooManySegments = errors.New("srp initiator: scatter/gather list longer than cmd_sg_entries")
	// ErrIUTooLong reports an SRP_CMD (CDB plus data descriptors) longer
	// than the channel's initiator-to-target IU length: min(req_it_iu_len,
	// the target's max_it_iu_len), which max_it_iu_size may have capped.
	ErrIUTooLong = errors.New("srp initiator: SRP_CMD longer than the channel's max_it_iu_len")
	// ErrTransferTooLarge reports a transfer over Options.MaxSect sectors.
	ErrTransferTooLarge = errors.New("srp initiator: transfer larger than max_sect")
	// ErrAborted reports a command that timed out or was cancelled and was
	// then aborted at the target with ABORT TASK.
	ErrAborted = errors.New("srp initiator: command aborted")
	// ErrProtocol reports an information unit from the target that breaks
	// the SRP rules (unknown opcode, bad length, unknown tag).
	ErrProtocol = errors.New("srp initiator: protocol error")
)

// LoginRejectError is an SRP_LOGIN_REJ from the target (T10 SRP r16a §6.4,
// table 10); Error says what to change.
type LoginRejectError struct {
	Reason srp.RejectReason
	// BufFmt is the target's supported buffer formats (SRP_LOGIN_REJ byte 24).
	BufFmt uint16
	// Channel is the index of the channel whose login was rejected.
	Channel int
}

// rejectText is the meaning of each LOGIN_REJ reason and the hint for it.
var rejectText = map[srp.RejectReason][2]string{
	srp.RejUnableEstablishChannel:  {"unable to establish RDMA channel", "check the target is configured and enabled"},
	srp.RejInsufficientResources:   {"insufficient RDMA channel resources", "lower queue_size or ch_count, or check the target port is enabled"},
	srp.RejReqITIULenTooLarge:      {"requested maximum initiator to target IU length too large", "lower max_it_iu_size (or cmd_sg_entries) to what the target accepts"},
	srp.RejUnableAssociateChannel:  {"unable to associate RDMA channel with I_T nexus", "check id_ext and ioc_guid match the target port"},
	srp.RejUnsupportedDescFmt:      {"requested descriptor formats not supported", "the target does not support direct/indirect buffer descriptors"},
	srp.RejMultiChannelUnsupported: {"multiple RDMA channels not supported", "use ch_count=1"},
	srp.RejChannelLimitReached:     {"RDMA channel limit reached for this initiator", "the target has no ACL for this initiator port or too many channels: add an ACL or lower ch_count"},
}

func (e *LoginRejectError) Error() string {
	t, ok := rejectText[e.Reason]
	if !ok {
		return fmt.Sprintf("srp login rejected on channel %d: reason %#x", e.Channel, uint32(e.Reason))
	}
	return fmt.Sprintf("srp login rejected on channel %d: %s (reason %#x); %s", e.Channel, t[0], uint32(e.Reason), t[1])
}

// StatusError is a SCSI command that ended with a status other than GOOD
// and without sense data (SAM-5 §5.3.1), e.g. BUSY or RESERVATION CONFLICT.
type StatusError struct {
	Status uint8
}

func (e *StatusError) Error() string {
	return "scsi status " + sense.StatusName(e.Status)
}

// TMFError is a task management function that did not complete: Response
// is the SRP response code (T10 SRP r16a table 24).
type TMFError struct {
	Function srp.TMF
	Response uint8
}

func (e *TMFError) Error() string {
	return fmt.Sprintf("task management %s: %s", e.Function.Name(), srp.TMFRspName(e.Response))
}
