package pr

import "testing"

func TestClassify(t *testing.T) {
	// Classes from SPC-4 table 45, SBC-3 table 13 and SPC-2 annex B.
	for _, tc := range []struct {
		name string
		cdb  []byte
		want Class
	}{
		{"INQUIRY", []byte{0x12, 0, 0, 0, 36, 0}, ClassUnrestricted},
		{"REPORT LUNS", []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, ClassUnrestricted},
		{"REQUEST SENSE", []byte{0x03, 0, 0, 0, 18, 0}, ClassUnrestricted},
		{"LOG SENSE", []byte{0x4D, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassUnrestricted},
		{"READ CAPACITY(10)", []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassUnrestricted},
		{"READ CAPACITY(16)", []byte{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, ClassUnrestricted},
		{"REPORT TARGET PORT GROUPS", []byte{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassUnrestricted},
		{"PREVENT ALLOW, PREVENT=0", []byte{0x1E, 0, 0, 0, 0, 0}, ClassUnrestricted},
		{"PREVENT ALLOW, PREVENT=1", []byte{0x1E, 0, 0, 0, 1, 0}, ClassWrite},
		{"START STOP, START=1", []byte{0x1B, 0, 0, 0, 0x01, 0}, ClassUnrestricted},
		{"START STOP, START=0", []byte{0x1B, 0, 0, 0, 0x00, 0}, ClassWrite},
		{"START STOP, power condition", []byte{0x1B, 0, 0, 0, 0x31, 0}, ClassWrite},
		{"TEST UNIT READY", []byte{0, 0, 0, 0, 0, 0}, ClassAllowed},
		{"READ MEDIA SERIAL NUMBER", []byte{0xAB, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassAllowed},
		{"REPORT TIMESTAMP", []byte{0xA3, 0x0F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassAllowed},
		{"PERSISTENT RESERVE IN", []byte{0x5E, 0, 0, 0, 0, 0, 0, 0, 8, 0}, ClassPersistentReserve},
		{"PERSISTENT RESERVE OUT", []byte{0x5F, 0, 0, 0, 0, 0, 0, 0, 24, 0}, ClassPersistentReserve},
		{"RESERVE(6)", reserve6, ClassReserveRelease},
		{"RELEASE(10)", release10, ClassReserveRelease},
		{"READ(6)", []byte{0x08, 0, 0, 0, 1, 0}, ClassRead},
		{"READ(10)", []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, ClassRead},
		{"READ(16)", make16(0x88, 0), ClassRead},
		{"VERIFY(16)", make16(0x8F, 0), ClassRead},
		{"PRE-FETCH(10)", []byte{0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassRead},
		{"GET LBA STATUS", make16(0x9E, 0x12), ClassRead},
		{"MODE SENSE(6)", []byte{0x1A, 0, 0x3F, 0, 192, 0}, ClassRead},
		{"REPORT SUPPORTED OPERATION CODES", []byte{0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassRead},
		{"READ(32)", read32(), ClassRead},
		{"WRITE(10)", []byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, ClassWrite},
		{"WRITE(16)", make16(0x8A, 0), ClassWrite},
		{"WRITE SAME(16)", make16(0x93, 0), ClassWrite},
		{"UNMAP", []byte{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}, ClassWrite},
		{"SYNCHRONIZE CACHE(10)", []byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ClassWrite},
		{"COMPARE AND WRITE", make16(0x89, 0), ClassWrite},
		{"MODE SELECT(10)", []byte{0x55, 0x10, 0, 0, 0, 0, 0, 0, 24, 0}, ClassWrite},
		{"READ LONG(16)", make16(0x9E, 0x11), ClassWrite},
		{"RECEIVE COPY RESULTS", make16(0x84, 0), ClassWrite},
		{"FORMAT UNIT", []byte{0x04, 0, 0, 0, 0, 0}, ClassWrite},
		{"unknown opcode", []byte{0xC0, 0, 0, 0, 0, 0}, ClassWrite},
		{"empty", nil, ClassWrite},
		{"truncated PREVENT ALLOW", []byte{0x1E, 0}, ClassWrite},
		{"truncated MAINTENANCE IN", []byte{0xA3}, ClassWrite},
	} {
		if got := Classify(tc.cdb); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func make16(op, sa byte) []byte {
	b := make([]byte, 16)
	b[0], b[1] = op, sa
	return b
}

// read32 is READ(32): VARIABLE LENGTH (7Fh), ADDITIONAL CDB LENGTH 18h,
// service action 0009h in bytes 8-9.
func read32() []byte {
	b := make([]byte, 32)
	b[0], b[7], b[9] = 0x7F, 0x18, 0x09
	return b
}
