package target

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/gosrp/gosrp/scsi"
)

// lunMapSession presents an ACL's LUN mapping to one initiator (LIO's
// per-node-ACL mapped LUNs): the initiator addresses LUN numbers of the
// map's keys, the core sees the mapped target LUN numbers; REPORT LUNS
// lists only the mapped LUNs; commands to any other LUN get ILLEGAL REQUEST,
// LOGICAL UNIT NOT SUPPORTED (05/25/00), and INQUIRY to one returns
// peripheral qualifier 011b (SPC-4 §6.6.2).
type lunMapSession struct {
	scsi.Session
	m map[uint64]uint64 // initiator LUN number → target LUN number
}

// MapLUNs wraps sess so the initiator sees the LUN numbers of m's keys,
// each standing for the target LUN number it maps to.
func MapLUNs(sess scsi.Session, m map[uint64]uint64) scsi.Session {
	return &lunMapSession{Session: sess, m: m}
}

func (s *lunMapSession) translate(field uint64) (uint64, bool) {
	n, ok := scsi.DecodeLUN(field)
	if !ok {
		return 0, false
	}
	t, ok := s.m[n]
	if !ok {
		return 0, false
	}
	return scsi.EncodeLUN(t), true
}

const (
	opInquiry    = 0x12
	opReportLUNs = 0xa0
	opReqSense   = 0x03
)

// Execute implements scsi.Session.
func (s *lunMapSession) Execute(ctx context.Context, cmd *scsi.Command) scsi.Result {
	if len(cmd.CDB) > 0 && cmd.CDB[0] == opReportLUNs {
		return s.reportLUNs(cmd)
	}
	t, ok := s.translate(cmd.LUN)
	if !ok {
		return unmappedLUN(cmd)
	}
	c := *cmd
	c.LUN = t
	return s.Session.Execute(ctx, &c)
}

// TaskManagement implements scsi.Session.
func (s *lunMapSession) TaskManagement(ctx context.Context, fn scsi.TMF, lun, taskTag uint64) scsi.TMFResponse {
	t, ok := s.translate(lun)
	if !ok {
		return scsi.TMFIncorrectLUN
	}
	return s.Session.TaskManagement(ctx, fn, t, taskTag)
}

// reportLUNs answers REPORT LUNS (SPC-4 §6.33) with the mapped LUNs.
func (s *lunMapSession) reportLUNs(cmd *scsi.Command) scsi.Result {
	if len(cmd.CDB) < 12 {
		return scsi.Result{Status: statusCheckCondition, Sense: senseInvalidFieldInCDB}
	}
	alloc := int(binary.BigEndian.Uint32(cmd.CDB[6:10]))
	luns := make([]uint64, 0, len(s.m))
	for n := range s.m {
		luns = append(luns, n)
	}
	slices.Sort(luns)
	data := make([]byte, 8+8*len(luns))
	binary.BigEndian.PutUint32(data, uint32(8*len(luns)))
	for i, n := range luns {
		binary.BigEndian.PutUint64(data[8+8*i:], scsi.EncodeLUN(n))
	}
	n := copy(cmd.DataIn, data[:min(len(data), alloc)])
	return scsi.Result{Status: statusGood, DataInLen: n, DataInWanted: alloc}
}

func unmappedLUN(cmd *scsi.Command) scsi.Result {
	if len(cmd.CDB) >= 6 && cmd.CDB[0] == opInquiry && cmd.CDB[1]&1 == 0 {
		alloc := int(binary.BigEndian.Uint16(cmd.CDB[3:5]))
		data := make([]byte, 36)
		data[0] = 0x7f // peripheral qualifier 011b, device type 1Fh
		data[2] = 0x06 // SPC-4
		data[3] = 0x02 // response data format 2
		data[4] = 31
		n := copy(cmd.DataIn, data[:min(len(data), alloc)])
		return scsi.Result{Status: statusGood, DataInLen: n, DataInWanted: alloc}
	}
	if len(cmd.CDB) > 0 && cmd.CDB[0] == opReqSense {
		return scsi.Result{Status: statusCheckCondition, Sense: fixedSense(0x05, 0x25, 0x00)}
	}
	return scsi.Result{Status: statusCheckCondition, Sense: fixedSense(0x05, 0x25, 0x00)}
}
