package gcpace

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, 100},            // no collection yet
		{32 * mib, 64 * mib, 100},     // small heap: default pacing
		{64 * mib, 64 * mib, 100},     // headroom = live: GOGC 100 is exactly it
		{256 * mib, 64 * mib, 25},     // 64/256
		{1000 * mib, 64 * mib, 7},     // 6.4 % rounded up
		{16384 * mib, 64 * mib, 1},    // 0.39 %: at least 1
		{1 << 50, 64 * mib, 1},        // no overflow or 0
		{3 * mib, 1 * mib, 34},        // 33.3 % rounded up
		{100 * mib, 100*mib - 1, 100}, // 99.99... % rounded up
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.headroom, got, c.want)
		}
	}
}

// startRun runs Run(headroom, every 5 ms) on a goroutine after a
// collection has measured the live heap. It returns the GOGC it found and
// stop, which ends Run and waits for it to return.
func startRun(headroom uint64) (before int, stop func()) {
	runtime.GC()
	before = debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, headroom, 5*time.Millisecond); close(done) }()
	return before, func() { cancel(); <-done }
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// With a large pointer-free live heap (as a RAM LUN's chunks), Run lowers
// GOGC so the collector's goal is the live heap plus about the headroom,
// not twice the live heap; at the end the setting is restored.
func TestRunBoundsHeadroom(t *testing.T) {
	t.Setenv("GOGC", "") // the operator's variable unset, whatever the test runner's
	const headroom = 16 << 20
	lun := make([][]byte, 256) // 256 MiB of 1 MiB chunks
	for i := range lun {
		lun[i] = make([]byte, 1<<20)
	}
	before, stop := startRun(headroom)
	var goal, live uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		runtime.GC()
		live, goal = read(liveMetric), read("/gc/heap/goal:bytes")
		if goal < live+2*headroom || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := Percent(live, headroom); int(read("/gc/gogc:percent")) != want {
		t.Errorf("GOGC = %d with %d bytes live, want %d", read("/gc/gogc:percent"), live, want)
	}
	// goal = live + (live + stacks + globals) × GOGC/100: about live +
	// headroom, rounding up GOGC adding at most 1 % of live.
	if goal > live+headroom+live/100+4<<20 {
		t.Errorf("heap goal %d MiB with %d MiB live, want about %d MiB", goal>>20, live>>20, (live+headroom)>>20)
	}
	stop()
	if got := debug.SetGCPercent(before); got != before {
		t.Errorf("GOGC after Run = %d, want the %d it found", got, before)
	}
	runtime.KeepAlive(lun)
}

// An operator's GOGC stands: Run leaves the setting alone and returns.
func TestRunLeavesOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "300")
	prev := debug.SetGCPercent(300)
	defer debug.SetGCPercent(prev)
	lun := make([]byte, 256<<20)
	runtime.GC()
	done := make(chan struct{})
	go func() { Run(context.Background(), 16<<20, time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return with GOGC set")
	}
	if got := read("/gc/gogc:percent"); got != 300 {
		t.Errorf("GOGC = %d, want the operator's 300", got)
	}
	runtime.KeepAlive(lun)
}

// A live heap of pointers (as the chunk table of a large sparse RAM LUN)
// keeps GOGC at about 100: the headroom is at least what a collection
// scans, so collections do not come more often than the default pacing
// would have them.
func TestRunHeadroomCoversScanWork(t *testing.T) {
	t.Setenv("GOGC", "")
	const headroom = 16 << 20
	table := make([]*byte, 32<<20) // 256 MiB of pointer slots
	_, stop := startRun(headroom)
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	live, scan := read(liveMetric), read(scanMetric)
	if want := Percent(live, max(headroom, scan)); int(read("/gc/gogc:percent")) != want || want < 90 {
		t.Errorf("GOGC = %d with %d MiB live, %d MiB scannable; want %d (about 100)", read("/gc/gogc:percent"), live>>20, scan>>20, want)
	}
	stop()
	runtime.KeepAlive(table)
}

// A GOGC Go's runtime does not take (it runs at 100 then) is no operator's
// choice: Run paces as if it were unset.
func TestOperatorGOGC(t *testing.T) {
	for _, c := range []struct {
		v   string
		set bool
	}{{"", false}, {"off", true}, {"100", true}, {"-1", true}, {"25", true}, {"abc", false}, {"50%", false}, {"OFF", false}, {"99999999999", false}} {
		t.Setenv("GOGC", c.v)
		if v, set := OperatorGOGC(); v != c.v || set != c.set {
			t.Errorf("GOGC=%q: OperatorGOGC() = %q, %v; want %v", c.v, v, set, c.set)
		}
	}
	t.Setenv("GOGC", "abc")
	lun := make([]byte, 256<<20)
	before, stop := startRun(16 << 20)
	for deadline := time.Now().Add(5 * time.Second); read("/gc/gogc:percent") == uint64(before) && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := read("/gc/gogc:percent"); got == uint64(before) {
		t.Errorf("GOGC=abc: GOGC stayed %d, want paced", got)
	}
	stop()
	runtime.KeepAlive(lun)
}
