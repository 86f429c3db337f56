package pr

import (
	"path/filepath"
	"testing"
)

func TestReasonStatusAndSense(t *testing.T) {
	// SAM-5 table 25 status codes; SPC-4 tables 27/28 sense keys and
	// additional sense codes.
	for _, tc := range []struct {
		r              Reason
		status         uint8
		key, asc, ascq uint8
		hasSense       bool
	}{
		{OK, 0x00, 0, 0, 0, false},
		{ReservationConflict, 0x18, 0, 0, 0, false},
		{InvalidFieldInCDB, 0x02, 0x5, 0x24, 0x00, true},
		{InvalidFieldInParamList, 0x02, 0x5, 0x26, 0x00, true},
		{ParamListLengthError, 0x02, 0x5, 0x1A, 0x00, true},
		{InvalidReleaseOfPersistentReservation, 0x02, 0x5, 0x26, 0x04, true},
		{InsufficientRegistrationResources, 0x02, 0x5, 0x55, 0x04, true},
		{InternalTargetFailure, 0x02, 0x4, 0x44, 0x00, true},
	} {
		key, asc, ascq, ok := tc.r.Sense()
		if tc.r.Status() != tc.status || key != tc.key || asc != tc.asc || ascq != tc.ascq || ok != tc.hasSense {
			t.Errorf("%v: status %#x sense %x/%x/%x %v", tc.r, tc.r.Status(), key, asc, ascq, ok)
		}
		if tc.r.String() == "" {
			t.Errorf("%d has no name", tc.r)
		}
	}
	if s := badCDB(2, 3).String(); s != "INVALID FIELD IN CDB (byte 2 bit 3)" {
		t.Errorf("String %q", s)
	}
}

func TestFilePersistFailure(t *testing.T) {
	// A directory that does not exist: the REGISTER fails with INTERNAL
	// TARGET FAILURE and registers nothing.
	f := newFix(t, Config{Persister: File{Path: filepath.Join(t.TempDir(), "missing", "lun.json")}})
	if _, o := f.out(nA, OutRegister, 0, basic(0, 1, fAPTPL)); o.Reason != InternalTargetFailure {
		t.Fatalf("%v", o)
	}
	if gen, keys := f.keys(); gen != 0 || len(keys) != 0 {
		t.Errorf("gen %d keys %x", gen, keys)
	}
	// Without APTPL nothing is written, so nothing fails.
	f.register(nA, 1)
}
