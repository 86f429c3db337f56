package scsi

import "github.com/gosrp/gosrp/scsi/sense"

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
	ReasonALUATransitioning                               // 02/04/0A LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION
	ReasonALUAStandby                                     // 02/04/0B LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE
	ReasonALUAUnavailable                                 // 02/04/0C LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE
	ReasonUAALUAChanged                                   // 06/2A/06 ASYMMETRIC ACCESS STATE CHANGED
	numReasons
)

// reasonEntry is one row of the Reason → status/sense table.
type reasonEntry struct {
	status         uint8
	key, asc, ascq uint8
}

// reasonTable is the single mapping from Reason to status and sense codes.
var reasonTable = [numReasons]reasonEntry{
	ReasonNone:                              {sense.StatusGood, 0, 0, 0},
	ReasonInvalidOpcode:                     {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x20, 0x00},
	ReasonInvalidCDBField:                   {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x24, 0x00},
	ReasonInvalidParamField:                 {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x26, 0x00},
	ReasonParamListLength:                   {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x1A, 0x00},
	ReasonInvalidCommandIU:                  {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x0E, 0x03},
	ReasonLBAOutOfRange:                     {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x21, 0x00},
	ReasonLUNNotSupported:                   {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x25, 0x00},
	ReasonSavingNotSupported:                {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x39, 0x00},
	ReasonWriteProtected:                    {sense.StatusCheckCondition, sense.KeyDataProtect, 0x27, 0x00},
	ReasonSoftwareWriteProtected:            {sense.StatusCheckCondition, sense.KeyDataProtect, 0x27, 0x02},
	ReasonSpaceAllocFailed:                  {sense.StatusCheckCondition, sense.KeyDataProtect, 0x27, 0x07},
	ReasonReadError:                         {sense.StatusCheckCondition, sense.KeyMediumError, 0x11, 0x00},
	ReasonWriteError:                        {sense.StatusCheckCondition, sense.KeyMediumError, 0x0C, 0x00},
	ReasonMiscompare:                        {sense.StatusCheckCondition, sense.KeyMiscompare, 0x1D, 0x00},
	ReasonOverlappedCommands:                {sense.StatusCheckCondition, sense.KeyAbortedCommand, 0x4E, 0x00},
	ReasonInternalFailure:                   {sense.StatusCheckCondition, sense.KeyHardwareError, 0x44, 0x00},
	ReasonInvalidRelease:                    {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x26, 0x04},
	ReasonInsufficientRegistrationResources: {sense.StatusCheckCondition, sense.KeyIllegalRequest, 0x55, 0x04},
	ReasonReservationConflict:               {sense.StatusReservationConflict, 0, 0, 0},
	ReasonUAPowerOn:                         {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x29, 0x00},
	ReasonUALUNReset:                        {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x29, 0x03},
	ReasonUAModeChanged:                     {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x01},
	ReasonUAReservationsPreempted:           {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x03},
	ReasonUAReservationsReleased:            {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x04},
	ReasonUARegistrationsPreempted:          {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x05},
	ReasonUACapacityChanged:                 {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x09},
	ReasonUACommandsCleared:                 {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2F, 0x00},
	ReasonUALUNsChanged:                     {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x3F, 0x0E},
	ReasonUAITNexusLoss:                     {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x29, 0x07},
	ReasonALUATransitioning:                 {sense.StatusCheckCondition, sense.KeyNotReady, 0x04, 0x0A},
	ReasonALUAStandby:                       {sense.StatusCheckCondition, sense.KeyNotReady, 0x04, 0x0B},
	ReasonALUAUnavailable:                   {sense.StatusCheckCondition, sense.KeyNotReady, 0x04, 0x0C},
	ReasonUAALUAChanged:                     {sense.StatusCheckCondition, sense.KeyUnitAttention, 0x2A, 0x06},
}

// Status returns the SCSI status byte for r.
func (r Reason) Status() uint8 {
	if r >= numReasons {
		return sense.StatusCheckCondition
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

// senseKeySpecific returns the sense-key-specific field.
func (f failure) senseKeySpecific() ([3]byte, bool) {
	if !f.fieldValid {
		return [3]byte{}, false
	}
	bit := -1
	if f.bitValid {
		bit = int(f.bit)
	}
	return sense.FieldPointer(f.cdField, f.field, bit), true
}

// buildSense encodes f as fixed (SPC-4 §4.5.3, response code 70h) or
// descriptor (SPC-4 §4.5.2, response code 72h) sense data.
func buildSense(f failure, desc bool) []byte {
	d := sense.Data{Descriptor: desc, InfoValid: f.infoValid, Info: f.info}
	d.Key, d.ASC, d.ASCQ = f.reason.SenseCodes()
	d.SKS, d.SKSValid = f.senseKeySpecific()
	return d.AppendTo(nil)
}
