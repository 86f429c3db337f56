package main

import (
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/scsi/sense"
)

// latencyBounds are the upper bounds, in seconds, of the command latency
// histogram buckets (the last bucket, +Inf, is the total count).
var latencyBounds = [...]float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

// lunStats counts the commands of one logical unit. Safe for concurrent
// use; every field only grows except inflight.
type lunStats struct {
	commands   atomic.Uint64 // commands completed (not aborted)
	readBytes  atomic.Uint64 // data-in bytes returned
	writeBytes atomic.Uint64 // data-out bytes consumed
	errors     atomic.Uint64 // completed with a status other than GOOD, unit attentions aside
	unitAttns  atomic.Uint64 // CHECK CONDITION with sense key UNIT ATTENTION
	aborted    atomic.Uint64 // ended by a TMF or a channel loss
	latencyNs  atomic.Uint64 // sum of command latencies, nanoseconds
	buckets    [len(latencyBounds)]atomic.Uint64
	inflight   atomic.Int64 // commands in progress
}

// record adds one finished command.
func (s *lunStats) record(res *scsi.Result, d time.Duration) {
	// TASK ABORTED is the status of a command another I_T nexus's TMF
	// aborted (TAS, SAM-5 §5.6): ended by a TMF like the silent aborts.
	if res.Aborted || res.Status == sense.StatusTaskAborted {
		s.aborted.Add(1)
		return
	}
	s.commands.Add(1)
	if res.DataInLen > 0 {
		s.readBytes.Add(uint64(res.DataInLen))
	}
	if res.DataOutUsed > 0 {
		s.writeBytes.Add(uint64(res.DataOutUsed))
	}
	switch {
	case isUnitAttention(res):
		// A report to the initiator (reset, LUN inventory or capacity
		// changed), not a failed command.
		s.unitAttns.Add(1)
	case res.Status != 0: // not GOOD (SAM-5 §5.3.1)
		s.errors.Add(1)
	}
	s.latencyNs.Add(uint64(d))
	sec := d.Seconds()
	for i, b := range latencyBounds {
		if sec <= b {
			s.buckets[i].Add(1)
			break
		}
	}
}

// isUnitAttention reports whether res is CHECK CONDITION with sense key
// UNIT ATTENTION (SAM-5 §5.3.1, SPC-4 §4.5.6).
func isUnitAttention(res *scsi.Result) bool {
	if res.Status != sense.StatusCheckCondition {
		return false
	}
	si, err := sense.Parse(res.Sense)
	return err == nil && si.Key == sense.KeyUnitAttention
}

// snapshot reads the counters, as the admin API returns them.
func (s *lunStats) snapshot() adminapi.LUNCounters {
	c := adminapi.LUNCounters{
		Commands:       s.commands.Load(),
		ReadBytes:      s.readBytes.Load(),
		WriteBytes:     s.writeBytes.Load(),
		Errors:         s.errors.Load(),
		UnitAttentions: s.unitAttns.Load(),
		Aborted:        s.aborted.Load(),
		InFlight:       s.inflight.Load(),
	}
	if c.Commands > 0 {
		c.AvgLatencyUs = float64(s.latencyNs.Load()) / float64(c.Commands) / 1e3
	}
	return c
}

// histogram returns the cumulative bucket counts (Prometheus form) keyed by
// upper bound, the count and the sum in seconds.
func (s *lunStats) histogram() (map[float64]uint64, uint64, float64) {
	m := make(map[float64]uint64, len(latencyBounds))
	var cum uint64
	for i, b := range latencyBounds {
		cum += s.buckets[i].Load()
		m[b] = cum
	}
	return m, s.commands.Load(), float64(s.latencyNs.Load()) / 1e9
}

// Started implements scsi.CommandObserver.
func (s *lunStats) Started() { s.inflight.Add(1) }

// Finished implements scsi.CommandObserver.
func (s *lunStats) Finished(res *scsi.Result, took time.Duration) {
	s.record(res, took)
	s.inflight.Add(-1)
}
