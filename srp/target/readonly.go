package target

import (
	"context"

	"github.com/gosrp/gosrp/scsi"
)

// readOnlySession write-protects some LUNs of one initiator's view (LIO's
// mapped LUN write_protect): commands that would modify the medium get
// CHECK CONDITION, DATA PROTECT, WRITE PROTECTED (07/27/00; SBC-3 §4.11),
// and MODE SENSE reports the WP bit of the device-specific parameter
// (SBC-3 §6.5.1). Other commands pass through.
type readOnlySession struct {
	scsi.Session
	ro map[uint64]bool // initiator LUN number → write-protected
}

// ReadOnlyLUNs wraps sess so that the LUN numbers (as the initiator
// addresses them, after any MapLUNs) set in ro are write-protected. It
// returns sess unchanged when ro has no true entry.
func ReadOnlyLUNs(sess scsi.Session, ro map[uint64]bool) scsi.Session {
	m := map[uint64]bool{}
	for n, on := range ro {
		if on {
			m[n] = true
		}
	}
	if len(m) == 0 {
		return sess
	}
	return &readOnlySession{Session: sess, ro: m}
}

// senseWriteProtected is DATA PROTECT, WRITE PROTECTED (07/27/00).
var senseWriteProtected = fixedSense(0x07, 0x27, 0x00)

const (
	opModeSense6  = 0x1a
	opModeSense10 = 0x5a
)

// Execute implements scsi.Session.
func (s *readOnlySession) Execute(ctx context.Context, cmd *scsi.Command) scsi.Result {
	n, ok := scsi.DecodeLUN(cmd.LUN)
	if !ok || !s.ro[n] || len(cmd.CDB) == 0 {
		return s.Session.Execute(ctx, cmd)
	}
	if scsi.WritesMedium(cmd.CDB) {
		// Refused before the CDB is looked at, as LIO refuses it at LUN
		// lookup (transport_lookup_cmd_lun): no residual is reported.
		return scsi.Result{Status: statusCheckCondition, Sense: senseWriteProtected,
			DataOutWanted: len(cmd.DataOut), DataInWanted: len(cmd.DataIn)}
	}
	res := s.Session.Execute(ctx, cmd)
	if res.Status != statusGood {
		return res
	}
	// The device-specific parameter is byte 2 of the MODE SENSE(6) header
	// and byte 3 of the MODE SENSE(10) header (SPC-4 §7.5.5); its bit 7 is
	// WP for direct-access devices.
	switch cmd.CDB[0] {
	case opModeSense6:
		if res.DataInLen > 2 {
			cmd.DataIn[2] |= 0x80
		}
	case opModeSense10:
		if res.DataInLen > 3 {
			cmd.DataIn[3] |= 0x80
		}
	}
	return res
}
