// Command sidebyside measures gosrp and an NBD peer on this machine in one
// run, interleaved: srpctl bench against srptd (RAM LUN, pure-Go iWARP on
// 127.0.0.1) and fio's nbd engine against nbdkit's memory plugin (TCP on
// 127.0.0.1), the same jobs on the same LUN size. Each job runs on one
// side, then the other, for the given repetitions (ours, peer, ours,
// peer), so that both sides see the same changes in machine load.
//
// Per job run it records IOPS, MiB/s, p50/p99 latency and the CPU time per
// I/O of the server and the client process (utime+stime from
// /proc/PID/stat, sampled at both ends of a window inside the run), and
// the load average before the run. It also measures one loopback TCP
// stream with iperf3 per repetition. scripts/bench.sh builds the programs
// and runs it; test/e2e/benchplot draws charts from its JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// mainJobs are the jobs of every run.
var mainJobs = []Job{
	{Name: "randread-4k-qd32", RW: "randread", BS: 4 << 10, QD: 32},
	{Name: "randwrite-4k-qd32", RW: "randwrite", BS: 4 << 10, QD: 32},
	{Name: "read-1m-qd32", RW: "read", BS: 1 << 20, QD: 32},
	{Name: "write-1m-qd32", RW: "write", BS: 1 << 20, QD: 32},
	{Name: "randread-4k-qd1", RW: "randread", BS: 4 << 10, QD: 1},
}

// sweepJobs are the chart sweeps: 4 KiB random reads at queue depths 1 to
// 64, and sequential reads at QD32 with block sizes 4 KiB to 1 MiB.
func sweepJobs() []Job {
	var js []Job
	for _, qd := range []int{1, 2, 4, 8, 16, 32, 64} {
		js = append(js, Job{Name: fmt.Sprintf("qd-sweep/randread-4k-qd%d", qd), RW: "randread", BS: 4 << 10, QD: qd, Sweep: "qd"})
	}
	for _, bs := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		js = append(js, Job{Name: fmt.Sprintf("bs-sweep/read-%s-qd32", sizeName(bs)), RW: "read", BS: bs, QD: 32, Sweep: "bs"})
	}
	return js
}

type options struct {
	srptd, srpctl string
	dir           string
	jsonPath      string
	reps          int
	runtime       time.Duration
	sweep         bool
	sweepRuntime  time.Duration
	sweepReps     int
	tcpTime       time.Duration
	lunMiB        int64
	channels      int
	jobs          string
	quick         bool
	printBound    bool
}

func main() {
	var o options
	flag.StringVar(&o.srptd, "srptd", "", "srptd binary (required)")
	flag.StringVar(&o.srpctl, "srpctl", "", "srpctl binary (required)")
	flag.StringVar(&o.dir, "dir", "", "working directory for configurations, logs and fio output (default: a new temporary directory, removed at the end)")
	flag.StringVar(&o.jsonPath, "json", "", "write all figures to this file as JSON")
	flag.IntVar(&o.reps, "reps", 2, "repetitions of each job on each side")
	flag.DurationVar(&o.runtime, "runtime", 8*time.Second, "runtime of each job run")
	flag.BoolVar(&o.sweep, "sweep", false, "also run the chart sweeps (4k randread at QD 1..64, QD32 read at 4k..1M)")
	flag.DurationVar(&o.sweepRuntime, "sweep-runtime", 0, "runtime of each sweep point (default: -runtime)")
	flag.IntVar(&o.sweepReps, "sweep-reps", 1, "repetitions of each sweep point on each side")
	flag.DurationVar(&o.tcpTime, "tcp-time", 3*time.Second, "length of the loopback TCP stream (iperf3), once per repetition")
	flag.Int64Var(&o.lunMiB, "lun-mib", 1024, "LUN size of both sides, MiB")
	flag.IntVar(&o.channels, "channels", 0, "ch_count for srpctl (0: the initiator's default, min(4, CPUs); the peer uses one NBD connection)")
	flag.StringVar(&o.jobs, "jobs", "", "comma-separated subset of the main jobs (default all: "+jobNames(mainJobs)+")")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 1 repetition, 3 s job runs, 2 s sweep points, 1 s TCP stream (explicit flags win)")
	flag.BoolVar(&o.printBound, "print-bound", false, "print the run's time bound in seconds (see -h) and exit")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sidebyside -srptd BIN -srpctl BIN [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if o.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["reps"] {
			o.reps = 1
		}
		if !set["runtime"] {
			o.runtime = 3 * time.Second
		}
		if !set["sweep-runtime"] {
			o.sweepRuntime = 2 * time.Second
		}
		if !set["tcp-time"] {
			o.tcpTime = time.Second
		}
	}
	if o.sweepRuntime == 0 {
		o.sweepRuntime = o.runtime
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		os.Exit(1)
	}
}

func jobNames(js []Job) string {
	var n []string
	for _, j := range js {
		n = append(n, j.Name)
	}
	return strings.Join(n, ",")
}

func (o *options) check() ([]Job, error) {
	switch {
	case o.srptd == "" || o.srpctl == "":
		return nil, errors.New("-srptd and -srpctl are required")
	case o.reps < 1 || o.sweepReps < 1:
		return nil, errors.New("-reps and -sweep-reps: at least 1")
	case o.runtime < 2*time.Second || o.sweepRuntime < 2*time.Second:
		return nil, errors.New("-runtime and -sweep-runtime: at least 2s (the CPU is sampled from 0.5 s in to 0.25 s before the end)")
	case o.tcpTime < time.Second:
		return nil, errors.New("-tcp-time: at least 1s")
	case o.lunMiB < 64:
		return nil, errors.New("-lun-mib: at least 64 (the 1 MiB jobs run at QD32)")
	case o.channels < 0 || o.channels > 255:
		return nil, errors.New("-channels: 0 (default) or 1..255")
	}
	for _, tool := range []string{"fio", "nbdkit", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: scripts/deps.sh installs it", tool)
		}
	}
	jobs := mainJobs
	if o.jobs != "" {
		jobs = nil
		for n := range strings.SplitSeq(o.jobs, ",") {
			i := slices.IndexFunc(mainJobs, func(j Job) bool { return j.Name == n })
			if i < 0 {
				return nil, fmt.Errorf("-jobs: no job %q (have %s)", n, jobNames(mainJobs))
			}
			jobs = append(jobs, mainJobs[i])
		}
	}
	return jobs, nil
}

// bound is the longest the whole run may take: twice the planned job and
// TCP time, plus 15 minutes for starting, filling and stopping.
func (o *options) bound(jobs []Job) time.Duration {
	d := time.Duration(2*o.reps*len(jobs))*(o.runtime+time.Second) + time.Duration(o.reps)*o.tcpTime
	if o.sweep {
		d += time.Duration(2*o.sweepReps*len(sweepJobs())) * (o.sweepRuntime + time.Second)
	}
	return 2*d + 15*time.Minute
}

func run(ctx context.Context, o options, w io.Writer) error {
	jobs, err := o.check()
	if err != nil {
		return err
	}
	if o.printBound {
		fmt.Fprintln(w, int(o.bound(jobs).Seconds()))
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.bound(jobs))
	defer cancel()
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "sidebyside-"); err != nil {
			return err
		}
		defer os.RemoveAll(o.dir)
	}
	res := &Results{Started: time.Now(), Machine: machine(ctx), Config: Config{
		Reps: o.reps, RuntimeS: o.runtime.Seconds(), LUNBytes: o.lunMiB << 20, Channels: o.channels, TCPSeconds: o.tcpTime.Seconds(),
	}}
	if o.sweep {
		res.Config.SweepRuntime = o.sweepRuntime.Seconds()
	}
	m := res.Machine
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s, kernel %s\n", m.CPUs, m.CPU, m.Go, m.Kernel)
	fmt.Fprintf(w, "peer: %s, %s; TCP: %s\n", m.Fio, m.Nbdkit, m.Iperf3)
	fmt.Fprintf(w, "plan: %d job(s) x %d repetition(s) x 2 sides, %v each", len(jobs), o.reps, o.runtime)
	if o.sweep {
		fmt.Fprintf(w, "; sweeps %d point(s) x %d x 2 sides, %v each", len(sweepJobs()), o.sweepReps, o.sweepRuntime)
	}
	fmt.Fprintf(w, "; LUN %d MiB; bound %v\n", o.lunMiB, o.bound(jobs).Round(time.Second))
	load := func(when string) {
		if l, err := loadAvg(when); err == nil {
			res.Load = append(res.Load, l)
			fmt.Fprintf(w, "load average %s: %.2f %.2f %.2f\n", when, l.Load1, l.Load5, l.Load15)
		}
	}
	load("at start")

	ours, err := startGosrp(ctx, o.srptd, o.srpctl, o.dir, o.lunMiB<<20, o.channels)
	if err != nil {
		return err
	}
	defer ours.stop()
	peer, err := startNBD(ctx, o.dir, o.lunMiB<<20)
	if err != nil {
		return err
	}
	defer peer.stop()
	sides := []side{ours, peer}
	for _, s := range sides {
		f, err := s.fill(ctx)
		if err != nil {
			return err
		}
		res.Fill = append(res.Fill, f)
		fmt.Fprintf(w, "fill %-6s %d MiB written and read back in %.1f s\n", f.Side, o.lunMiB, f.Seconds)
	}

	one := func(j Job, rep int, rt time.Duration) error {
		for _, s := range sides {
			l, err := loadAvg(fmt.Sprintf("before %s %s rep %d", j.Name, s.info().Name, rep))
			if err == nil {
				res.Load = append(res.Load, l)
			}
			r, err := runJob(ctx, s, j, rt)
			if err != nil {
				return err
			}
			r.Side, r.Rep, r.Load1 = s.info().Name, rep, l.Load1
			res.Runs = append(res.Runs, r)
			fmt.Fprintln(w, runLine(r))
		}
		return nil
	}
	tcp := func(rep int) error {
		mibps, err := tcpStream(ctx, o.dir, o.tcpTime)
		if err != nil {
			return err
		}
		res.TCP = append(res.TCP, TCPRun{Rep: rep, MiBps: mibps})
		fmt.Fprintf(w, "%-26s %-6s rep %d %29.1f MiB/s (iperf3, one stream, %v)\n", "tcp-loopback", "", rep, mibps, o.tcpTime)
		return nil
	}
	for _, j := range jobs {
		for rep := 1; rep <= o.reps; rep++ {
			if j.read1M() { // the TCP stream right before the runs compared with it
				if err := tcp(rep); err != nil {
					return err
				}
			}
			if err := one(j, rep, o.runtime); err != nil {
				return err
			}
		}
	}
	for rep := 1; len(res.TCP) < o.reps; rep++ { // without the 1 MiB read job
		if err := tcp(rep); err != nil {
			return err
		}
	}
	if o.sweep {
		for _, j := range sweepJobs() {
			for rep := 1; rep <= o.sweepReps; rep++ {
				if err := one(j, rep, o.sweepRuntime); err != nil {
					return err
				}
			}
		}
	}
	ours.stop()
	peer.stop()
	load("at the end")
	for _, s := range sides {
		res.Sides = append(res.Sides, s.info())
	}
	res.Summary = summarize(res.Runs)
	res.Read1MPctOfTCP = read1MPctOfTCP(res.Summary, res.TCP)
	res.DurationS = time.Since(res.Started).Seconds()
	report(w, res)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
	}
	return nil
}

// machine describes this machine and the peer's programs.
func machine(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if ci, err := fs.CPUInfo(); err == nil && len(ci) > 0 {
			m.CPU = ci[0].ModelName
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	version := func(name string, args ...string) string {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, name, args...).Output()
		l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return l
	}
	m.Fio, m.Nbdkit, m.Iperf3 = version("fio", "--version"), version("nbdkit", "--version"), version("iperf3", "--version")
	return m
}

func runLine(r Run) string {
	return fmt.Sprintf("%-26s %-6s rep %d %8.0f IOPS %8.1f MiB/s  p50 %7.0f us p99 %7.0f us  CPU/IO server %6.1f client %6.1f us  load1 %.2f",
		r.Name, r.Side, r.Rep, r.IOPS, r.MiBps, r.LatP50Us, r.LatP99Us, r.ServerCPUUsPerIO, r.ClientCPUUsPerIO, r.Load1)
}

// report prints the summary: one table row per job with both sides' means
// and the ratios, then the TCP comparison and the run's length.
func report(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\nmeans over the repetitions (%s: srpctl -> srptd; %s: fio -> nbdkit); CPU = server + client us per I/O\n\n", sideOurs, sidePeer)
	fmt.Fprintf(w, "| job | %[1]s IOPS | %[2]s IOPS | IOPS ratio | %[1]s MiB/s | %[2]s MiB/s | %[1]s p50/p99 us | %[2]s p50/p99 us | %[1]s CPU | %[2]s CPU | CPU/IO ratio |\n", sideOurs, sidePeer)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range res.Summary {
		a, b := s.Sides[sideOurs], s.Sides[sidePeer]
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.1f | %.1f | %.0f / %.0f | %.0f / %.0f | %.1f + %.1f | %.1f + %.1f | %.2f |\n",
			s.Name, iopsEach(a), iopsEach(b), s.IOPSRatio, a.MiBps, b.MiBps, a.LatP50Us, a.LatP99Us, b.LatP50Us, b.LatP99Us,
			a.ServerCPUUsPerIO, a.ClientCPUUsPerIO, b.ServerCPUUsPerIO, b.ClientCPUUsPerIO, s.CPUPerIORatio)
	}
	fmt.Fprintln(w)
	for _, s := range res.Sides {
		fmt.Fprintf(w, "%s: %s\n", s.Name, s.Detail)
	}
	if p := res.Read1MPctOfTCP; p != nil {
		fmt.Fprintf(w, "1 MiB QD32 read as %% of one loopback TCP stream: %s %.0f %%, %s %.0f %%\n", sideOurs, p[sideOurs], sidePeer, p[sidePeer])
	}
	var loads []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range res.Load {
		if strings.HasPrefix(l.When, "before ") {
			lo, hi = min(lo, l.Load1), max(hi, l.Load1)
		} else {
			loads = append(loads, fmt.Sprintf("%s %.2f", l.When, l.Load1))
		}
	}
	if lo <= hi {
		loads = append(loads, fmt.Sprintf("between the runs %.2f to %.2f", lo, hi))
	}
	fmt.Fprintf(w, "load average (1 min): %s\n", strings.Join(loads, ", "))
	fmt.Fprintf(w, "duration: %.0f s\n", res.DurationS)
}

// iopsEach is the mean IOPS with each repetition's figure when there are
// several: "27400 (27412/24906)".
func iopsEach(m SideMean) string {
	s := fmt.Sprintf("%.0f", m.IOPS)
	if len(m.IOPSEach) > 1 {
		var e []string
		for _, v := range m.IOPSEach {
			e = append(e, fmt.Sprintf("%.0f", v))
		}
		s += " (" + strings.Join(e, "/") + ")"
	}
	return s
}
