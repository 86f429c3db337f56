package scsi

import (
	"context"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// FuzzExecute feeds random CDBs, data-out and buffer sizes through Execute
// on a small thin-provisioned RAM logical unit. Every command must return a
// valid status with well-formed sense, never panic, and never report more
// data-in than the buffer holds.
func FuzzExecute(f *testing.F) {
	seeds := [][]byte{
		cdbTUR(), cdbInquiry(true, 0x83, 255), cdbRC16(32), cdb16(0x88, 0, 0, 1), cdb16(0x8A, 0x08, 1, 1),
		{0xA3, 0x0C, 0x81, 0x88, 0, 0, 0, 0, 1, 0, 0, 0}, {0x1A, 0, 0x3F, 0, 255, 0},
		{0x55, 0x10, 0, 0, 0, 0, 0, 0, 20, 0}, {0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}, cdb16(0x89, 0, 0, 0),
		cdb16(0x93, 0x09, 0, 4), cdb16(0x9E, 0x12, 0, 64), {0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0},
		{0x5E, 0x00, 0, 0, 0, 0, 0, 0, 64, 0}, {0x16, 0, 0, 0, 0, 0}, {0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
	}
	for i, s := range seeds {
		f.Add(s, make([]byte, 512*(i%3)), uint16(512), uint8(i%3))
	}
	f.Fuzz(func(t *testing.T, cdb, out []byte, inLen uint16, attr uint8) {
		lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(256 << 10), ThinProvisioning: true, MaxTransferBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		tg := NewTarget(TargetConfig{})
		if err := tg.AddLUN(0, lu); err != nil {
			t.Fatal(err)
		}
		s := tg.NewSession(nexusA)
		defer s.Close()
		for i := 0; i < 2; i++ { // the first run meets the POWER ON condition
			cmd := &Command{Tag: uint64(i), CDB: cdb, DataOut: out, DataIn: make([]byte, inLen), Attr: TaskAttr(attr % 5)}
			r := s.Execute(context.Background(), cmd)
			if r.DataInLen > len(cmd.DataIn) || r.DataInLen < 0 || r.DataOutUsed > len(out) {
				t.Fatalf("lengths %+v", r)
			}
			checkResultValid(t, cdb, r)
		}
		s.TaskManagement(context.Background(), TMFLUNReset, 0, 0)
	})
}

// FuzzBuildSense: whatever failure the core encodes decodes back to its
// reason's codes, INFORMATION and field pointer, in both formats.
func FuzzBuildSense(f *testing.F) {
	f.Add([]byte{byte(ReasonInvalidCDBField), 2, 0, 1})
	f.Add([]byte{byte(ReasonMiscompare), 1, 7, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 4 {
			return
		}
		r := Reason(b[0]) % numReasons
		if r == ReasonNone || r.Status() != sense.StatusCheckCondition {
			return
		}
		fl := failure{reason: r, infoValid: b[1]&1 != 0, info: uint64(b[2]) << 8, fieldValid: b[1]&2 != 0, cdField: b[1]&4 != 0, field: uint16(b[3])}
		for _, desc := range []bool{false, true} {
			s, err := sense.Parse(buildSense(fl, desc))
			k, a, q := r.SenseCodes()
			if err != nil || s.Truncated || s.Key != k || s.ASC != a || s.ASCQ != q || s.InfoValid != fl.infoValid || (fl.infoValid && s.Info != fl.info) || s.SKSValid != fl.fieldValid {
				t.Fatalf("round trip of %+v (desc %v): %+v", fl, desc, s)
			}
		}
	})
}
