package pr

// Class is how a command is treated by reservations; Classify computes it
// from the CDB and State.Check applies it. In the tables below, "holder" is
// the reservation holder (always allowed), "registered" a registered nexus
// that does not hold the reservation, "other" an unregistered nexus.
type Class uint8

const (
	// ClassWrite: media-access write class and everything not listed
	// elsewhere (conflict by default). Conflicts under an SPC-2 reservation
	// of another nexus; under WR_EX and EX_AC for every non-holder; under the
	// RO and AR types for unregistered nexuses only.
	ClassWrite Class = iota
	// ClassRead: media-access read class (READ, VERIFY, PRE-FETCH, GET LBA
	// STATUS, READ DEFECT DATA, ...) and the SPC-4 commands that table 45
	// lets through Write Exclusive (MODE SENSE, READ ATTRIBUTE, READ BUFFER,
	// RECEIVE DIAGNOSTIC RESULTS, REPORT SUPPORTED OPERATION CODES, REPORT
	// SUPPORTED TASK MANAGEMENT FUNCTIONS, MANAGEMENT PROTOCOL IN, SECURITY
	// PROTOCOL IN; REPORT CAPABILITIES ALLOW COMMANDS=011b). Conflicts under an SPC-2
	// reservation of another nexus; under EX_AC for every non-holder; under
	// EX_AC_RO and EX_AC_AR for unregistered nexuses; never under WR_EX,
	// WR_EX_RO, WR_EX_AR.
	ClassRead
	// ClassAllowed: allowed under every persistent reservation, but
	// conflicts with an SPC-2 reservation of another nexus (TEST UNIT READY,
	// ACCESS CONTROL IN/OUT, READ MEDIA SERIAL NUMBER, REPORT ALIASES, ...).
	ClassAllowed
	// ClassUnrestricted: allowed under every reservation, SPC-2 included
	// (INQUIRY, REPORT LUNS, REQUEST SENSE, LOG SENSE, READ CAPACITY, REPORT
	// TARGET PORT GROUPS, PREVENT ALLOW MEDIUM REMOVAL with PREVENT=0, START
	// STOP UNIT with START=1 and POWER CONDITION=0).
	ClassUnrestricted
	// ClassPersistentReserve: PERSISTENT RESERVE IN/OUT; State.In and
	// State.Out decide.
	ClassPersistentReserve
	// ClassReserveRelease: RESERVE(6)/(10), RELEASE(6)/(10);
	// State.Reserve and State.Release decide.
	ClassReserveRelease
)

func (c Class) String() string {
	switch c {
	case ClassWrite:
		return "write"
	case ClassRead:
		return "read"
	case ClassAllowed:
		return "allowed"
	case ClassUnrestricted:
		return "unrestricted"
	case ClassPersistentReserve:
		return "persistent-reserve"
	case ClassReserveRelease:
		return "reserve-release"
	}
	return "invalid"
}

// Classify returns the reservation class of a CDB, from SPC-4 §5.13.1
// table 45 (SPC commands), SBC-3 §4.17 table 13 (block commands) and SPC-2
// annex B (SPC-2 reservations). It looks at the operation code and, where the
// tables distinguish them, the service action (MAINTENANCE IN, SERVICE
// ACTION IN(12)/(16), VARIABLE LENGTH) and the PREVENT and START/POWER
// CONDITION fields. Unknown operation codes, and CDBs too short to hold the
// field needed, are ClassWrite. It never panics.
func Classify(cdb []byte) Class {
	if len(cdb) == 0 {
		return ClassWrite
	}
	at := func(i int) byte {
		if i < len(cdb) {
			return cdb[i]
		}
		return 0xff
	}
	sa := at(1) & 0x1f
	switch cdb[0] {
	case 0x12, // INQUIRY
		0xA0, // REPORT LUNS
		0x03, // REQUEST SENSE
		0x4D, // LOG SENSE
		0x25: // READ CAPACITY(10)
		return ClassUnrestricted
	case 0x1E: // PREVENT ALLOW MEDIUM REMOVAL: PREVENT field, byte 4 bits 1:0
		if len(cdb) >= 6 && cdb[4]&0x03 == 0 {
			return ClassUnrestricted
		}
		return ClassWrite
	case 0x1B: // START STOP UNIT: POWER CONDITION byte 4 bits 7:4, START bit 0
		if len(cdb) >= 6 && cdb[4]&0x01 == 1 && cdb[4]>>4 == 0 {
			return ClassUnrestricted
		}
		return ClassWrite
	case 0x00, // TEST UNIT READY
		0x86, // ACCESS CONTROL IN
		0x87: // ACCESS CONTROL OUT
		return ClassAllowed
	case OpPersistentReserveIn, OpPersistentReserveOut:
		return ClassPersistentReserve
	case OpReserve6, OpRelease6, OpReserve10, OpRelease10:
		return ClassReserveRelease
	case 0x08, 0x28, 0xA8, 0x88, // READ(6), (10), (12), (16)
		0x34, 0x90, // PRE-FETCH(10), (16)
		0x2F, 0xAF, 0x8F, // VERIFY(10), (12), (16)
		0x37, 0xB7, // READ DEFECT DATA(10), (12)
		0x1A, 0x5A, // MODE SENSE(6), (10)
		0x3C, 0x9B, // READ BUFFER(10), (16)
		0x8C, // READ ATTRIBUTE
		0x1C, // RECEIVE DIAGNOSTIC RESULTS
		0xA2: // SECURITY PROTOCOL IN
		return ClassRead
	case 0x9E: // SERVICE ACTION IN(16)
		switch sa {
		case 0x10: // READ CAPACITY(16)
			return ClassUnrestricted
		case 0x12, 0x13: // GET LBA STATUS, REPORT REFERRALS
			return ClassRead
		}
		return ClassWrite // READ LONG(16) and unknown
	case 0xAB: // SERVICE ACTION IN(12)
		if sa == 0x01 { // READ MEDIA SERIAL NUMBER
			return ClassAllowed
		}
		return ClassWrite
	case 0xA3: // MAINTENANCE IN
		switch sa {
		case 0x0A: // REPORT TARGET PORT GROUPS
			return ClassUnrestricted
		case 0x05, 0x0B, 0x0E, 0x0F: // REPORT IDENTIFYING INFORMATION, ALIASES, PRIORITY, TIMESTAMP
			return ClassAllowed
		case 0x0C, 0x0D, 0x10: // REPORT SUPPORTED OPERATION CODES, ... TMFS, MANAGEMENT PROTOCOL IN
			return ClassRead
		}
		return ClassWrite
	case 0x7F: // VARIABLE LENGTH: service action bytes 8-9
		if len(cdb) >= 10 {
			switch uint16(cdb[8])<<8 | uint16(cdb[9]) {
			case 0x0009, 0x000A: // READ(32), VERIFY(32)
				return ClassRead
			}
		}
		return ClassWrite
	}
	return ClassWrite
}
