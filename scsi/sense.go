package scsi

import "encoding/binary"

// SCSI status codes (SAM-5 §5.3.1, table 35).
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

// Sense keys (SPC-4 §4.5.6, table 47).
const (
	SenseNoSense        = 0x0
	SenseRecoveredError = 0x1
	SenseNotReady       = 0x2
	SenseMediumError    = 0x3
	SenseHardwareError  = 0x4
	SenseIllegalRequest = 0x5
	SenseUnitAttention  = 0x6
	SenseDataProtect    = 0x7
	SenseAbortedCommand = 0xB
	SenseMiscompare     = 0xE
)

// Reason is why the core fails a command (the role of LIO's
// sense_reason_t). Each Reason maps to one status and, for CHECK CONDITION,
// one sense key/ASC/ASCQ through reasonTable; nothing else in the core
// spells sense codes.
type Reason uint8

// Reasons. The comment gives sense key / ASC / ASCQ (SPC-4 Annex D).
const (
	ReasonNone                              Reason = iota // GOOD
	ReasonInvalidOpcode                                   // 05/20/00 INVALID COMMAND OPERATION CODE
	ReasonInvalidCDBField                                 // 05/24/00 INVALID FIELD IN CDB
	ReasonInvalidParamField                               // 05/26/00 INVALID FIELD IN PARAMETER LIST
	ReasonParamListLength                                 // 05/1A/00 PARAMETER LIST LENGTH ERROR
	ReasonInvalidCommandIU                                // 05/0E/03 INVALID FIELD IN COMMAND INFORMATION UNIT
	ReasonLBAOutOfRange                                   // 05/21/00 LOGICAL BLOCK ADDRESS OUT OF RANGE
	ReasonLUNNotSupported                                 // 05/25/00 LOGICAL UNIT NOT SUPPORTED
	ReasonSavingNotSupported                              // 05/39/00 SAVING PARAMETERS NOT SUPPORTED
	ReasonWriteProtected                                  // 07/27/00 WRITE PROTECTED
	ReasonSoftwareWriteProtected                          // 07/27/02 LOGICAL UNIT SOFTWARE WRITE PROTECTED
	ReasonSpaceAllocFailed                                // 07/27/07 SPACE ALLOCATION FAILED WRITE PROTECT
	ReasonReadError                                       // 03/11/00 UNRECOVERED READ ERROR
	ReasonWriteError                                      // 03/0C/00 WRITE ERROR
	ReasonMiscompare                                      // 0E/1D/00 MISCOMPARE DURING VERIFY OPERATION
	ReasonOverlappedCommands                              // 0B/4E/00 OVERLAPPED COMMANDS ATTEMPTED
	ReasonInternalFailure                                 // 04/44/00 INTERNAL TARGET FAILURE
	ReasonInvalidRelease                                  // 05/26/04 INVALID RELEASE OF PERSISTENT RESERVATION
	ReasonInsufficientRegistrationResources               // 05/55/04 INSUFFICIENT REGISTRATION RESOURCES
	ReasonReservationConflict                             // status RESERVATION CONFLICT, no sense
	ReasonUAPowerOn                                       // 06/29/00 POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
	ReasonUALUNReset                                      // 06/29/03 BUS DEVICE RESET FUNCTION OCCURRED
	ReasonUAModeChanged                                   // 06/2A/01 MODE PARAMETERS CHANGED
	ReasonUAReservationsPreempted                         // 06/2A/03 RESERVATIONS PREEMPTED
	ReasonUAReservationsReleased                          // 06/2A/04 RESERVATIONS RELEASED
	ReasonUARegistrationsPreempted                        // 06/2A/05 REGISTRATIONS PREEMPTED
	ReasonUACapacityChanged                               // 06/2A/09 CAPACITY DATA HAS CHANGED
	ReasonUACommandsCleared                               // 06/2F/00 COMMANDS CLEARED BY ANOTHER INITIATOR
	ReasonUALUNsChanged                                   // 06/3F/0E REPORTED LUNS DATA HAS CHANGED
	ReasonUAITNexusLoss                                   // 06/29/07 I_T NEXUS LOSS OCCURRED
	numReasons
)

// reasonEntry is one row of the Reason → status/sense table.
type reasonEntry struct {
	status         uint8
	key, asc, ascq uint8
}

// reasonTable is the single mapping from Reason to status and sense codes.
var reasonTable = [numReasons]reasonEntry{
	ReasonNone:                              {StatusGood, 0, 0, 0},
	ReasonInvalidOpcode:                     {StatusCheckCondition, SenseIllegalRequest, 0x20, 0x00},
	ReasonInvalidCDBField:                   {StatusCheckCondition, SenseIllegalRequest, 0x24, 0x00},
	ReasonInvalidParamField:                 {StatusCheckCondition, SenseIllegalRequest, 0x26, 0x00},
	ReasonParamListLength:                   {StatusCheckCondition, SenseIllegalRequest, 0x1A, 0x00},
	ReasonInvalidCommandIU:                  {StatusCheckCondition, SenseIllegalRequest, 0x0E, 0x03},
	ReasonLBAOutOfRange:                     {StatusCheckCondition, SenseIllegalRequest, 0x21, 0x00},
	ReasonLUNNotSupported:                   {StatusCheckCondition, SenseIllegalRequest, 0x25, 0x00},
	ReasonSavingNotSupported:                {StatusCheckCondition, SenseIllegalRequest, 0x39, 0x00},
	ReasonWriteProtected:                    {StatusCheckCondition, SenseDataProtect, 0x27, 0x00},
	ReasonSoftwareWriteProtected:            {StatusCheckCondition, SenseDataProtect, 0x27, 0x02},
	ReasonSpaceAllocFailed:                  {StatusCheckCondition, SenseDataProtect, 0x27, 0x07},
	ReasonReadError:                         {StatusCheckCondition, SenseMediumError, 0x11, 0x00},
	ReasonWriteError:                        {StatusCheckCondition, SenseMediumError, 0x0C, 0x00},
	ReasonMiscompare:                        {StatusCheckCondition, SenseMiscompare, 0x1D, 0x00},
	ReasonOverlappedCommands:                {StatusCheckCondition, SenseAbortedCommand, 0x4E, 0x00},
	ReasonInternalFailure:                   {StatusCheckCondition, SenseHardwareError, 0x44, 0x00},
	ReasonInvalidRelease:                    {StatusCheckCondition, SenseIllegalRequest, 0x26, 0x04},
	ReasonInsufficientRegistrationResources: {StatusCheckCondition, SenseIllegalRequest, 0x55, 0x04},
	ReasonReservationConflict:               {StatusReservationConflict, 0, 0, 0},
	ReasonUAPowerOn:                         {StatusCheckCondition, SenseUnitAttention, 0x29, 0x00},
	ReasonUALUNReset:                        {StatusCheckCondition, SenseUnitAttention, 0x29, 0x03},
	ReasonUAModeChanged:                     {StatusCheckCondition, SenseUnitAttention, 0x2A, 0x01},
	ReasonUAReservationsPreempted:           {StatusCheckCondition, SenseUnitAttention, 0x2A, 0x03},
	ReasonUAReservationsReleased:            {StatusCheckCondition, SenseUnitAttention, 0x2A, 0x04},
	ReasonUARegistrationsPreempted:          {StatusCheckCondition, SenseUnitAttention, 0x2A, 0x05},
	ReasonUACapacityChanged:                 {StatusCheckCondition, SenseUnitAttention, 0x2A, 0x09},
	ReasonUACommandsCleared:                 {StatusCheckCondition, SenseUnitAttention, 0x2F, 0x00},
	ReasonUALUNsChanged:                     {StatusCheckCondition, SenseUnitAttention, 0x3F, 0x0E},
	ReasonUAITNexusLoss:                     {StatusCheckCondition, SenseUnitAttention, 0x29, 0x07},
}

// Status returns the SCSI status byte for r.
func (r Reason) Status() uint8 {
	if r >= numReasons {
		return StatusCheckCondition
	}
	return reasonTable[r].status
}

// SenseCodes returns the sense key, ASC and ASCQ for r.
func (r Reason) SenseCodes() (key, asc, ascq uint8) {
	if r >= numReasons {
		r = ReasonInternalFailure
	}
	e := reasonTable[r]
	return e.key, e.asc, e.ascq
}

// failure is a command outcome inside the core: a Reason plus the optional
// sense-key-specific field pointer (SPC-4 §4.5.2.4.2) and INFORMATION field.
// The zero value means success (GOOD).
type failure struct {
	reason Reason
	// fieldValid: field pointer (SKSV=1). cdField: C/D bit (1 = CDB).
	fieldValid, cdField bool
	// bitValid: BPV; bit is the bit pointer (0..7).
	bitValid bool
	bit      uint8
	// field is the byte offset of the offending field (its most
	// significant byte) in the CDB or parameter list.
	field uint16
	// infoValid: VALID bit; info is the INFORMATION field.
	infoValid bool
	info      uint64
	// status overrides the table status when non-zero (CONDITION MET).
	status uint8
}

func (f failure) failed() bool { return f.reason != ReasonNone }

func fail(r Reason) failure { return failure{reason: r} }

// badCDB is INVALID FIELD IN CDB pointing at byte (and bit, or -1 for
// the whole byte).
func badCDB(byteOff int, bit int) failure {
	f := failure{reason: ReasonInvalidCDBField, fieldValid: true, cdField: true, field: uint16(byteOff)}
	if bit >= 0 {
		f.bitValid, f.bit = true, uint8(bit)
	}
	return f
}

// badParam is INVALID FIELD IN PARAMETER LIST pointing at byte/bit.
func badParam(byteOff int, bit int) failure {
	f := failure{reason: ReasonInvalidParamField, fieldValid: true, field: uint16(byteOff)}
	if bit >= 0 {
		f.bitValid, f.bit = true, uint8(bit)
	}
	return f
}

var ok = failure{}

// senseKeySpecific returns the 3-byte sense-key-specific field.
func (f failure) senseKeySpecific() ([3]byte, bool) {
	var b [3]byte
	if !f.fieldValid {
		return b, false
	}
	b[0] = 0x80 // SKSV
	if f.cdField {
		b[0] |= 0x40
	}
	if f.bitValid {
		b[0] |= 0x08 | (f.bit & 7)
	}
	binary.BigEndian.PutUint16(b[1:], f.field)
	return b, true
}

// Fixed-format sense data length produced by the core, bytes
// (SPC-4 §4.5.3: additional sense length 10).
const fixedSenseLen = 18

// buildSense encodes f as fixed (SPC-4 §4.5.3, response code 70h) or
// descriptor (SPC-4 §4.5.2, response code 72h) sense data.
func buildSense(f failure, desc bool) []byte {
	key, asc, ascq := f.reason.SenseCodes()
	sks, sksOK := f.senseKeySpecific()
	if !desc {
		b := make([]byte, fixedSenseLen)
		b[0] = 0x70
		if f.infoValid {
			b[0] |= 0x80
			// The fixed format INFORMATION field is 4 bytes; larger values
			// need descriptor format and are reported with VALID=0.
			if f.info > 0xFFFFFFFF {
				b[0] &^= 0x80
			} else {
				binary.BigEndian.PutUint32(b[3:], uint32(f.info))
			}
		}
		b[2] = key
		b[7] = fixedSenseLen - 8
		b[12], b[13] = asc, ascq
		if sksOK {
			copy(b[15:], sks[:])
		}
		return b
	}
	n := 8
	if f.infoValid {
		n += 12
	}
	if sksOK {
		n += 8
	}
	b := make([]byte, n)
	b[0] = 0x72
	b[1], b[2], b[3] = key, asc, ascq
	b[7] = byte(n - 8)
	p := 8
	if f.infoValid {
		// Information sense data descriptor (SPC-4 §4.5.2.2).
		b[p], b[p+1], b[p+2] = 0x00, 0x0A, 0x80
		binary.BigEndian.PutUint64(b[p+4:], f.info)
		p += 12
	}
	if sksOK {
		// Sense key specific sense data descriptor (SPC-4 §4.5.2.3).
		b[p], b[p+1] = 0x02, 0x06
		copy(b[p+4:], sks[:])
	}
	return b
}

// SenseInfo is decoded sense data, for tests and logs.
type SenseInfo struct {
	Key, ASC, ASCQ uint8
	// InfoValid/Info: the INFORMATION field.
	InfoValid bool
	Info      uint64
	// SKSValid/SKS: the 3 sense-key-specific bytes.
	SKSValid bool
	SKS      [3]byte
	// Descriptor reports descriptor format (72h/73h).
	Descriptor bool
}

// ParseSense decodes fixed or descriptor sense data; ok is false when b is
// not sense data the core could have produced.
func ParseSense(b []byte) (SenseInfo, bool) {
	var s SenseInfo
	if len(b) < 8 {
		return s, false
	}
	switch b[0] & 0x7F {
	case 0x70, 0x71:
		if len(b) < 14 {
			return s, false
		}
		s.Key, s.ASC, s.ASCQ = b[2]&0x0F, b[12], b[13]
		s.InfoValid = b[0]&0x80 != 0
		s.Info = uint64(binary.BigEndian.Uint32(b[3:]))
		if len(b) >= 18 && b[15]&0x80 != 0 {
			s.SKSValid = true
			copy(s.SKS[:], b[15:18])
		}
		return s, true
	case 0x72, 0x73:
		s.Descriptor = true
		s.Key, s.ASC, s.ASCQ = b[1]&0x0F, b[2], b[3]
		end := min(len(b), 8+int(b[7]))
		for p := 8; p+2 <= end; {
			l := int(b[p+1])
			if p+2+l > end {
				return s, false
			}
			switch b[p] {
			case 0x00:
				if l >= 10 {
					s.InfoValid = b[p+2]&0x80 != 0
					s.Info = binary.BigEndian.Uint64(b[p+4:])
				}
			case 0x02:
				if l >= 6 && b[p+4]&0x80 != 0 {
					s.SKSValid = true
					copy(s.SKS[:], b[p+4:p+7])
				}
			}
			p += 2 + l
		}
		return s, true
	}
	return s, false
}
