package main

import (
	"testing"
	"time"

	"github.com/gosrp/gosrp/scsi"
)

// TestLUNStats: counting and the cumulative latency buckets (Prometheus:
// each bucket counts observations <= its upper bound).
func TestLUNStats(t *testing.T) {
	var s lunStats
	s.record(&scsi.Result{Status: 0x00, DataInLen: 4096}, 40*time.Microsecond)
	s.record(&scsi.Result{Status: 0x00, DataOutUsed: 512}, 100*time.Microsecond) // on a bound: that bucket
	s.record(&scsi.Result{Status: 0x02}, 3*time.Millisecond)                     // CHECK CONDITION
	// CHECK CONDITION, UNIT ATTENTION 29h/00h (fixed and descriptor
	// format): counted apart from errors.
	s.record(&scsi.Result{Status: 0x02, Sense: []byte{0x70, 0, 0x06, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0}}, 10*time.Microsecond)
	s.record(&scsi.Result{Status: 0x02, Sense: []byte{0x72, 0x06, 0x29, 0, 0, 0, 0, 0}}, 10*time.Microsecond)
	// CHECK CONDITION, ILLEGAL REQUEST: an error.
	s.record(&scsi.Result{Status: 0x02, Sense: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0}}, 10*time.Microsecond)
	s.record(&scsi.Result{Status: 0x00}, 20*time.Second)             // beyond the last bound: +Inf only
	s.record(&scsi.Result{Aborted: true, DataInLen: 1}, time.Second) // aborted: counted apart
	s.record(&scsi.Result{Status: 0x40}, time.Second)                // TASK ABORTED (TAS): aborted too
	c := s.snapshot()
	if c.Commands != 7 || c.ReadBytes != 4096 || c.WriteBytes != 512 || c.Errors != 2 || c.UnitAttentions != 2 || c.Aborted != 2 {
		t.Fatalf("counters %+v", c)
	}
	b, count, sum := s.histogram()
	want := map[float64]uint64{50e-6: 4, 100e-6: 5, 250e-6: 5, 2.5e-3: 5, 5e-3: 6, 10: 6}
	for le, n := range want {
		if b[le] != n {
			t.Errorf("bucket le=%v: %d, want %d", le, b[le], n)
		}
	}
	if count != 7 || sum < 20.00303 || sum > 20.0033 {
		t.Errorf("count %d sum %v", count, sum)
	}
}
