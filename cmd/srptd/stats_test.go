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
	s.record(&scsi.Result{Status: 0x00}, 20*time.Second)                         // beyond the last bound: +Inf only
	s.record(&scsi.Result{Aborted: true, DataInLen: 1}, time.Second)             // aborted: counted apart
	c := s.snapshot()
	if c.Commands != 4 || c.ReadBytes != 4096 || c.WriteBytes != 512 || c.Errors != 1 || c.Aborted != 1 {
		t.Fatalf("counters %+v", c)
	}
	b, count, sum := s.histogram()
	want := map[float64]uint64{50e-6: 1, 100e-6: 2, 250e-6: 2, 2.5e-3: 2, 5e-3: 3, 10: 3}
	for le, n := range want {
		if b[le] != n {
			t.Errorf("bucket le=%v: %d, want %d", le, b[le], n)
		}
	}
	if count != 4 || sum < 20.003 || sum > 20.0032 {
		t.Errorf("count %d sum %v", count, sum)
	}
}
