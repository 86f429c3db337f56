package initiator

import (
	"encoding/binary"
	"fmt"
)

// SCSI status codes (SAM-5 §5.3.1, table 41).
const (
	StatusGood                = 0x00
	StatusCheckCondition      = 0x02
	StatusConditionMet        = 0x04
	StatusBusy                = 0x08
	StatusReservationConflict = 0x18
	StatusTaskSetFull         = 0x28
	StatusACAActive           = 0x30
	StatusTaskAborted         = 0x40
)

// StatusName names a SCSI status byte.
func StatusName(s uint8) string {
	switch s {
	case StatusGood:
		return "GOOD"
	case StatusCheckCondition:
		return "CHECK CONDITION"
	case StatusConditionMet:
		return "CONDITION MET"
	case StatusBusy:
		return "BUSY"
	case StatusReservationConflict:
		return "RESERVATION CONFLICT"
	case StatusTaskSetFull:
		return "TASK SET FULL"
	case StatusACAActive:
		return "ACA ACTIVE"
	case StatusTaskAborted:
		return "TASK ABORTED"
	}
	return fmt.Sprintf("status %#02x", s)
}

// Sense keys (SPC-4 §4.5.6, table 48).
const (
	SenseNoSense        = 0x0
	SenseRecoveredError = 0x1
	SenseNotReady       = 0x2
	SenseMediumError    = 0x3
	SenseHardwareError  = 0x4
	SenseIllegalRequest = 0x5
	SenseUnitAttention  = 0x6
	SenseDataProtect    = 0x7
	SenseBlankCheck     = 0x8
	SenseVendorSpecific = 0x9
	SenseCopyAborted    = 0xa
	SenseAbortedCommand = 0xb
	SenseVolumeOverflow = 0xd
	SenseMiscompare     = 0xe
)

var senseKeyNames = [16]string{
	"NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR", "HARDWARE ERROR",
	"ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT", "BLANK CHECK", "VENDOR SPECIFIC",
	"COPY ABORTED", "ABORTED COMMAND", "RESERVED", "VOLUME OVERFLOW", "MISCOMPARE", "COMPLETED",
}

// SenseKeyName names a sense key.
func SenseKeyName(k uint8) string { return senseKeyNames[k&0xf] }

// ascNames holds the additional sense codes a target commonly returns
// (SPC-4 annex D, table D.1), keyed by ASC<<8|ASCQ.
var ascNames = map[uint16]string{
	0x0000: "NO ADDITIONAL SENSE INFORMATION",
	0x0401: "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
	0x0402: "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
	0x0403: "LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED",
	0x0c00: "WRITE ERROR",
	0x0e03: "INVALID FIELD IN COMMAND INFORMATION UNIT",
	0x1100: "UNRECOVERED READ ERROR",
	0x1a00: "PARAMETER LIST LENGTH ERROR",
	0x1d00: "MISCOMPARE DURING VERIFY OPERATION",
	0x2000: "INVALID COMMAND OPERATION CODE",
	0x2100: "LOGICAL BLOCK ADDRESS OUT OF RANGE",
	0x2400: "INVALID FIELD IN CDB",
	0x2500: "LOGICAL UNIT NOT SUPPORTED",
	0x2600: "INVALID FIELD IN PARAMETER LIST",
	0x2604: "INVALID RELEASE OF PERSISTENT RESERVATION",
	0x2700: "WRITE PROTECTED",
	0x2702: "SOFTWARE WRITE PROTECTED",
	0x2707: "SPACE ALLOCATION FAILED WRITE PROTECT",
	0x2900: "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED",
	0x2901: "POWER ON OCCURRED",
	0x2902: "SCSI BUS RESET OCCURRED",
	0x2903: "BUS DEVICE RESET FUNCTION OCCURRED",
	0x2a01: "MODE PARAMETERS CHANGED",
	0x2a03: "RESERVATIONS PREEMPTED",
	0x2a04: "RESERVATIONS RELEASED",
	0x2a05: "REGISTRATIONS PREEMPTED",
	0x2a09: "CAPACITY DATA HAS CHANGED",
	0x2f00: "COMMANDS CLEARED BY ANOTHER INITIATOR",
	0x3900: "SAVING PARAMETERS NOT SUPPORTED",
	0x3a00: "MEDIUM NOT PRESENT",
	0x3f0e: "REPORTED LUNS DATA HAS CHANGED",
	0x4400: "INTERNAL TARGET FAILURE",
	0x4700: "SCSI PARITY ERROR",
	0x4b00: "DATA PHASE ERROR",
	0x4e00: "OVERLAPPED COMMANDS ATTEMPTED",
	0x5300: "MEDIA LOAD OR EJECT FAILED",
	0x5501: "SYSTEM BUFFER FULL",
	0x5503: "INSUFFICIENT RESOURCES",
	0x5504: "INSUFFICIENT REGISTRATION RESOURCES",
}

// ASCName names an additional sense code and qualifier, or returns "" when
// the pair is not in the table.
func ASCName(asc, ascq uint8) string { return ascNames[uint16(asc)<<8|uint16(ascq)] }

// SenseError is a command that ended in CHECK CONDITION, with its sense
// data decoded (SPC-4 §4.5: fixed format 70h/71h, descriptor format 72h/73h).
// Match it with errors.As.
type SenseError struct {
	Status   uint8 // SCSI status (normally CHECK CONDITION)
	Key      uint8 // sense key (low nibble)
	ASC      uint8
	ASCQ     uint8
	Deferred bool // response code 71h/73h
	// Info is the INFORMATION field when present (InfoValid), e.g. the first
	// LBA in error, or the offset of the first miscompare.
	Info      uint64
	InfoValid bool
	Raw       []byte // the sense data as received
}

// DecodeSense decodes sense data in fixed or descriptor format. It returns
// nil when b is too short or its response code is not 70h-73h.
func DecodeSense(status uint8, b []byte) *SenseError {
	if len(b) < 1 {
		return nil
	}
	e := &SenseError{Status: status, Raw: b}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		// Fixed format (SPC-4 §4.5.3, table 51): key at 2, INFORMATION at 3..6
		// (VALID bit 7 of byte 0), ASC/ASCQ at 12/13.
		if len(b) < 3 {
			return nil
		}
		e.Deferred = b[0]&0x7f == 0x71
		e.Key = b[2] & 0xf
		if len(b) >= 7 && b[0]&0x80 != 0 {
			e.Info, e.InfoValid = uint64(binary.BigEndian.Uint32(b[3:7])), true
		}
		if len(b) >= 14 {
			e.ASC, e.ASCQ = b[12], b[13]
		}
	case 0x72, 0x73:
		// Descriptor format (SPC-4 §4.5.2, table 35), descriptors from byte 8.
		if len(b) < 4 {
			return nil
		}
		e.Deferred = b[0]&0x7f == 0x73
		e.Key, e.ASC, e.ASCQ = b[1]&0xf, b[2], b[3]
		if len(b) >= 8 {
			n := 8 + int(b[7])
			for i := 8; i+2 <= n && i+2 <= len(b); {
				dl := int(b[i+1])
				if b[i] == 0 && dl >= 0x0a && i+12 <= len(b) && b[i+2]&0x80 != 0 {
					// Information descriptor (SPC-4 §4.5.2.2).
					e.Info, e.InfoValid = binary.BigEndian.Uint64(b[i+4:i+12]), true
				}
				i += 2 + dl
			}
		}
	default:
		return nil
	}
	return e
}

func (e *SenseError) Error() string {
	s := fmt.Sprintf("scsi %s: %s (key %#x), asc/ascq %02xh/%02xh", StatusName(e.Status), SenseKeyName(e.Key), e.Key, e.ASC, e.ASCQ)
	if n := ASCName(e.ASC, e.ASCQ); n != "" {
		s += " " + n
	}
	if e.InfoValid {
		s += fmt.Sprintf(", information %#x", e.Info)
	}
	if e.Deferred {
		s += " (deferred)"
	}
	return s
}
