package scsi

import (
	"maps"
	"slices"
)

// View is what one I_T nexus sees of the target's logical units: the LUN
// numbers its initiator uses and the ones it may not write (LIO's mapped
// LUNs of a node ACL, se_dev_entry with lun_access_ro).
type View struct {
	// LUNs maps the LUN numbers the initiator uses to the target's LUN
	// numbers. nil presents every logical unit under its own number; an
	// empty map presents none.
	LUNs map[uint64]uint64
	// ReadOnly holds the initiator LUN numbers this nexus may only read:
	// a command that writes the medium fails with DATA PROTECT, WRITE
	// PROTECTED (07/27/00) before its CDB is looked at further (LIO
	// transport_lookup_cmd_lun), and MODE SENSE reports WP.
	ReadOnly map[uint64]bool
}

// OpenSession opens the core's view v of nexus n. The session is closed
// with Close. NewSession(n) is OpenSession(n, View{}).
func (t *Target) OpenSession(n Nexus, v View) Session {
	s := t.newSession(n)
	if v.LUNs != nil {
		s.view = maps.Clone(v.LUNs)
		s.mapped = true
	}
	for k, on := range v.ReadOnly {
		if on {
			if s.ro == nil {
				s.ro = map[uint64]bool{}
			}
			s.ro[k] = true
		}
	}
	return s
}

// lookup finds the logical unit the initiator addresses as LUN field
// lun (the 8-byte SAM LUN as an integer) through the session's view, and
// whether the nexus may only read it.
func (s *session) lookup(lun uint64) (lu *LogicalUnit, ro bool) {
	num, ok := DecodeLUN(lun)
	if !ok {
		return nil, false
	}
	if s.mapped {
		tn, ok := s.view[num]
		if !ok {
			return nil, false
		}
		return s.t.lookup(tn), s.ro[num]
	}
	return s.t.lookup(num), s.ro[num]
}

// reportedLUNs lists the LUN numbers REPORT LUNS returns to this nexus
// (SPC-4 §6.33), ascending: the view's, or every logical unit's. With no
// logical unit at all, LUN 0 is listed (SPC-4 §4.6.4: LUN 0 always
// answers).
func (s *session) reportedLUNs() []uint64 {
	var luns []uint64
	if s.mapped {
		luns = slices.Sorted(maps.Keys(s.view))
	} else {
		luns = s.t.LUNs()
	}
	if len(luns) == 0 {
		luns = []uint64{0}
	}
	return luns
}
