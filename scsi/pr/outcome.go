package pr

import (
	"fmt"

	"github.com/gosrp/gosrp/scsi/sense"
)

// Reason says how a command ends. The zero value, OK, is GOOD status. Each
// other value names one SCSI outcome; [Reason.Status] and [Reason.Sense] give
// the status byte and sense data fields for it (SPC-4 §4.5.6 table 28 for the
// additional sense codes, SAM-5 §5.3.1 for status).
type Reason uint8

const (
	// OK: GOOD status (00h).
	OK Reason = iota
	// ReservationConflict: RESERVATION CONFLICT status (18h), no sense data.
	ReservationConflict
	// InvalidFieldInCDB: CHECK CONDITION, ILLEGAL REQUEST (5h), INVALID FIELD
	// IN CDB (24h/00h), with a field pointer into the CDB (C/D=1).
	InvalidFieldInCDB
	// InvalidFieldInParamList: CHECK CONDITION, ILLEGAL REQUEST (5h), INVALID
	// FIELD IN PARAMETER LIST (26h/00h), with a field pointer into the
	// parameter list (C/D=0).
	InvalidFieldInParamList
	// ParamListLengthError: CHECK CONDITION, ILLEGAL REQUEST (5h), PARAMETER
	// LIST LENGTH ERROR (1Ah/00h).
	ParamListLengthError
	// InvalidReleaseOfPersistentReservation: CHECK CONDITION, ILLEGAL
	// REQUEST (5h), INVALID RELEASE OF PERSISTENT RESERVATION (26h/04h):
	// RELEASE by the holder with a SCOPE or TYPE that does not match the
	// reservation (SPC-4 §5.13.11.2.2).
	InvalidReleaseOfPersistentReservation
	// InsufficientRegistrationResources: CHECK CONDITION, ILLEGAL REQUEST
	// (5h), INSUFFICIENT REGISTRATION RESOURCES (55h/04h): the registration
	// table is full (Config.MaxRegistrations).
	InsufficientRegistrationResources
	// InternalTargetFailure: CHECK CONDITION, HARDWARE ERROR (4h), INTERNAL
	// TARGET FAILURE (44h/00h): the persistent state could not be written
	// while APTPL is active. The state is left as it was before the command.
	InternalTargetFailure
)

// Status returns the SCSI status byte for r.
func (r Reason) Status() uint8 {
	switch r {
	case OK:
		return sense.StatusGood
	case ReservationConflict:
		return sense.StatusReservationConflict
	default:
		return sense.StatusCheckCondition
	}
}

// Sense returns the sense key, additional sense code and qualifier for a
// reason whose status is CHECK CONDITION; ok is false for OK and
// ReservationConflict, which carry no sense data.
func (r Reason) Sense() (key, asc, ascq uint8, ok bool) {
	switch r {
	case InvalidFieldInCDB:
		return sense.KeyIllegalRequest, 0x24, 0x00, true
	case InvalidFieldInParamList:
		return sense.KeyIllegalRequest, 0x26, 0x00, true
	case ParamListLengthError:
		return sense.KeyIllegalRequest, 0x1A, 0x00, true
	case InvalidReleaseOfPersistentReservation:
		return sense.KeyIllegalRequest, 0x26, 0x04, true
	case InsufficientRegistrationResources:
		return sense.KeyIllegalRequest, 0x55, 0x04, true
	case InternalTargetFailure:
		return sense.KeyHardwareError, 0x44, 0x00, true
	}
	return 0, 0, 0, false
}

func (r Reason) String() string {
	switch r {
	case OK:
		return "OK"
	case ReservationConflict:
		return "RESERVATION CONFLICT"
	case InvalidFieldInCDB:
		return "INVALID FIELD IN CDB"
	case InvalidFieldInParamList:
		return "INVALID FIELD IN PARAMETER LIST"
	case ParamListLengthError:
		return "PARAMETER LIST LENGTH ERROR"
	case InvalidReleaseOfPersistentReservation:
		return "INVALID RELEASE OF PERSISTENT RESERVATION"
	case InsufficientRegistrationResources:
		return "INSUFFICIENT REGISTRATION RESOURCES"
	case InternalTargetFailure:
		return "INTERNAL TARGET FAILURE"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Outcome is the result of a reservation decision or command.
//
// For InvalidFieldInCDB and InvalidFieldInParamList, Byte and Bit locate the
// offending field for the sense-key specific FIELD POINTER (SPC-4
// §4.5.2.4.2): Byte is the byte offset in the CDB or parameter list of the
// field's most significant byte, Bit (0–7) its most significant bit when
// BitValid (the BPV bit). Other reasons leave them zero.
type Outcome struct {
	Reason   Reason
	Byte     uint16
	Bit      uint8
	BitValid bool
}

// OK reports whether the outcome is GOOD status.
func (o Outcome) OK() bool { return o.Reason == OK }

func (o Outcome) String() string {
	switch o.Reason {
	case InvalidFieldInCDB, InvalidFieldInParamList:
		if o.BitValid {
			return fmt.Sprintf("%v (byte %d bit %d)", o.Reason, o.Byte, o.Bit)
		}
		return fmt.Sprintf("%v (byte %d)", o.Reason, o.Byte)
	}
	return o.Reason.String()
}

var (
	good     = Outcome{}
	conflict = Outcome{Reason: ReservationConflict}
)

func badCDB(byteOff uint16, bit uint8) Outcome {
	return Outcome{Reason: InvalidFieldInCDB, Byte: byteOff, Bit: bit, BitValid: true}
}

func badParam(byteOff uint16, bit uint8) Outcome {
	return Outcome{Reason: InvalidFieldInParamList, Byte: byteOff, Bit: bit, BitValid: true}
}

func badParamByte(byteOff uint16) Outcome {
	return Outcome{Reason: InvalidFieldInParamList, Byte: byteOff}
}

func outcome(r Reason) Outcome { return Outcome{Reason: r} }
