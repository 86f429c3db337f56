// Command perfsplit divides a guest-wide CPU profile of one fio job into
// microseconds of guest CPU per I/O, by where the time went: the soft-RoCE
// driver (rxe, in whatever context it ran), the target process, fio, the
// kernel's softirq threads, the scheduler, clock reads and idle time. It
// reads the perf-TARGET-JOB.script.gz files that test/interop/tests/
// verbs-profile.sh leaves when the guest has perf (GOSRP_INTEROP_EXTRA_PKGS
// =linux-perf; docs/INTEROP.md), so that the figures in
// docs/PERFORMANCE.md can be made again from a run of one's own.
//
// usage: go run ./test/interop/perfsplit -ios N [-secs 12] [-cpus 2] FILE
//
// -ios is the job's I/O count and -secs its length (verbs-profile logs
// both), -cpus the guest's CPUs. The samples are a cpu-clock profile of
// every CPU, so each category's share of them is its share of the
// guest's CPU time; the capacity per I/O is cpus / IOPS, in µs
// cpus × 10⁶ × secs / ios, and a category's µs per I/O is its share of
// that. (Shares rather than samples ÷ rate: an emulated guest loses
// timer ticks, 451-468 of 499 per CPU-second in the runs of
// docs/PERFORMANCE.md, and not equally in every run.)
//
// FILE is perf script output (-F comm,tid,time,ip,sym,dso, with call
// chains), plain or gzip-compressed.
package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
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
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case strings.TrimSpace(l) == "":
			cur = nil
		case l[0] != ' ' && l[0] != '\t':
			// "srptd-verbs   179    22.511144: " (a command name may
			// hold spaces: the last two fields are the thread and time)
			f := strings.Fields(l)
			if len(f) < 3 || !strings.HasSuffix(f[len(f)-1], ":") {
				return nil, fmt.Errorf("line %d: not a perf script sample header: %.60q", line, l)
			}
			out = append(out, sample{comm: strings.Join(f[:len(f)-2], " ")})
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
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("after line %d: %w", line, err)
	}
	return out, nil
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
	case s.comm == "swapper" && slices.ContainsFunc(s.frames, prefix("native_safe_halt", "default_idle", "cpu_idle_poll")):
		return "idle"
	case slices.ContainsFunc(s.frames, prefix("rxe_")):
		return "rxe (" + base + ")"
	case slices.ContainsFunc(s.frames, prefix("runtime.sysmon")):
		return "Go sysmon"
	case slices.ContainsFunc(s.frames, prefix("read_hpet", "__vdso_clock_gettime", "runtime.nanotime")):
		return "clock reads (" + base + ")"
	case slices.ContainsFunc(s.frames, prefix("__schedule", "finish_task_switch")):
		return "scheduler (" + base + ")"
	}
	return base + ", other"
}

type row struct {
	cat string
	us  float64 // guest CPU per I/O, µs
}

// split gives each category its share of cpus × 10⁶ / iops µs, largest
// first (ties by name).
func split(ss []sample, iops, cpus float64) []row {
	cats := map[string]int{}
	for _, s := range ss {
		cats[category(s)]++
	}
	out := make([]row, 0, len(cats))
	for k, n := range cats {
		out = append(out, row{k, float64(n) / float64(len(ss)) * cpus * 1e6 / iops})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].us != out[j].us {
			return out[i].us > out[j].us
		}
		return out[i].cat < out[j].cat
	})
	return out
}

// positive reports whether x is a finite number above 0.
func positive(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "perfsplit: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	ios := flag.Float64("ios", 0, "I/Os the job completed")
	secs := flag.Float64("secs", 12, "length of the job, seconds")
	cpus := flag.Float64("cpus", 2, "the guest's CPUs")
	flag.Parse()
	if flag.NArg() != 1 || !positive(*ios) || !positive(*secs) || !positive(*cpus) {
		fmt.Fprintln(os.Stderr, "usage: perfsplit -ios N [-secs 12] [-cpus 2] perf-TARGET-JOB.script[.gz]")
		fmt.Fprintln(os.Stderr, "  (-ios, -secs and -cpus must be finite numbers above 0)")
		os.Exit(2)
	}
	name := flag.Arg(0)
	f, err := os.Open(name)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			fail("%s: %v", name, err)
		}
		r = zr
	}
	ss, err := readSamples(r)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		fail("%s: %v (a truncated gzip file?)", name, err)
	} else if err != nil {
		fail("%s: %v", name, err)
	}
	frames := 0
	for _, s := range ss {
		frames += len(s.frames)
	}
	if len(ss) == 0 || frames == 0 {
		fail("%s: no samples with call chains (perf script output of a perf record -g?)", name)
	}
	iops := *ios / *secs
	fmt.Printf("%d samples, %.0f I/Os per second, %.0f CPUs: guest CPU per I/O, µs\n", len(ss), iops, *cpus)
	for _, r := range split(ss, iops, *cpus) {
		if r.us >= 0.5 {
			fmt.Printf("%8.1f  %s\n", r.us, r.cat)
		}
	}
	fmt.Printf("%8.1f  all (%.0f CPUs × 10⁶ / IOPS; idle included)\n", *cpus*1e6/iops, *cpus)
}
