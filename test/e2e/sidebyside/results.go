package main

import (
	"slices"
	"time"
)

// Side names as they appear in the output and the JSON.
const (
	sideOurs = "gosrp"  // srpctl bench → srptd, pure-Go iWARP
	sidePeer = "nbdkit" // fio's nbd engine → nbdkit memory plugin
)

// Results is everything one run measured; --json writes it and
// test/e2e/benchplot reads it.
type Results struct {
	Started   time.Time `json:"started"`
	DurationS float64   `json:"duration_s"` // wall clock of the whole run, seconds
	Machine   Machine   `json:"machine"`
	Config    Config    `json:"config"`
	Sides     []Side    `json:"sides"`
	// Load average samples: "start", before every job run, "end".
	Load []LoadSample `json:"load_average"`
	// One loopback TCP stream (iperf3) per repetition, right before the
	// 1 MiB read job's runs.
	TCP  []TCPRun `json:"tcp_loopback"`
	Fill []Fill   `json:"fill"`
	// Every job run, in the order run (jobs interleave the sides).
	Runs []Run `json:"runs"`
	// Per job: each side's means over the repetitions and the ratios.
	Summary []Summary `json:"summary"`
	// The 1 MiB QD32 read job's mean MiB/s as a percentage of the mean
	// loopback TCP stream, per side name; absent without both.
	Read1MPctOfTCP map[string]float64 `json:"read_1m_pct_of_tcp,omitempty"`
}

// Machine describes where the run took place.
type Machine struct {
	CPUs   int    `json:"cpus"`
	CPU    string `json:"cpu_model"`
	Go     string `json:"go"`
	Kernel string `json:"kernel"`
	Fio    string `json:"fio"`
	Nbdkit string `json:"nbdkit"`
	Iperf3 string `json:"iperf3"`
}

// Config is the run's settings.
type Config struct {
	Reps         int     `json:"repetitions"`
	RuntimeS     float64 `json:"runtime_s"`       // per job run, seconds
	SweepRuntime float64 `json:"sweep_runtime_s"` // per sweep point, seconds; 0 without sweeps
	LUNBytes     int64   `json:"lun_bytes"`
	Channels     int     `json:"channels"` // ch_count given in TARGET; 0: the initiator's default
	TCPSeconds   float64 `json:"tcp_s"`
}

// Side says what one side runs.
type Side struct {
	Name   string `json:"name"`
	Server string `json:"server"` // the server command line
	Client string `json:"client"` // the client command of one job, with placeholders
	Detail string `json:"detail"`
}

// LoadSample is /proc/loadavg at one moment.
type LoadSample struct {
	When   string  `json:"when"`
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
}

// TCPRun is one iperf3 loopback stream.
type TCPRun struct {
	Rep   int     `json:"rep"`
	MiBps float64 `json:"mib_per_s"` // received, MiB (2^20 bytes) per second
}

// Fill is the pass that writes a side's whole LUN before the jobs.
type Fill struct {
	Side     string  `json:"side"`
	Seconds  float64 `json:"seconds"`
	Verified bool    `json:"verified"` // read back and checked (srpctl bench --verify)
}

// Job is one workload: every side runs it with the same parameters.
type Job struct {
	Name  string `json:"job"`
	RW    string `json:"rw"` // read, write, randread, randwrite
	BS    int    `json:"bs"` // bytes per I/O
	QD    int    `json:"iodepth"`
	Sweep string `json:"sweep,omitempty"` // "qd" or "bs" for the chart sweeps, "" for the main jobs
}

// read1M reports whether j is the main 1 MiB QD32 sequential read job, the
// one compared with the loopback TCP stream.
func (j Job) read1M() bool { return j.Sweep == "" && j.RW == "read" && j.BS == 1<<20 && j.QD == 32 }

// Run is one side's run of one job.
type Run struct {
	Job
	Side     string  `json:"side"`
	Rep      int     `json:"rep"`       // 1-based repetition
	Channels int     `json:"channels"`  // RDMA channels (gosrp) or NBD connections (nbdkit)
	RuntimeS float64 `json:"runtime_s"` // as the client measured it
	IOs      int64   `json:"ios"`
	IOPS     float64 `json:"iops"`
	MiBps    float64 `json:"mib_per_s"`
	LatP50Us float64 `json:"lat_p50_us"` // submission to completion, microseconds
	LatP99Us float64 `json:"lat_p99_us"`
	// CPU (utime+stime from /proc/PID/stat) used by each process during
	// the sampling window, per I/O: microseconds.
	ServerCPUUsPerIO float64 `json:"server_cpu_us_per_io"`
	ClientCPUUsPerIO float64 `json:"client_cpu_us_per_io"`
	// The same as CPU seconds per second of the window (1.0 = one CPU busy).
	ServerCPUs float64 `json:"server_cpus"`
	ClientCPUs float64 `json:"client_cpus"`
	WindowS    float64 `json:"cpu_window_s"` // the sampling window, seconds
	Load1      float64 `json:"load1_before"` // 1-minute load average just before the run
}

// Summary is one job's figures, the sides' means over the repetitions.
type Summary struct {
	Job
	Sides map[string]SideMean `json:"sides"`
	// ours / peer: IOPS, and CPU per I/O of server and client together.
	IOPSRatio     float64 `json:"iops_ratio"`
	CPUPerIORatio float64 `json:"cpu_per_io_ratio"`
}

// SideMean is the mean of one side's runs of one job.
type SideMean struct {
	N                int       `json:"runs"`
	IOPS             float64   `json:"iops"`
	IOPSEach         []float64 `json:"iops_each"` // every repetition, in order
	MiBps            float64   `json:"mib_per_s"`
	LatP50Us         float64   `json:"lat_p50_us"`
	LatP99Us         float64   `json:"lat_p99_us"`
	ServerCPUUsPerIO float64   `json:"server_cpu_us_per_io"`
	ClientCPUUsPerIO float64   `json:"client_cpu_us_per_io"`
}

// summarize groups runs by job (in order of first appearance) and side
// and computes the means and ratios.
func summarize(runs []Run) []Summary {
	var out []Summary
	idx := map[string]int{}
	for _, r := range runs {
		i, ok := idx[r.Name]
		if !ok {
			i = len(out)
			idx[r.Name] = i
			out = append(out, Summary{Job: r.Job, Sides: map[string]SideMean{}})
		}
		m := out[i].Sides[r.Side]
		n := float64(m.N)
		avg := func(old, v float64) float64 { return (old*n + v) / (n + 1) }
		m.IOPS = avg(m.IOPS, r.IOPS)
		m.MiBps = avg(m.MiBps, r.MiBps)
		m.LatP50Us = avg(m.LatP50Us, r.LatP50Us)
		m.LatP99Us = avg(m.LatP99Us, r.LatP99Us)
		m.ServerCPUUsPerIO = avg(m.ServerCPUUsPerIO, r.ServerCPUUsPerIO)
		m.ClientCPUUsPerIO = avg(m.ClientCPUUsPerIO, r.ClientCPUUsPerIO)
		m.IOPSEach = append(m.IOPSEach, r.IOPS)
		m.N++
		out[i].Sides[r.Side] = m
	}
	for i := range out {
		a, okA := out[i].Sides[sideOurs]
		b, okB := out[i].Sides[sidePeer]
		if !okA || !okB {
			continue
		}
		out[i].IOPSRatio = ratio(a.IOPS, b.IOPS)
		out[i].CPUPerIORatio = ratio(a.ServerCPUUsPerIO+a.ClientCPUUsPerIO, b.ServerCPUUsPerIO+b.ClientCPUUsPerIO)
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// read1MPctOfTCP is the 1 MiB QD32 read job's MiB/s per side as a
// percentage of the mean loopback TCP stream; nil when either is missing.
func read1MPctOfTCP(sum []Summary, tcp []TCPRun) map[string]float64 {
	if len(tcp) == 0 {
		return nil
	}
	var t float64
	for _, r := range tcp {
		t += r.MiBps
	}
	t /= float64(len(tcp))
	i := slices.IndexFunc(sum, func(s Summary) bool { return s.read1M() })
	if i < 0 || t == 0 {
		return nil
	}
	out := map[string]float64{}
	for name, m := range sum[i].Sides {
		out[name] = 100 * m.MiBps / t
	}
	return out
}
