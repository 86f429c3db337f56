package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// cpuSeconds is a process's utime+stime so far (all its threads), in
// seconds, from /proc/PID/stat (proc(5): fields 14 and 15, in clock ticks).
func cpuSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// cpuSample is the CPU time of a server and a client at one moment.
type cpuSample struct {
	at             time.Time
	server, client float64 // seconds
}

func sampleCPU(server, client int) (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	var err1, err2 error
	s.server, err1 = cpuSeconds(server)
	s.client, err2 = cpuSeconds(client)
	return s, errors.Join(err1, err2)
}

// window is where in a job run of length runtime the CPU is sampled:
// from warm after the client started (past its login and setup) to end
// (before its teardown).
func window(runtime time.Duration) (warm, end time.Duration) {
	return min(time.Second, runtime/4), runtime - min(500*time.Millisecond, runtime/8)
}

// perIO turns the CPU used in a window into microseconds per I/O, with
// the I/Os in the window taken as the run's IOPS times the window length.
func perIO(cpu, windowS, iops float64) float64 {
	if windowS <= 0 || iops <= 0 {
		return 0
	}
	return cpu / (iops * windowS) * 1e6
}

// runJob runs j once on s: starts the client, samples the CPU time of the
// server and the client process at both ends of the window, waits for
// the client and reads its result. The client gets runtime plus one
// minute to finish.
func runJob(ctx context.Context, s side, j Job, runtime time.Duration) (Run, error) {
	ctx, cancel := context.WithTimeout(ctx, runtime+time.Minute)
	defer cancel()
	cmd, parse := s.client(ctx, j, runtime)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return Run{}, err
	}
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	warm, end := window(runtime)
	var samples []cpuSample
	var waitErr error
	exited := false
	for _, at := range []time.Duration{warm, end} {
		select {
		case waitErr = <-done:
			exited = true
		case <-time.After(time.Until(t0.Add(at))):
		}
		if exited {
			break
		}
		smp, err := sampleCPU(s.serverPID(), cmd.Process.Pid)
		if err != nil {
			break // the client is exiting: reported below
		}
		samples = append(samples, smp)
	}
	if !exited {
		waitErr = <-done
	}
	name := filepath.Base(cmd.Args[0])
	if waitErr != nil {
		return Run{}, fmt.Errorf("%s %s: %v: %s", name, j.Name, waitErr, lastBytes(stderr.Bytes(), 600))
	}
	res, err := parse()
	if err != nil {
		return Run{}, fmt.Errorf("%s %s: %v: %s", name, j.Name, err, lastBytes(stderr.Bytes(), 600))
	}
	if len(samples) < 2 {
		return Run{}, fmt.Errorf("%s %s: exited after %v, before the CPU sampling window (%v..%v) ended", name, j.Name, time.Since(t0).Round(time.Millisecond), warm, end)
	}
	a, b := samples[0], samples[1]
	w := b.at.Sub(a.at).Seconds()
	return Run{
		Job: j, Channels: res.Channels, RuntimeS: res.RuntimeS, IOs: res.IOs, IOPS: res.IOPS, MiBps: res.MiBps,
		LatP50Us: res.LatP50Us, LatP99Us: res.LatP99Us,
		ServerCPUUsPerIO: perIO(b.server-a.server, w, res.IOPS), ClientCPUUsPerIO: perIO(b.client-a.client, w, res.IOPS),
		ServerCPUs: (b.server - a.server) / w, ClientCPUs: (b.client - a.client) / w, WindowS: w,
	}, nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// loadAvg reads /proc/loadavg.
func loadAvg(when string) (LoadSample, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return LoadSample{}, err
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return LoadSample{}, err
	}
	return LoadSample{When: when, Load1: l.Load1, Load5: l.Load5, Load15: l.Load15}, nil
}

// tcpStream measures one TCP stream over 127.0.0.1 with iperf3 for
// seconds and returns the received MiB/s.
func tcpStream(ctx context.Context, dir string, seconds time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, seconds+time.Minute)
	defer cancel()
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	srv, err := startServer(ctx, filepath.Join(dir, "iperf3.log"), "iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port))
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	// Connecting to see whether it listens would use up a test, so the
	// client itself retries while the server is not up yet.
	for try := 0; ; try++ {
		out, err := exec.CommandContext(ctx, "iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(port),
			"-t", strconv.FormatFloat(seconds.Seconds(), 'f', -1, 64), "-J").Output()
		mibps, perr := parseIperf3(out)
		if perr == nil {
			return mibps, nil
		}
		if try >= 50 || !strings.Contains(perr.Error(), "connect") {
			return 0, fmt.Errorf("iperf3: %v (%v)", perr, err)
		}
		if ok, serr := srv.exited(); ok {
			return 0, serr
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parseIperf3 reads the received rate from iperf3's -J output.
func parseIperf3(b []byte) (float64, error) {
	var out struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("output: %v", err)
	}
	if out.Error != "" {
		return 0, errors.New(out.Error)
	}
	if out.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("no data received")
	}
	return out.End.SumReceived.BitsPerSecond / 8 / (1 << 20), nil
}
