// Command perfsplit divides a guest-wide CPU profile of one fio job into
// microseconds of guest CPU per I/O, by where the time went: the soft-RoCE
// driver (rxe, in whatever context it ran), the target process, fio, the
// kernel's softirq threads, the scheduler, clock reads and idle time. It
// reads the perf-TARGET-JOB.script.gz files that test/interop/tests/
// verbs-profile.sh leaves when the guest has perf (GOSRP_INTEROP_EXTRA_PKGS
// =linux-perf; docs/INTEROP.md), so that the figures in
// docs/PERFORMANCE.md can be made again from a run of one's own.
//
// usage: go run ./test/interop/perfsplit -ios N [-secs 12] [-profiled 8] [-hz 499] FILE
//
// -ios is the job's I/O count (verbs-profile logs it), -secs the job's
// length and -profiled how long perf sampled (verbs-profile: SECS and
// SECS-4), -hz perf's sampling rate per CPU. One sample stands for 1/hz s
// of one CPU; a category's time per I/O is its samples / hz / (I/Os in the
// sampled window).
package main

import (
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type sample struct {
	comm   string
	frames []string // innermost first
}

// readSamples parses perf script output (-F comm,tid,time,ip,sym,dso with
// call chains): a header line per sample, then one indented line per
// frame, then a blank line.
func readSamples(r io.Reader) ([]sample, error) {
	var out []sample
	var cur *sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.TrimSpace(l) == "":
			cur = nil
		case l[0] != ' ' && l[0] != '\t':
			f := strings.Fields(l)
			out = append(out, sample{comm: f[0]})
			cur = &out[len(out)-1]
		case cur != nil:
			// "ffffffff81a592eb native_safe_halt ([kernel.kallsyms])"
			f := strings.SplitN(strings.TrimSpace(l), " ", 2)
			if len(f) == 2 {
				sym := f[1]
				if i := strings.LastIndex(sym, " ("); i >= 0 {
					sym = sym[:i]
				}
				cur.frames = append(cur.frames, sym)
			}
		}
	}
	return out, sc.Err()
}

func has(frames []string, pred func(string) bool) bool {
	for _, f := range frames {
		if pred(f) {
			return true
		}
	}
	return false
}

func prefix(p ...string) func(string) bool {
	return func(s string) bool {
		for _, x := range p {
			if strings.HasPrefix(s, x) {
				return true
			}
		}
		return false
	}
}

// category is where one sample's time went; the first rule that matches
// wins.
func category(s sample) string {
	base, _, _ := strings.Cut(s.comm, "/") // ksoftirqd/0 -> ksoftirqd
	switch {
	case s.comm == "swapper" && has(s.frames, prefix("native_safe_halt", "default_idle", "cpu_idle_poll")):
		return "idle"
	case has(s.frames, prefix("rxe_")):
		return "rxe (" + base + ")"
	case has(s.frames, prefix("runtime.sysmon")):
		return "Go sysmon"
	case has(s.frames, prefix("read_hpet", "__vdso_clock_gettime", "runtime.nanotime")):
		return "clock reads (" + base + ")"
	case has(s.frames, prefix("__schedule", "finish_task_switch")):
		return "scheduler (" + base + ")"
	}
	return base + ", other"
}

func main() {
	ios := flag.Float64("ios", 0, "I/Os the job completed")
	secs := flag.Float64("secs", 12, "length of the job, seconds")
	profiled := flag.Float64("profiled", 8, "seconds perf sampled")
	hz := flag.Float64("hz", 499, "perf's sampling frequency per CPU")
	flag.Parse()
	if flag.NArg() != 1 || *ios <= 0 || *secs <= 0 || *profiled <= 0 || *hz <= 0 {
		fmt.Fprintln(os.Stderr, "usage: perfsplit -ios N [-secs 12] [-profiled 8] [-hz 499] perf-TARGET-JOB.script.gz")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfsplit:", err)
		os.Exit(1)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(flag.Arg(0), ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "perfsplit:", err)
			os.Exit(1)
		}
		r = zr
	}
	ss, err := readSamples(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfsplit:", err)
		os.Exit(1)
	}
	if len(ss) == 0 {
		fmt.Fprintln(os.Stderr, "perfsplit: no samples")
		os.Exit(1)
	}
	// µs of one CPU per sample, over the I/Os of the sampled window.
	perIO := 1e6 / *hz / (*ios / *secs * *profiled)
	cats := map[string]int{}
	for _, s := range ss {
		cats[category(s)]++
	}
	keys := make([]string, 0, len(cats))
	for k := range cats {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return cats[keys[i]] > cats[keys[j]] })
	fmt.Printf("%d samples, %.0f I/Os per second: guest CPU per I/O, µs\n", len(ss), *ios / *secs)
	total := 0.0
	for _, k := range keys {
		v := float64(cats[k]) * perIO
		total += v
		if v >= 0.5 {
			fmt.Printf("%8.1f  %s\n", v, k)
		}
	}
	fmt.Printf("%8.1f  all (both CPUs, idle included)\n", total)
}
