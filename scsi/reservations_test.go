package scsi

import (
	"testing"

	"github.com/gosrp/gosrp/scsi/sense"
)

func prOut(sa, scopeType byte, key, saKey uint64) ([]byte, []byte) {
	p := make([]byte, 24)
	for i := 0; i < 8; i++ {
		p[i] = byte(key >> (56 - 8*i))
		p[8+i] = byte(saKey >> (56 - 8*i))
	}
	return []byte{0x5F, sa, scopeType, 0, 0, 0, 0, 0, 24, 0}, p
}

func TestPersistentReservations(t *testing.T) {
	f := newFixture(t, LUConfig{})
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)

	cdb, p := prOut(0x00, 0, 0, 0xA1) // A: REGISTER key A1
	f.good(cdb, p)
	cdb, p = prOut(0x01, 0x01, 0xA1, 0) // A: RESERVE WRITE EXCLUSIVE
	f.good(cdb, p)
	// B (unregistered) may read but not write (SPC-4 table 45).
	if r := f.run(s2, 0, cdb16(0x8A, 0, 0, 1), make([]byte, 512), 0); r.Status != sense.StatusReservationConflict || len(r.Sense) != 0 {
		t.Fatalf("write under WR_EX: %+v", r)
	}
	if r := f.run(s2, 0, cdb16(0x88, 0, 0, 1), nil, 512); r.Status != sense.StatusGood {
		t.Fatalf("read under WR_EX: %+v", r)
	}
	f.good(cdb16(0x8A, 0, 0, 1), make([]byte, 512))
	// READ KEYS from B: PRgeneration 1, one key (SPC-4 §6.15.2).
	r := f.run(s2, 0, []byte{0x5E, 0x00, 0, 0, 0, 0, 0, 0, 64, 0}, nil, 64)
	if r.Status != sense.StatusGood || r.DataInLen != 16 {
		t.Fatalf("READ KEYS: %+v", r)
	}
	// B registers and preempts A: A gets REGISTRATIONS PREEMPTED.
	cdb, p = prOut(0x00, 0, 0, 0xB2)
	if r := f.run(s2, 0, cdb, p, 0); r.Status != sense.StatusGood {
		t.Fatalf("%+v", r)
	}
	cdb, p = prOut(0x04, 0x01, 0xB2, 0xA1)
	if r := f.run(s2, 0, cdb, p, 0); r.Status != sense.StatusGood {
		t.Fatalf("PREEMPT: %+v % x", r, r.Sense)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x05)
	if r := f.run(f.s, 0, cdb16(0x8A, 0, 0, 1), make([]byte, 512), 0); r.Status != sense.StatusReservationConflict {
		t.Fatalf("preempted nexus writes: %+v", r)
	}
	// A bad service action is INVALID FIELD IN CDB through the table.
	wantField(t, f.run(f.s, 0, []byte{0x5F, 0x09, 0, 0, 0, 0, 0, 0, 24, 0}, make([]byte, 24), 0), 0x24, true, 1, 4)
}

func TestReserveRelease(t *testing.T) {
	f := newFixture(t, LUConfig{})
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)
	f.good([]byte{0x16, 0, 0, 0, 0, 0}, nil) // RESERVE(6)
	if r := f.run(s2, 0, cdbTUR(), nil, 0); r.Status != sense.StatusReservationConflict {
		t.Fatalf("TUR from other nexus: %+v", r)
	}
	if r := f.run(s2, 0, cdbInquiry(false, 0, 36), nil, 36); r.Status != sense.StatusGood {
		t.Fatalf("INQUIRY: %+v", r)
	}
	// Extent reservation is not supported.
	wantField(t, f.run(f.s, 0, []byte{0x16, 0x01, 0, 0, 0, 0}, nil, 0), 0x24, true, 1, 0)
	// LUN RESET releases it.
	if resp := f.s.TaskManagement(testCtx(t), TMFLUNReset, 0, 0); resp != TMFComplete {
		t.Fatal(resp)
	}
	wantSense(t, f.run(s2, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x03)
	if r := f.run(s2, 0, cdbTUR(), nil, 0); r.Status != sense.StatusGood {
		t.Fatalf("after reset: %+v", r)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x03)
	f.good([]byte{0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil) // RESERVE(10) by A again
	f.good([]byte{0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil) // RELEASE(10)
	if r := f.run(s2, 0, cdbTUR(), nil, 0); r.Status != sense.StatusGood {
		t.Fatalf("after release: %+v", r)
	}
}
