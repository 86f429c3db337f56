package scsi

import "encoding/binary"

// WritesMedium reports whether the command in cdb may modify the medium of
// a direct-access logical unit, so that a write-protected mapping must
// refuse it with DATA PROTECT, WRITE PROTECTED (SBC-3 §4.11). It covers the
// SBC-3/SBC-4 writes (WRITE, WRITE AND VERIFY, WRITE SAME, ORWRITE, WRITE
// ATOMIC, WRITE STREAM, WRITE SCATTERED, WRITE LONG, XDWRITE, XPWRITE, the
// 32-byte variable-length forms), UNMAP, COMPARE AND WRITE, FORMAT UNIT,
// SANITIZE and REASSIGN BLOCKS; caching and configuration commands
// (SYNCHRONIZE CACHE, MODE SELECT, PERSISTENT RESERVE OUT) are not medium
// writes. An empty CDB reports false.
func WritesMedium(cdb []byte) bool {
	if len(cdb) == 0 {
		return false
	}
	switch cdb[0] {
	case opWrite6, opWrite10, opWrite12, opWrite16,
		opWriteAndVerify10, opWriteAndVerify12, opWriteAndVerify16,
		opWriteSame10, opWriteSame16, opUnmap, opCompareAndWrite,
		0x04, // FORMAT UNIT
		0x07, // REASSIGN BLOCKS
		0x3F, // WRITE LONG(10)
		0x48, // SANITIZE
		0x50, // XDWRITE(10)
		0x51, // XPWRITE(10)
		0x53, // XDWRITEREAD(10)
		0x8B, // ORWRITE(16)
		0x9A, // WRITE STREAM(16)
		0x9C: // WRITE ATOMIC(16)
		return true
	case 0x9F: // SERVICE ACTION OUT(16)
		// WRITE LONG(16) 11h, WRITE SCATTERED(16) 12h.
		sa := byte(0)
		if len(cdb) > 1 {
			sa = cdb[1] & 0x1F
		}
		return sa == 0x11 || sa == 0x12
	case 0x7F: // variable length CDB: service action in bytes 8..9
		if len(cdb) < 10 {
			return false
		}
		switch binary.BigEndian.Uint16(cdb[8:10]) {
		case 0x0004, // XDWRITE(32)
			0x0006, // XPWRITE(32)
			0x0007, // XDWRITEREAD(32)
			0x000B, // WRITE(32)
			0x000C, // WRITE AND VERIFY(32)
			0x000D, // WRITE SAME(32)
			0x000E, // ORWRITE(32)
			0x000F, // WRITE ATOMIC(32)
			0x0010, // WRITE STREAM(32)
			0x0011: // WRITE SCATTERED(32)
			return true
		}
	}
	return false
}
