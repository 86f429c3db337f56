package scsi

import "math/bits"

// Operation codes (SPC-4 Annex E, SBC-3 §5).
const (
	opTestUnitReady        = 0x00
	opRequestSense         = 0x03
	opRead6                = 0x08
	opWrite6               = 0x0A
	opInquiry              = 0x12
	opModeSelect6          = 0x15
	opReserve6             = 0x16
	opRelease6             = 0x17
	opModeSense6           = 0x1A
	opStartStopUnit        = 0x1B
	opPreventAllow         = 0x1E
	opReadCapacity10       = 0x25
	opRead10               = 0x28
	opWrite10              = 0x2A
	opWriteAndVerify10     = 0x2E
	opVerify10             = 0x2F
	opPreFetch10           = 0x34
	opSyncCache10          = 0x35
	opWriteSame10          = 0x41
	opUnmap                = 0x42
	opModeSelect10         = 0x55
	opReserve10            = 0x56
	opRelease10            = 0x57
	opModeSense10          = 0x5A
	opPersistentReserveIn  = 0x5E
	opPersistentReserveOut = 0x5F
	opRead16               = 0x88
	opCompareAndWrite      = 0x89
	opWrite16              = 0x8A
	opWriteAndVerify16     = 0x8E
	opVerify16             = 0x8F
	opPreFetch16           = 0x90
	opSyncCache16          = 0x91
	opWriteSame16          = 0x93
	opServiceActionIn16    = 0x9E
	opReportLUNs           = 0xA0
	opMaintenanceIn        = 0xA3
	opMaintenanceOut       = 0xA4
	opRead12               = 0xA8
	opWrite12              = 0xAA
	opWriteAndVerify12     = 0xAE
	opVerify12             = 0xAF
)

// Service actions.
const (
	saReadCapacity16  = 0x10 // SERVICE ACTION IN(16)
	saGetLBAStatus    = 0x12 // SERVICE ACTION IN(16)
	saReportTPG       = 0x0A // MAINTENANCE IN
	saReportOpcodes   = 0x0C // MAINTENANCE IN
	saReportTMFs      = 0x0D // MAINTENANCE IN
	saReportTimestamp = 0x0F // MAINTENANCE IN
	saSetTPG          = 0x0A // MAINTENANCE OUT
)

// opEntry is one row of the opcode table: it drives CDB validation
// (length and the CDB usage data mask), dispatch and REPORT SUPPORTED
// OPERATION CODES.
type opEntry struct {
	op    byte
	sa    uint16 // service action, when hasSA
	hasSA bool
	name  string
	// usage is the CDB USAGE DATA of SPC-4 §6.35.3 (table 294): its length
	// is the CDB length and each set bit is a bit the device server
	// evaluates. Byte 0 is the opcode. A CDB bit set outside the mask is an
	// INVALID FIELD IN CDB pointing at that bit.
	usage []byte
	// protect: byte 1 bits 7:5 are the 3-bit RDPROTECT / WRPROTECT /
	// VRPROTECT field (SBC-3), unsupported here; a bit set in it is
	// reported with the bit pointer at bit 7, the field's leftmost bit
	// (SPC-4 §4.5.2.4.2).
	protect bool
	exec    func(*cmdCtx) failure
	// nominal and recommended command timeouts, seconds (the RCTD command
	// timeouts descriptor, SPC-4 §6.35.4).
	nominal, recommended uint32
}

// opTable indexes the entries.
type opTable struct {
	plain [256]*opEntry
	sa    [256][]*opEntry // opcodes with service actions, by SA
	all   []*opEntry      // in order of opcode, then service action
}

// lookup finds the entry for cdb. Unknown opcodes are INVALID COMMAND
// OPERATION CODE; unknown service actions of a known opcode are INVALID
// FIELD IN CDB pointing at the SERVICE ACTION field (byte 1, bit 4).
func (t *opTable) lookup(cdb []byte) (*opEntry, failure) {
	op := cdb[0]
	if e := t.plain[op]; e != nil {
		return e, ok
	}
	list := t.sa[op]
	if list == nil {
		return nil, fail(ReasonInvalidOpcode)
	}
	if len(cdb) < 2 {
		return nil, badCDB(0, -1)
	}
	sa := uint16(cdb[1] & 0x1F)
	for _, e := range list {
		if e.sa == sa {
			return e, ok
		}
	}
	return nil, badCDB(1, 4)
}

// validate checks the CDB length and that no bit outside the usage mask is
// set (SPC-4 §4.3.2: reserved fields and unsupported options are INVALID
// FIELD IN CDB; the NACA and LINK bits of the CONTROL byte included, since
// neither is supported).
func (e *opEntry) validate(cdb []byte) failure {
	if len(cdb) < len(e.usage) {
		return badCDB(len(cdb)-1, -1)
	}
	for i := 1; i < len(e.usage); i++ {
		if extra := cdb[i] &^ e.usage[i]; extra != 0 {
			bit := bits.Len8(extra) - 1
			if i == 1 && bit >= 5 && e.protect {
				bit = 7
			}
			return badCDB(i, bit)
		}
	}
	return ok
}

// cdbLen returns the CDB length in bytes.
func (e *opEntry) cdbLen() int { return len(e.usage) }

// buildOpTable assembles the one opcode table. Usage masks are written out
// from the CDB layouts of SPC-4 and SBC-3 (clause given per row); fields the
// core does not support (RDPROTECT/WRPROTECT, ANCHOR, NACA, LINK, obsolete
// bits) are left out so a non-zero value is rejected.
func buildOpTable() *opTable {
	const grp = 0x3F // GROUP NUMBER (SBC-3: bits 4:0; bit 5 accepted too)
	rows := []opEntry{
		// SPC-4 §6.47 TEST UNIT READY.
		{op: opTestUnitReady, name: "TEST UNIT READY", usage: []byte{0x00, 0, 0, 0, 0, 0}, exec: execTestUnitReady},
		// SPC-4 §6.39 REQUEST SENSE: DESC (byte 1 bit 0), ALLOCATION LENGTH (4).
		{op: opRequestSense, name: "REQUEST SENSE", usage: []byte{0x03, 0x01, 0, 0, 0xFF, 0}, exec: execRequestSense},
		// SBC-3 §5.13 READ(6): LBA 21 bits (1..3), TRANSFER LENGTH (4).
		{op: opRead6, name: "READ(6)", usage: []byte{0x08, 0x1F, 0xFF, 0xFF, 0xFF, 0}, exec: execRead},
		// SBC-3 §5.34 WRITE(6).
		{op: opWrite6, name: "WRITE(6)", usage: []byte{0x0A, 0x1F, 0xFF, 0xFF, 0xFF, 0}, exec: execWrite},
		// SPC-4 §6.6 INQUIRY: EVPD (1 bit 0), PAGE CODE (2), ALLOCATION LENGTH (3..4).
		{op: opInquiry, name: "INQUIRY", usage: []byte{0x12, 0x01, 0xFF, 0xFF, 0xFF, 0}, exec: execInquiry},
		// SPC-4 §6.9 MODE SELECT(6): PF (1 bit 4), SP (1 bit 0), PARAMETER LIST LENGTH (4).
		{op: opModeSelect6, name: "MODE SELECT(6)", usage: []byte{0x15, 0x11, 0, 0, 0xFF, 0}, exec: execModeSelect},
		// SPC-4 §6.11 MODE SENSE(6): DBD (1 bit 3), PC+PAGE CODE (2), SUBPAGE (3), ALLOCATION LENGTH (4).
		{op: opModeSense6, name: "MODE SENSE(6)", usage: []byte{0x1A, 0x08, 0xFF, 0xFF, 0xFF, 0}, exec: execModeSense},
		// SBC-3 §5.25 START STOP UNIT: IMMED, POWER CONDITION MODIFIER, POWER CONDITION, NO_FLUSH, LOEJ, START.
		{op: opStartStopUnit, name: "START STOP UNIT", usage: []byte{0x1B, 0x01, 0, 0x0F, 0xF7, 0}, exec: execStartStop},
		// SPC-4 §6.13 PREVENT ALLOW MEDIUM REMOVAL: PREVENT (4 bits 1:0).
		{op: opPreventAllow, name: "PREVENT ALLOW MEDIUM REMOVAL", usage: []byte{0x1E, 0, 0, 0, 0x03, 0}, exec: execPreventAllow},
		// SBC-3 §5.15 READ CAPACITY(10): LBA (2..5), PMI (8 bit 0).
		{op: opReadCapacity10, name: "READ CAPACITY(10)", usage: []byte{0x25, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, 0}, exec: execReadCapacity10},
		// SBC-3 §5.9 READ(10): DPO, FUA, RARC, FUA_NV (1 bits 4..1); FUA_NV
		// needs no action (no non-volatile cache).
		{op: opRead10, name: "READ(10)", usage: []byte{0x28, 0x1E, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execRead},
		// SBC-3 §5.31 WRITE(10): DPO, FUA, FUA_NV (1 bits 4, 3, 1).
		{op: opWrite10, name: "WRITE(10)", usage: []byte{0x2A, 0x1A, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execWrite},
		// SBC-3 §5.36 WRITE AND VERIFY(10): DPO, BYTCHK (1 bit 1).
		{op: opWriteAndVerify10, name: "WRITE AND VERIFY(10)", usage: []byte{0x2E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execWriteAndVerify},
		// SBC-3 §5.27 VERIFY(10): DPO, BYTCHK (1 bits 2:1).
		{op: opVerify10, name: "VERIFY(10)", usage: []byte{0x2F, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execVerify},
		// SBC-3 §5.7 PRE-FETCH(10): IMMED (1 bit 1).
		{op: opPreFetch10, name: "PRE-FETCH(10)", usage: []byte{0x34, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execPreFetch},
		// SBC-3 §5.22 SYNCHRONIZE CACHE(10): SYNC_NV (obsolete, accepted), IMMED.
		{op: opSyncCache10, name: "SYNCHRONIZE CACHE(10)", usage: []byte{0x35, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execSyncCache, nominal: 10, recommended: 60},
		// SBC-3 §5.42 WRITE SAME(10): UNMAP (1 bit 3).
		{op: opWriteSame10, name: "WRITE SAME(10)", usage: []byte{0x41, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0xFF, 0xFF, 0}, exec: execWriteSame, nominal: 10, recommended: 60},
		// SBC-3 §5.28 UNMAP: PARAMETER LIST LENGTH (7..8).
		{op: opUnmap, name: "UNMAP", usage: []byte{0x42, 0, 0, 0, 0, 0, grp, 0xFF, 0xFF, 0}, exec: execUnmap, nominal: 10, recommended: 60},
		// SPC-4 §6.10 MODE SELECT(10).
		{op: opModeSelect10, name: "MODE SELECT(10)", usage: []byte{0x55, 0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0}, exec: execModeSelect},
		// SPC-4 §6.12 MODE SENSE(10): LLBAA (1 bit 4), DBD (1 bit 3).
		{op: opModeSense10, name: "MODE SENSE(10)", usage: []byte{0x5A, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0}, exec: execModeSense},
		// SBC-3 §5.11 READ(16).
		{op: opRead16, name: "READ(16)", usage: []byte{0x88, 0x1E, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execRead},
		// SBC-3 §5.2 COMPARE AND WRITE: DPO, FUA (1 bits 4,3), NUMBER OF LOGICAL BLOCKS (13).
		{op: opCompareAndWrite, name: "COMPARE AND WRITE", usage: []byte{0x89, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, grp, 0}, exec: execCompareAndWrite},
		// SBC-3 §5.33 WRITE(16).
		{op: opWrite16, name: "WRITE(16)", usage: []byte{0x8A, 0x1A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execWrite},
		// SBC-3 §5.38 WRITE AND VERIFY(16).
		{op: opWriteAndVerify16, name: "WRITE AND VERIFY(16)", usage: []byte{0x8E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execWriteAndVerify},
		// SBC-3 §5.29 VERIFY(16).
		{op: opVerify16, name: "VERIFY(16)", usage: []byte{0x8F, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execVerify},
		// SBC-3 §5.8 PRE-FETCH(16).
		{op: opPreFetch16, name: "PRE-FETCH(16)", usage: []byte{0x90, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execPreFetch},
		// SBC-3 §5.23 SYNCHRONIZE CACHE(16).
		{op: opSyncCache16, name: "SYNCHRONIZE CACHE(16)", usage: []byte{0x91, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execSyncCache, nominal: 10, recommended: 60},
		// SBC-3 §5.43 WRITE SAME(16): UNMAP (1 bit 3), NDOB (1 bit 0).
		{op: opWriteSame16, name: "WRITE SAME(16)", usage: []byte{0x93, 0x09, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execWriteSame, nominal: 10, recommended: 60},
		// SBC-3 §5.16 READ CAPACITY(16): LBA (2..9), ALLOCATION LENGTH (10..13), PMI (14 bit 0).
		{op: opServiceActionIn16, sa: saReadCapacity16, hasSA: true, name: "READ CAPACITY(16)", usage: []byte{0x9E, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0}, exec: execReadCapacity16},
		// SBC-3 §5.6 GET LBA STATUS: STARTING LBA (2..9), ALLOCATION LENGTH (10..13).
		{op: opServiceActionIn16, sa: saGetLBAStatus, hasSA: true, name: "GET LBA STATUS", usage: []byte{0x9E, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execGetLBAStatus},
		// SPC-4 §6.33 REPORT LUNS: SELECT REPORT (2), ALLOCATION LENGTH (6..9).
		{op: opReportLUNs, name: "REPORT LUNS", usage: []byte{0xA0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execReportLUNs},
		// SPC-4 §6.37 REPORT TARGET PORT GROUPS: PARAMETER DATA FORMAT (1 bits 7:5).
		{op: opMaintenanceIn, sa: saReportTPG, hasSA: true, name: "REPORT TARGET PORT GROUPS", usage: []byte{0xA3, 0xFF, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execReportTPG},
		// SPC-4 §6.35 REPORT SUPPORTED OPERATION CODES: RCTD (2 bit 7), REPORTING OPTIONS (2 bits 2:0).
		{op: opMaintenanceIn, sa: saReportOpcodes, hasSA: true, name: "REPORT SUPPORTED OPERATION CODES", usage: []byte{0xA3, 0x1F, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execReportOpcodes},
		// SPC-4 §6.36 REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS: REPD (2 bit 7).
		{op: opMaintenanceIn, sa: saReportTMFs, hasSA: true, name: "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS", usage: []byte{0xA3, 0x1F, 0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execReportTMFs},
		// SPC-4 §6.38 REPORT TIMESTAMP: ALLOCATION LENGTH (6..9).
		{op: opMaintenanceIn, sa: saReportTimestamp, hasSA: true, name: "REPORT TIMESTAMP", usage: []byte{0xA3, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execReportTimestamp},
		// SPC-4 §6.46 SET TARGET PORT GROUPS: PARAMETER LIST LENGTH (6..9).
		{op: opMaintenanceOut, sa: saSetTPG, hasSA: true, name: "SET TARGET PORT GROUPS", usage: []byte{0xA4, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0}, exec: execSetTPG},
		// SBC-3 §5.10 READ(12).
		{op: opRead12, name: "READ(12)", usage: []byte{0xA8, 0x1E, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execRead},
		// SBC-3 §5.32 WRITE(12).
		{op: opWrite12, name: "WRITE(12)", usage: []byte{0xAA, 0x1A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execWrite},
		// SBC-3 §5.37 WRITE AND VERIFY(12).
		{op: opWriteAndVerify12, name: "WRITE AND VERIFY(12)", usage: []byte{0xAE, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execWriteAndVerify},
		// SBC-3 §5.28 VERIFY(12).
		{op: opVerify12, name: "VERIFY(12)", usage: []byte{0xAF, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, grp, 0}, exec: execVerify},
	}
	rows = append(rows, reservationRows()...)
	t := &opTable{}
	for i := range rows {
		e := &rows[i]
		if e.nominal == 0 {
			e.nominal, e.recommended = 1, 30
		}
		switch e.op {
		case opRead10, opRead12, opRead16, opWrite10, opWrite12, opWrite16,
			opWriteAndVerify10, opWriteAndVerify12, opWriteAndVerify16,
			opVerify10, opVerify12, opVerify16, opWriteSame10, opWriteSame16, opCompareAndWrite:
			e.protect = true
		}
		if e.hasSA {
			// SPC-4 §6.35.3: the CDB USAGE DATA holds the service action
			// value itself where the CDB's SERVICE ACTION field (byte 1,
			// bits 4:0) is, as LIO's usage_bits do. lookup has matched
			// those bits exactly, so validate still accepts them.
			e.usage = append([]byte(nil), e.usage...)
			e.usage[1] = e.usage[1]&^0x1F | byte(e.sa)
			t.sa[e.op] = append(t.sa[e.op], e)
		} else {
			t.plain[e.op] = e
		}
	}
	for op := 0; op < 256; op++ {
		if e := t.plain[op]; e != nil {
			t.all = append(t.all, e)
		}
		t.all = append(t.all, sortedBySA(t.sa[op])...)
	}
	return t
}

func sortedBySA(l []*opEntry) []*opEntry {
	out := append([]*opEntry(nil), l...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].sa < out[j-1].sa; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
