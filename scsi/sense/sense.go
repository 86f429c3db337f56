// Package sense is the SCSI status and sense data vocabulary: status codes
// (SAM-5 §5.3.1), sense keys (SPC-4 §4.5.6), additional sense code names
// (SPC-4 Annex D), and the encoder and decoder of fixed (70h/71h) and
// descriptor (72h/73h) format sense data (SPC-4 §4.5).
//
// It is a leaf: the target's SCSI core builds its CHECK CONDITION sense data
// with it and the initiator decodes what a target returns with it. It knows
// nothing of commands, logical units or transports.
package sense

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// SCSI status codes (SAM-5 §5.3.1, table 35).
const (
	StatusGood                uint8 = 0x00
	StatusCheckCondition      uint8 = 0x02
	StatusConditionMet        uint8 = 0x04
	StatusBusy                uint8 = 0x08
	StatusReservationConflict uint8 = 0x18
	StatusTaskSetFull         uint8 = 0x28
	StatusACAActive           uint8 = 0x30
	StatusTaskAborted         uint8 = 0x40
)

// StatusName names a SCSI status byte, e.g. "CHECK CONDITION", or
// "status 0x22" for a code SAM-5 does not define.
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

// Sense keys (SPC-4 §4.5.6, table 47).
const (
	KeyNoSense        uint8 = 0x0
	KeyRecoveredError uint8 = 0x1
	KeyNotReady       uint8 = 0x2
	KeyMediumError    uint8 = 0x3
	KeyHardwareError  uint8 = 0x4
	KeyIllegalRequest uint8 = 0x5
	KeyUnitAttention  uint8 = 0x6
	KeyDataProtect    uint8 = 0x7
	KeyBlankCheck     uint8 = 0x8
	KeyVendorSpecific uint8 = 0x9
	KeyCopyAborted    uint8 = 0xA
	KeyAbortedCommand uint8 = 0xB
	KeyVolumeOverflow uint8 = 0xD
	KeyMiscompare     uint8 = 0xE
	KeyCompleted      uint8 = 0xF
)

var keyNames = [16]string{
	"NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR", "HARDWARE ERROR",
	"ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT", "BLANK CHECK", "VENDOR SPECIFIC",
	"COPY ABORTED", "ABORTED COMMAND", "RESERVED", "VOLUME OVERFLOW", "MISCOMPARE", "COMPLETED",
}

// KeyName names a sense key (its low nibble).
func KeyName(k uint8) string { return keyNames[k&0xF] }

// ascNames holds the additional sense codes a target commonly returns
// (SPC-4 Annex D, table D.1), keyed by ASC<<8|ASCQ.
var ascNames = map[uint16]string{
	0x0000: "NO ADDITIONAL SENSE INFORMATION",
	0x0401: "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
	0x0402: "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
	0x0403: "LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED",
	0x0C00: "WRITE ERROR",
	0x0E03: "INVALID FIELD IN COMMAND INFORMATION UNIT",
	0x1100: "UNRECOVERED READ ERROR",
	0x1A00: "PARAMETER LIST LENGTH ERROR",
	0x1D00: "MISCOMPARE DURING VERIFY OPERATION",
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
	0x2907: "I_T NEXUS LOSS OCCURRED",
	0x2A01: "MODE PARAMETERS CHANGED",
	0x2A03: "RESERVATIONS PREEMPTED",
	0x2A04: "RESERVATIONS RELEASED",
	0x2A05: "REGISTRATIONS PREEMPTED",
	0x2A09: "CAPACITY DATA HAS CHANGED",
	0x2F00: "COMMANDS CLEARED BY ANOTHER INITIATOR",
	0x3900: "SAVING PARAMETERS NOT SUPPORTED",
	0x3A00: "MEDIUM NOT PRESENT",
	0x3F0E: "REPORTED LUNS DATA HAS CHANGED",
	0x4400: "INTERNAL TARGET FAILURE",
	0x4700: "SCSI PARITY ERROR",
	0x4B00: "DATA PHASE ERROR",
	0x4E00: "OVERLAPPED COMMANDS ATTEMPTED",
	0x5300: "MEDIA LOAD OR EJECT FAILED",
	0x5501: "SYSTEM BUFFER FULL",
	0x5503: "INSUFFICIENT RESOURCES",
	0x5504: "INSUFFICIENT REGISTRATION RESOURCES",
}

// ASCName names an additional sense code and qualifier, or returns "" when
// the pair is not in the table.
func ASCName(asc, ascq uint8) string { return ascNames[uint16(asc)<<8|uint16(ascq)] }

// FixedLen is the length of the fixed format sense data Data.AppendTo
// writes, bytes (SPC-4 §4.5.3: additional sense length 10).
const FixedLen = 18

// Data is sense data, decoded or to encode.
type Data struct {
	// Key is the sense key (low nibble); ASC and ASCQ the additional sense
	// code and qualifier.
	Key, ASC, ASCQ uint8
	// Descriptor selects (encoding) or reports (decoding) descriptor format,
	// response code 72h/73h; otherwise fixed format 70h/71h.
	Descriptor bool
	// Deferred reports a deferred error (response code 71h/73h).
	Deferred bool
	// InfoValid/Info: the INFORMATION field (the VALID bit and bytes 3..6
	// in fixed format; the information descriptor, SPC-4 §4.5.2.2), e.g.
	// the first LBA in error. Fixed format holds 32 bits only.
	InfoValid bool
	Info      uint64
	// SKSValid/SKS: the 3 sense-key-specific bytes (SPC-4 §4.5.2.4; SKSV is
	// bit 7 of SKS[0]).
	SKSValid bool
	SKS      [3]byte
	// Truncated reports, when decoding, sense data shorter than its
	// additional sense length says (or a fixed format one without ASC and
	// ASCQ, or a descriptor running past the end): what was present is
	// decoded. SPC-4 allows a target to truncate sense data to the
	// allocation length, so an initiator still uses it.
	Truncated bool
}

// FieldPointer returns the sense-key-specific bytes of a field pointer
// (SPC-4 §4.5.2.4.2): SKSV set, C/D set when the field is in the CDB
// (otherwise the parameter list), the byte offset of the field, and the
// bit pointer when bit is 0..7 (BPV; -1 points at the whole byte).
func FieldPointer(inCDB bool, byteOff uint16, bit int) [3]byte {
	var b [3]byte
	b[0] = 0x80
	if inCDB {
		b[0] |= 0x40
	}
	if bit >= 0 {
		b[0] |= 0x08 | byte(bit&7)
	}
	binary.BigEndian.PutUint16(b[1:], byteOff)
	return b
}

// Size returns the encoded length of d in bytes.
func (d *Data) Size() int {
	if !d.Descriptor {
		return FixedLen
	}
	n := 8
	if d.InfoValid {
		n += 12
	}
	if d.SKSValid {
		n += 8
	}
	return n
}

// AppendTo appends d as fixed (SPC-4 §4.5.3) or descriptor (SPC-4 §4.5.2)
// format sense data. In fixed format an Info over 32 bits is left out with
// VALID 0 (it needs descriptor format).
func (d *Data) AppendTo(b []byte) []byte {
	n := d.Size()
	b = append(b, make([]byte, n)...)
	p := b[len(b)-n:]
	code := byte(0x70)
	if d.Descriptor {
		code = 0x72
	}
	if d.Deferred {
		code++
	}
	p[0] = code
	if !d.Descriptor {
		if d.InfoValid && d.Info <= 0xFFFFFFFF {
			p[0] |= 0x80
			binary.BigEndian.PutUint32(p[3:], uint32(d.Info))
		}
		p[2] = d.Key & 0xF
		p[7] = FixedLen - 8
		p[12], p[13] = d.ASC, d.ASCQ
		if d.SKSValid {
			copy(p[15:], d.SKS[:])
		}
		return b
	}
	p[1], p[2], p[3] = d.Key&0xF, d.ASC, d.ASCQ
	p[7] = byte(n - 8)
	o := 8
	if d.InfoValid {
		// Information sense data descriptor (SPC-4 §4.5.2.2): type 00h,
		// additional length 0Ah, VALID.
		p[o], p[o+1], p[o+2] = 0x00, 0x0A, 0x80
		binary.BigEndian.PutUint64(p[o+4:], d.Info)
		o += 12
	}
	if d.SKSValid {
		// Sense key specific sense data descriptor (SPC-4 §4.5.2.3): type
		// 02h, additional length 06h.
		p[o], p[o+1] = 0x02, 0x06
		copy(p[o+4:], d.SKS[:])
	}
	return b
}

// ErrNotSense reports bytes that are not sense data: a response code other
// than 70h-73h, or too short to hold the sense key.
var ErrNotSense = errors.New("sense: not fixed or descriptor format sense data")

// Parse decodes fixed or descriptor format sense data. It fails with
// ErrNotSense when b is not sense data; sense data cut short decodes with
// Truncated set.
func Parse(b []byte) (Data, error) {
	var d Data
	if len(b) < 1 {
		return d, ErrNotSense
	}
	code := b[0] & 0x7F
	d.Deferred = code == 0x71 || code == 0x73
	switch code {
	case 0x70, 0x71:
		// Fixed format (SPC-4 §4.5.3, table 51): key at 2, INFORMATION at
		// 3..6 (VALID bit 7 of byte 0), ASC/ASCQ at 12/13, SKS at 15..17.
		if len(b) < 3 {
			return d, ErrNotSense
		}
		d.Key = b[2] & 0xF
		if len(b) >= 7 && b[0]&0x80 != 0 {
			d.InfoValid, d.Info = true, uint64(binary.BigEndian.Uint32(b[3:7]))
		}
		if len(b) < 14 || len(b) < 8+int(b[7]) {
			d.Truncated = true
		}
		if len(b) >= 14 {
			d.ASC, d.ASCQ = b[12], b[13]
		}
		if len(b) >= 18 && b[15]&0x80 != 0 {
			d.SKSValid = true
			copy(d.SKS[:], b[15:18])
		}
		return d, nil
	case 0x72, 0x73:
		// Descriptor format (SPC-4 §4.5.2, table 35), descriptors from
		// byte 8.
		if len(b) < 4 {
			return d, ErrNotSense
		}
		d.Descriptor = true
		d.Key, d.ASC, d.ASCQ = b[1]&0xF, b[2], b[3]
		if len(b) < 8 {
			d.Truncated = true
			return d, nil
		}
		end := 8 + int(b[7])
		if end > len(b) {
			d.Truncated, end = true, len(b)
		}
		for p := 8; p < end; {
			if p+2 > end || p+2+int(b[p+1]) > end {
				d.Truncated = true
				break
			}
			l := int(b[p+1])
			switch b[p] {
			case 0x00:
				if l >= 0x0A {
					d.InfoValid = b[p+2]&0x80 != 0
					d.Info = binary.BigEndian.Uint64(b[p+4:])
				}
			case 0x02:
				if l >= 6 && b[p+4]&0x80 != 0 {
					d.SKSValid = true
					copy(d.SKS[:], b[p+4:p+7])
				}
			}
			p += 2 + l
		}
		return d, nil
	}
	return d, ErrNotSense
}

// String describes d, e.g. "ILLEGAL REQUEST (key 0x5), asc/ascq 24h/00h
// INVALID FIELD IN CDB, information 0x10".
func (d Data) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s (key %#x), asc/ascq %02xh/%02xh", KeyName(d.Key), d.Key, d.ASC, d.ASCQ)
	if n := ASCName(d.ASC, d.ASCQ); n != "" {
		s.WriteString(" " + n)
	}
	if d.InfoValid {
		fmt.Fprintf(&s, ", information %#x", d.Info)
	}
	if d.Deferred {
		s.WriteString(" (deferred)")
	}
	return s.String()
}
