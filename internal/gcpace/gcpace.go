// Package gcpace keeps the Go garbage collector's headroom, the heap
// allocated between two collections, at a fixed size in a process whose
// live heap is large and long-lived, such as srptd with RAM LUNs.
//
// The collector's default target (GOGC=100) lets the heap grow to twice
// the live heap before the next collection. A RAM LUN's chunks are live
// heap, so a target serving a 1 GiB RAM LUN would allocate a further
// 1 GiB of per-command garbage between collections: every new span is
// memory the process has not touched since the scavenger returned it, so
// each 4 KiB of it costs a page fault and a clear, and the resident size
// can reach twice the LUNs' size. Pacing the collector to a fixed headroom
// (GOGC lowered to headroom ÷ live heap) keeps the garbage in memory that
// is already mapped. The collector's marking cost stays small: the chunks
// hold no pointers, so each cycle only marks them. The headroom is never
// less than the memory a collection scans (the heap's pointer-holding
// objects, stacks and globals): a collection then costs no more per byte
// allocated than under the default pacing of a heap that is all pointers,
// however large the pointer tables of a big sparse LUN.
package gcpace

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"
)

// DefaultHeadroom is the headroom srptd keeps, in bytes: 64 MiB, a few
// hundred milliseconds of per-command garbage at the highest command rates
// of a small machine, so collections stay a few per second at most.
const DefaultHeadroom = 64 << 20

// The metrics Run reads: the heap the last collection marked live, and
// what a collection scans (heap objects with pointers, stacks, globals),
// in bytes.
const (
	liveMetric = "/gc/heap/live:bytes"
	scanMetric = "/gc/scan/total:bytes"
)

// Percent is the GOGC value that gives a heap of live bytes (after a
// collection) the given headroom in bytes: 100 × headroom ÷ live, rounded
// up, at most 100 (the default: a small heap keeps the default pacing) and
// at least 1. live 0 (no collection yet) gives 100.
func Percent(live, headroom uint64) int {
	if live == 0 || live <= headroom {
		return 100
	}
	return max(int((100*headroom+live-1)/live), 1)
}

// Run paces the collector until ctx ends: every interval it reads the live
// heap and the scannable memory (runtime/metrics /gc/heap/live:bytes,
// /gc/scan/total:bytes) and sets GOGC to Percent(live, max(headroom,
// scannable)) (debug.SetGCPercent) when that changed; at the
// end it restores the GOGC it found. It returns at once, changing nothing,
// when the GOGC environment variable holds a setting Go's runtime takes
// ("off" or a whole number, OperatorGOGC): the operator's choice stands.
// One Run per process: two would fight over the same setting.
func Run(ctx context.Context, headroom uint64, interval time.Duration) {
	if _, set := OperatorGOGC(); set {
		return
	}
	sample := []metrics.Sample{{Name: liveMetric}, {Name: scanMetric}}
	orig := debug.SetGCPercent(100)
	set := 100
	defer debug.SetGCPercent(orig)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		var v [2]uint64
		for i, s := range sample {
			if s.Value.Kind() == metrics.KindUint64 {
				v[i] = s.Value.Uint64()
			}
		}
		if p := Percent(v[0], max(headroom, v[1])); p != set {
			debug.SetGCPercent(p)
			set = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// OperatorGOGC returns the GOGC environment variable and whether it holds
// a setting Go's runtime takes: "off" or a whole number that fits 32 bits
// (the runtime's readGOGC). Any other value the runtime ignores (it runs
// at GOGC 100), and so does Run: it paces the collector as if the variable
// were unset.
func OperatorGOGC() (string, bool) {
	v := os.Getenv("GOGC")
	if v == "off" {
		return v, true
	}
	_, err := strconv.ParseInt(v, 10, 32)
	return v, err == nil
}
