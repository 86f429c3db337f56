package scsi

import "testing"

// The LOGICAL BLOCK ADDRESS and TRANSFER LENGTH fields of the SBC-3 CDB
// layouts, decoded from hand-written CDBs: READ(6)/WRITE(6) keep a 21-bit
// LBA in bytes 1..3 and a one-byte length where 0 means 256 (SBC-3
// §5.11, §5.32); the 10-byte CDBs a 4-byte LBA at 2 and a 2-byte length at
// 7; the 12-byte ones a 4-byte length at 6; the 16-byte ones an 8-byte LBA
// at 2 and a 4-byte length at 10.
func TestLBALenLayouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cdb      []byte
		lba      uint64
		n        uint32
		lenField int
	}{
		{"READ(6) top bits masked, 0 = 256", hx(`08 ff ff ff 00 00`), 0x1FFFFF, 256, 4},
		{"WRITE(6)", hx(`0a 01 02 03 05 00`), 0x010203, 5, 4},
		{"READ(10)", hx(`28 00 12 34 56 78 00 00 10 00`), 0x12345678, 0x10, 7},
		{"READ(10) length 0 is 0", hx(`28 00 00 00 00 01 00 00 00 00`), 1, 0, 7},
		{"WRITE SAME(10)", hx(`41 00 00 00 00 02 00 00 03 00`), 2, 3, 7},
		{"WRITE(12)", hx(`aa 00 ff ff ff ff 00 01 00 00 00 00`), 0xFFFFFFFF, 0x10000, 6},
		{"VERIFY(12)", hx(`af 00 00 00 00 07 00 00 00 09 00 00`), 7, 9, 6},
		{"READ(16)", hx(`88 00 01 02 03 04 05 06 07 08 00 00 01 00 00 00`), 0x0102030405060708, 0x100, 10},
		{"SYNCHRONIZE CACHE(16)", hx(`91 00 ff ff ff ff ff ff ff ff ff ff ff ff 00 00`), 1<<64 - 1, 0xFFFFFFFF, 10},
	} {
		lba, n, lf := lbaLen(tc.cdb)
		if lba != tc.lba || n != tc.n || lf != tc.lenField {
			t.Errorf("%s: lba %#x n %d field %d, want %#x %d %d", tc.name, lba, n, lf, tc.lba, tc.n, tc.lenField)
		}
	}
}
