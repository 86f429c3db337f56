package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as a fake client and server for runJob: with
// SIDEBYSIDE_HELPER=busy:D it spins one CPU for D, with idle:D it sleeps.
func TestMain(m *testing.M) {
	if h := os.Getenv("SIDEBYSIDE_HELPER"); h != "" {
		mode, ds, _ := strings.Cut(h, ":")
		d, err := time.ParseDuration(ds)
		if err != nil {
			os.Exit(2)
		}
		t0 := time.Now()
		if mode == "busy" {
			spins := 0
			for time.Since(t0) < d {
				spins++
			}
			fmt.Fprintln(os.Stderr, "spun", spins)
		} else {
			time.Sleep(d)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }

func TestParseFio(t *testing.T) {
	// Real fio 3.33 output (nbd engine against nbdkit), with the engine's
	// "connected" line before the JSON as fio writes it to --output.
	b, err := os.ReadFile("testdata/fio-randread.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseFio(b, "read")
	if err != nil {
		t.Fatal(err)
	}
	want := clientResult{Channels: 1, RuntimeS: 1.001, IOs: 58977, IOPS: 58918.081918, MiBps: 241328463.0 / (1 << 20), LatP50Us: 468.992, LatP99Us: 1925.12}
	if r.Channels != want.Channels || r.IOs != want.IOs || !near(r.RuntimeS, want.RuntimeS) || !near(r.IOPS, want.IOPS) ||
		!near(r.MiBps, want.MiBps) || !near(r.LatP50Us, want.LatP50Us) || !near(r.LatP99Us, want.LatP99Us) {
		t.Errorf("randread: got %+v, want %+v", r, want)
	}
	if _, err := parseFio(b, "write"); err == nil || !strings.Contains(err.Error(), "no write I/O") {
		t.Errorf("write side of a read job: err %v, want no write I/O", err)
	}

	b, err = os.ReadFile("testdata/fio-randwrite.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err = parseFio(b, "write")
	if err != nil {
		t.Fatal(err)
	}
	if r.IOs != 60263 || !near(r.IOPS, 60202.797203) || !near(r.LatP50Us, 485.376) || !near(r.LatP99Us, 1253.376) {
		t.Errorf("randwrite: got %+v", r)
	}

	for _, bad := range []struct{ name, in, want string }{
		{"no JSON", "fio: connected to NBD server\n", "no JSON"},
		{"job error", `{"jobs":[{"error":5,"read":{"total_ios":1}}]}`, "error 5"},
		{"two jobs", `{"jobs":[{},{}]}`, "2 jobs"},
		{"no percentiles", `{"jobs":[{"read":{"iops":1,"total_ios":1}}]}`, "percentiles"},
		{"truncated", `{"jobs":[{"read":`, "fio output"},
	} {
		if _, err := parseFio([]byte(bad.in), "read"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.name, err, bad.want)
		}
	}
}

func TestParseSrpctl(t *testing.T) {
	// srpctl bench --json as printed by cmd/srpctl (benchResult).
	out := `{"job": "randread-4k", "rw": "randread", "bs": 4096, "iodepth": 32, "channels": 2, "runtime_s": 2.000780166,
  "ios": 106430, "errors": 0, "iops": 53194.24982744455, "mib_per_s": 207.7900383884553, "lat_mean_us": 600.648,
  "lat_p50_us": 561.262, "lat_p99_us": 1699.008, "lat_p99_9_us": 3636.601, "lat_max_us": 8474.137}`
	r, err := parseSrpctl([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := clientResult{Channels: 2, RuntimeS: 2.000780166, IOs: 106430, IOPS: 53194.24982744455, MiBps: 207.7900383884553, LatP50Us: 561.262, LatP99Us: 1699.008}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	if _, err := parseSrpctl([]byte(strings.Replace(out, `"errors": 0`, `"errors": 3`, 1))); err == nil || !strings.Contains(err.Error(), "3 I/O errors") {
		t.Errorf("errors 3: err %v", err)
	}
	if _, err := parseSrpctl([]byte(strings.Replace(out, `"ios": 106430`, `"ios": 0`, 1))); err == nil {
		t.Error("no I/O: no error")
	}
	if _, err := parseSrpctl([]byte("srpctl: login rejected")); err == nil {
		t.Error("not JSON: no error")
	}
}

func TestParseIperf3(t *testing.T) {
	b, err := os.ReadFile("testdata/iperf3.json") // iperf 3.12 -J, one stream over 127.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseIperf3(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := 25663379835.560043 / 8 / (1 << 20); !near(got, want) {
		t.Errorf("got %v MiB/s, want %v", got, want)
	}
	b, err = os.ReadFile("testdata/iperf3-refused.json")
	if err != nil {
		t.Fatal(err)
	}
	// tcpStream retries on this one while the server starts.
	if _, err := parseIperf3(b); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("refused: err %v", err)
	}
}

func TestSummarize(t *testing.T) {
	rr := Job{Name: "randread-4k-qd32", RW: "randread", BS: 4096, QD: 32}
	rd := Job{Name: "read-1m-qd32", RW: "read", BS: 1 << 20, QD: 32}
	runs := []Run{
		{Job: rr, Side: sideOurs, Rep: 1, IOPS: 100, MiBps: 1, LatP50Us: 10, ServerCPUUsPerIO: 10, ClientCPUUsPerIO: 5},
		{Job: rr, Side: sidePeer, Rep: 1, IOPS: 100, MiBps: 2, LatP50Us: 30, ServerCPUUsPerIO: 8, ClientCPUUsPerIO: 2},
		{Job: rr, Side: sideOurs, Rep: 2, IOPS: 300, MiBps: 3, LatP50Us: 20, ServerCPUUsPerIO: 20, ClientCPUUsPerIO: 5},
		{Job: rr, Side: sidePeer, Rep: 2, IOPS: 100, MiBps: 2, LatP50Us: 30, ServerCPUUsPerIO: 8, ClientCPUUsPerIO: 2},
		{Job: rd, Side: sideOurs, Rep: 1, IOPS: 700, MiBps: 700},
		{Job: rd, Side: sidePeer, Rep: 1, IOPS: 1400, MiBps: 1400},
	}
	sum := summarize(runs)
	if len(sum) != 2 || sum[0].Name != rr.Name || sum[1].Name != rd.Name {
		t.Fatalf("jobs %+v", sum)
	}
	a := sum[0].Sides[sideOurs]
	if a.N != 2 || a.IOPS != 200 || a.MiBps != 2 || a.LatP50Us != 15 || a.ServerCPUUsPerIO != 15 || a.ClientCPUUsPerIO != 5 ||
		fmt.Sprint(a.IOPSEach) != "[100 300]" {
		t.Errorf("gosrp mean %+v", a)
	}
	// 200 / 100 IOPS; (15+5) / (8+2) µs per I/O.
	if sum[0].IOPSRatio != 2 || sum[0].CPUPerIORatio != 2 {
		t.Errorf("ratios %v %v, want 2 2", sum[0].IOPSRatio, sum[0].CPUPerIORatio)
	}
	if sum[1].IOPSRatio != 0.5 || sum[1].CPUPerIORatio != 0 { // no CPU figures: no ratio
		t.Errorf("read ratios %v %v", sum[1].IOPSRatio, sum[1].CPUPerIORatio)
	}
	pct := read1MPctOfTCP(sum, []TCPRun{{Rep: 1, MiBps: 1000}, {Rep: 2, MiBps: 2000}})
	if !near(pct[sideOurs], 700.0/1500*100) || !near(pct[sidePeer], 1400.0/1500*100) {
		t.Errorf("%% of TCP %v", pct)
	}
	if read1MPctOfTCP(sum[:1], []TCPRun{{MiBps: 1000}}) != nil || read1MPctOfTCP(sum, nil) != nil {
		t.Error("% of TCP without the 1 MiB read job or without TCP figures")
	}
}

func TestWindowAndPerIO(t *testing.T) {
	for _, c := range []struct{ rt, warm, end time.Duration }{
		{8 * time.Second, time.Second, 7500 * time.Millisecond},
		{3 * time.Second, 750 * time.Millisecond, 2625 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond, 1750 * time.Millisecond},
	} {
		if w, e := window(c.rt); w != c.warm || e != c.end {
			t.Errorf("window(%v) = %v..%v, want %v..%v", c.rt, w, e, c.warm, c.end)
		}
	}
	// 0.5 CPU-seconds over a 2 s window at 25000 IOPS: 50000 I/Os, 10 µs each.
	if got := perIO(0.5, 2, 25000); !near(got, 10) {
		t.Errorf("perIO = %v, want 10", got)
	}
	if perIO(1, 0, 100) != 0 || perIO(1, 1, 0) != 0 {
		t.Error("perIO without a window or I/O")
	}
}

// fakeSide runs the test binary as server (idle) and client (busy for
// the client duration), and reports iops for every run.
type fakeSide struct {
	srv    *server
	helper string // SIDEBYSIDE_HELPER of the client
	iops   float64
}

func (f *fakeSide) info() Side                         { return Side{Name: "fake"} }
func (f *fakeSide) serverPID() int                     { return f.srv.cmd.Process.Pid }
func (f *fakeSide) fill(context.Context) (Fill, error) { return Fill{}, nil }
func (f *fakeSide) stop()                              { f.srv.stop() }
func (f *fakeSide) client(ctx context.Context, _ Job, _ time.Duration) (*exec.Cmd, func() (clientResult, error)) {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "SIDEBYSIDE_HELPER="+f.helper)
	return cmd, func() (clientResult, error) { return clientResult{IOs: 1, IOPS: f.iops}, nil }
}

func startFake(t *testing.T, client string) *fakeSide {
	t.Setenv("SIDEBYSIDE_HELPER", "idle:30s")
	srv, err := startServer(context.Background(), t.TempDir()+"/server.log", os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	return &fakeSide{srv: srv, helper: client, iops: 1000}
}

func TestRunJobSamplesCPU(t *testing.T) {
	f := startFake(t, "busy:2200ms")
	r, err := runJob(context.Background(), f, Job{Name: "busy"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Window 0.5 s .. 1.75 s of a client spinning one CPU: at most one
	// CPU (plus a tick of rounding); at least some, however loaded the
	// machine. The idle server uses next to none.
	if !(r.WindowS > 1.1 && r.WindowS < 1.6) {
		t.Errorf("window %v s, want about 1.25", r.WindowS)
	}
	if r.ClientCPUs < 0.05 || r.ClientCPUs > 1.1 {
		t.Errorf("busy client: %v CPUs", r.ClientCPUs)
	}
	if r.ServerCPUs > 0.05 {
		t.Errorf("idle server: %v CPUs", r.ServerCPUs)
	}
	if !near(r.ClientCPUUsPerIO, r.ClientCPUs/1000*1e6) || !near(r.ServerCPUUsPerIO, r.ServerCPUs/1000*1e6) {
		t.Errorf("per I/O %v / %v µs for %v / %v CPUs at 1000 IOPS", r.ClientCPUUsPerIO, r.ServerCPUUsPerIO, r.ClientCPUs, r.ServerCPUs)
	}
}

func TestRunJobClientExitsEarly(t *testing.T) {
	f := startFake(t, "idle:100ms")
	_, err := runJob(context.Background(), f, Job{Name: "short"}, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "before the CPU sampling window") {
		t.Errorf("err %v, want a client that exited before the window", err)
	}
}

// TestBenchScriptQuick runs scripts/bench.sh as a user would, shortened
// (two jobs, 3 s runs, a 64 MiB LUN), and checks what its JSON holds.
func TestBenchScriptQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs and runs both sides for about 20 s")
	}
	for _, tool := range []string{"fio", "nbdkit", "iperf3", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "results.json")
	cmd := exec.CommandContext(ctx, "bash", "../../../scripts/bench.sh", "--quick", "--jobs", "randread-4k-qd32,read-1m-qd32",
		"--lun-mib", "64", "--json", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/bench.sh: %v\n%s", err, b)
	}
	for _, want := range []string{"load average at start", "| randread-4k-qd32 |", "1 MiB QD32 read as % of one loopback TCP stream", "scripts/bench.sh took"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("output lacks %q:\n%s", want, b)
		}
	}
	j, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(j, &res); err != nil {
		t.Fatal(err)
	}
	if res.Config.Reps != 1 || res.Config.RuntimeS != 3 || res.Config.LUNBytes != 64<<20 {
		t.Errorf("config %+v, want --quick's 1 repetition of 3 s on 64 MiB", res.Config)
	}
	if len(res.Fill) != 2 || !res.Fill[0].Verified || !res.Fill[1].Verified {
		t.Errorf("fill %+v", res.Fill)
	}
	wantOrder := []string{"randread-4k-qd32 " + sideOurs, "randread-4k-qd32 " + sidePeer, "read-1m-qd32 " + sideOurs, "read-1m-qd32 " + sidePeer}
	if len(res.Runs) != len(wantOrder) {
		t.Fatalf("%d runs, want %d", len(res.Runs), len(wantOrder))
	}
	for i, r := range res.Runs {
		if got := r.Name + " " + r.Side; got != wantOrder[i] {
			t.Errorf("run %d is %s, want %s", i, got, wantOrder[i])
		}
		if r.IOs <= 0 || r.IOPS <= 0 || r.MiBps <= 0 || r.LatP50Us <= 0 || r.LatP99Us < r.LatP50Us ||
			r.ServerCPUUsPerIO <= 0 || r.ClientCPUUsPerIO <= 0 || r.WindowS <= 0 || r.Channels < 1 {
			t.Errorf("run %d: %+v", i, r)
		}
		if want := r.IOPS * float64(r.BS) / (1 << 20); math.Abs(r.MiBps-want) > 0.01*want {
			t.Errorf("run %d: %.1f MiB/s, but %.0f IOPS of %d bytes", i, r.MiBps, r.IOPS, r.BS)
		}
	}
	if len(res.Summary) != 2 || !near(res.Summary[0].IOPSRatio, res.Runs[0].IOPS/res.Runs[1].IOPS) {
		t.Errorf("summary %+v", res.Summary)
	}
	if len(res.TCP) != 1 || res.TCP[0].MiBps <= 0 || res.Read1MPctOfTCP[sideOurs] <= 0 || res.Read1MPctOfTCP[sidePeer] <= 0 {
		t.Errorf("TCP %+v, %% %v", res.TCP, res.Read1MPctOfTCP)
	}
}
