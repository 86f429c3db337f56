package pr

// Nexus identifies the I_T nexus a command arrived on (SAM-5 §4.7). Its
// fields are the identifying fields of scsi.Nexus.
type Nexus struct {
	// InitiatorPortID is the initiator port's identifier as text (SRP: the
	// 16-byte initiator port identifier as 32 lowercase hex digits).
	InitiatorPortID string
	// TargetPortID is the target port's name (SRP: 32 lowercase hex digits).
	TargetPortID string
	// RelativeTargetPort is the target port's relative port identifier
	// (SPC-4 §7.8.6.3), 1-based; reported in READ FULL STATUS.
	RelativeTargetPort uint16
	// TransportID is the initiator port's TransportID (SPC-4 §7.6.4; SRP:
	// 24 bytes, protocol identifier 4), reported in READ FULL STATUS. Not
	// retained after the call returns: the State keeps its own copy.
	TransportID []byte
}

// NexusSet names the I_T nexuses a side effect applies to: the nexus of
// InitiatorPortID with TargetPortID or, when TargetPortID is empty (an
// ALL_TG_PT registration), the nexuses of InitiatorPortID with every target
// port except ExceptTargetPortID (the issuing nexus's port, when the issuing
// nexus shares the initiator port; otherwise empty).
type NexusSet struct {
	InitiatorPortID    string
	TargetPortID       string
	ExceptTargetPortID string
}

// Contains reports whether n is in the set.
func (s NexusSet) Contains(n Nexus) bool {
	if n.InitiatorPortID != s.InitiatorPortID {
		return false
	}
	if s.TargetPortID != "" {
		return n.TargetPortID == s.TargetPortID
	}
	return s.ExceptTargetPortID == "" || n.TargetPortID != s.ExceptTargetPortID
}

// UnitAttention is a unit attention condition the caller must establish on
// this logical unit for every I_T nexus in To (SPC-4 §5.13.11; sense key UNIT
// ATTENTION 6h).
type UnitAttention struct {
	To NexusSet
	// ASC and ASCQ are the additional sense code and qualifier: one of
	// RegistrationsPreempted, ReservationsPreempted, ReservationsReleased.
	ASC, ASCQ uint8
}

// Unit attention additional sense codes of persistent reservations (SPC-4
// table 28, ASC 2Ah PARAMETERS CHANGED family), as ASC<<8 | ASCQ.
const (
	ReservationsPreempted  uint16 = 0x2A03 // RESERVATIONS PREEMPTED
	ReservationsReleased   uint16 = 0x2A04 // RESERVATIONS RELEASED
	RegistrationsPreempted uint16 = 0x2A05 // REGISTRATIONS PREEMPTED
)

// Effects are what a PERSISTENT RESERVE OUT command requires of the caller
// beyond its status. They are computed under the State's lock; the caller
// applies them after Out returns, before completing the command.
type Effects struct {
	// UnitAttentions to establish, in order. The issuing nexus is never
	// included.
	UnitAttentions []UnitAttention
	// Abort lists the nexuses whose tasks on this logical unit must be
	// aborted (PREEMPT AND ABORT, SPC-4 §5.13.11.4.5: "as if an ABORT TASK
	// SET"), with no response for them unless TAS=1. Tasks of the issuing
	// nexus are never listed. Empty for every other service action.
	Abort []NexusSet
}

// Type is a persistent reservation type (SPC-4 §6.16.2, table 212).
type Type uint8

const (
	WriteExclusive                 Type = 0x1 // WR_EX
	ExclusiveAccess                Type = 0x3 // EX_AC
	WriteExclusiveRegistrantsOnly  Type = 0x5 // WR_EX_RO
	ExclusiveAccessRegistrantsOnly Type = 0x6 // EX_AC_RO
	WriteExclusiveAllRegistrants   Type = 0x7 // WR_EX_AR
	ExclusiveAccessAllRegistrants  Type = 0x8 // EX_AC_AR
)

// Valid reports whether t is one of the six defined types.
func (t Type) Valid() bool {
	switch t {
	case WriteExclusive, ExclusiveAccess, WriteExclusiveRegistrantsOnly,
		ExclusiveAccessRegistrantsOnly, WriteExclusiveAllRegistrants, ExclusiveAccessAllRegistrants:
		return true
	}
	return false
}

// AllRegistrants reports whether every registrant holds a reservation of
// type t (types 7 and 8, SPC-4 §5.13.10).
func (t Type) AllRegistrants() bool {
	return t == WriteExclusiveAllRegistrants || t == ExclusiveAccessAllRegistrants
}

// RegistrantsOnly reports whether t is a registrants-only type (5 or 6).
func (t Type) RegistrantsOnly() bool {
	return t == WriteExclusiveRegistrantsOnly || t == ExclusiveAccessRegistrantsOnly
}

// writeExclusive reports whether t leaves read access open (1, 5, 7).
func (t Type) writeExclusive() bool {
	return t == WriteExclusive || t == WriteExclusiveRegistrantsOnly || t == WriteExclusiveAllRegistrants
}

func (t Type) String() string {
	switch t {
	case WriteExclusive:
		return "WR_EX"
	case ExclusiveAccess:
		return "EX_AC"
	case WriteExclusiveRegistrantsOnly:
		return "WR_EX_RO"
	case ExclusiveAccessRegistrantsOnly:
		return "EX_AC_RO"
	case WriteExclusiveAllRegistrants:
		return "WR_EX_AR"
	case ExclusiveAccessAllRegistrants:
		return "EX_AC_AR"
	}
	return "invalid"
}

// ScopeLU is LU_SCOPE (SPC-4 §6.16.2, table 211), the only scope supported;
// it is the SCOPE field value (bits 7:4 of CDB byte 2) shifted down.
const ScopeLU = 0x0

// Operation codes handled by this package (SPC-4 and SPC-2).
const (
	OpReserve6             = 0x16
	OpRelease6             = 0x17
	OpReserve10            = 0x56
	OpRelease10            = 0x57
	OpPersistentReserveIn  = 0x5E
	OpPersistentReserveOut = 0x5F
)

// PERSISTENT RESERVE IN service actions (SPC-4 §6.15.1, table 200).
const (
	InReadKeys           = 0x00
	InReadReservation    = 0x01
	InReportCapabilities = 0x02
	InReadFullStatus     = 0x03
)

// PERSISTENT RESERVE OUT service actions (SPC-4 §6.16.1, table 209).
const (
	OutRegister                     = 0x00
	OutReserve                      = 0x01
	OutRelease                      = 0x02
	OutClear                        = 0x03
	OutPreempt                      = 0x04
	OutPreemptAndAbort              = 0x05
	OutRegisterAndIgnoreExistingKey = 0x06
	OutRegisterAndMove              = 0x07
)
