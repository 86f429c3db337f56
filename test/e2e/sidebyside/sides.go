package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clientResult is what a side's client reports for one job run.
type clientResult struct {
	Channels int
	RuntimeS float64
	IOs      int64
	IOPS     float64
	MiBps    float64
	LatP50Us float64
	LatP99Us float64
}

// side is one system under test: a server that lives for the whole run
// and a client program started once per job run.
type side interface {
	info() Side
	serverPID() int
	// fill writes the whole LUN once, so that the read jobs read data.
	fill(ctx context.Context) (Fill, error)
	// client returns the command that runs j for runtime and the parser
	// of its result, to be called once the command has exited.
	client(ctx context.Context, j Job, runtime time.Duration) (*exec.Cmd, func() (clientResult, error))
	stop()
}

// server is a long-running child process with its output in a log file.
type server struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // Wait's result, valid once done is closed
}

func startServer(ctx context.Context, logPath, name string, args ...string) (*server, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	return s, nil
}

// exited reports whether the server has ended, and with what error.
func (s *server) exited() (bool, error) {
	select {
	case <-s.done:
		return true, fmt.Errorf("%s exited (%v): %s", filepath.Base(s.cmd.Path), s.err, tail(s.log, 600))
	default:
		return false, nil
	}
}

// stop ends the server with SIGTERM, then SIGKILL after 10 s.
func (s *server) stop() {
	if ok, _ := s.exited(); ok {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// tail is the end of a log file, at most n bytes, for error messages.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// freePort is a TCP port on 127.0.0.1 that nothing listened on a moment
// ago (for servers that cannot be told to pick one themselves).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening polls until addr accepts TCP connections or s exits.
func waitListening(ctx context.Context, s *server, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if ok, err := s.exited(); ok {
			return err
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening after %v: %v", addr, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sizeName writes a block size as fio and srpctl take it: 4k, 1m.
func sizeName(bs int) string {
	switch {
	case bs >= 1<<20 && bs%(1<<20) == 0:
		return strconv.Itoa(bs>>20) + "m"
	case bs >= 1<<10 && bs%(1<<10) == 0:
		return strconv.Itoa(bs>>10) + "k"
	}
	return strconv.Itoa(bs)
}

// gosrp is srptd serving a RAM LUN over pure-Go iWARP on 127.0.0.1, with
// srpctl bench as the client.
type gosrp struct {
	srv      *server
	srpctl   string
	target   string
	channels int // ch_count the initiator uses (from srpctl's result)
}

// srptdConfig is the target's configuration: demo mode (every initiator
// admitted), one iWARP port on a kernel-chosen loopback port, one RAM LUN;
// everything else at srptd's defaults.
const srptdConfig = `[target]
demo_mode = true

[[port]]
name = "bench"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002c90300be0001"

[[lun]]
lun = 0
name = "ram0"
backstore = "ram"
size = %d
`

// startGosrp starts srptd in dir and waits for its login_info line. The
// target string gets max_sect=2048 (1 MiB commands; ib_srp's default is
// 1024 sectors) and ch_count=channels when channels > 0; otherwise the
// initiator's defaults apply.
func startGosrp(ctx context.Context, srptd, srpctl, dir string, lunBytes int64, channels int) (*gosrp, error) {
	data := filepath.Join(dir, "srptd-data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "srptd.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, srptdConfig, lunBytes), 0o644); err != nil {
		return nil, err
	}
	srv, err := startServer(ctx, filepath.Join(dir, "srptd.log"), srptd, "--config", conf, "--data-dir", data)
	if err != nil {
		return nil, err
	}
	g := &gosrp{srv: srv, srpctl: srpctl}
	for deadline := time.Now().Add(20 * time.Second); g.target == ""; {
		b, _ := os.ReadFile(srv.log)
		for l := range strings.Lines(string(b)) {
			if t, ok := strings.CutPrefix(strings.TrimSpace(l), "login_info: "); ok {
				g.target = t
				break
			}
		}
		if g.target != "" {
			break
		}
		if ok, err := srv.exited(); ok {
			return nil, err
		}
		if time.Now().After(deadline) {
			srv.stop()
			return nil, fmt.Errorf("srptd printed no login_info in 20 s: %s", tail(srv.log, 600))
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.target += ",max_sect=2048"
	if channels > 0 {
		g.target += fmt.Sprintf(",ch_count=%d", channels)
	}
	return g, nil
}

func (g *gosrp) info() Side {
	detail := "ch_count not given: the initiator's default, min(4, CPUs) channels"
	if g.channels > 0 {
		detail = fmt.Sprintf("%d RDMA channel(s); target %s", g.channels, g.target)
	}
	return Side{
		Name:   sideOurs,
		Server: "srptd --config srptd.toml (demo mode, iWARP on 127.0.0.1, RAM LUN)",
		Client: "srpctl bench " + g.target + " --rw RW --bs BS --qd QD --runtime T --json",
		Detail: detail,
	}
}

func (g *gosrp) serverPID() int { return g.srv.cmd.Process.Pid }

func (g *gosrp) stop() { g.srv.stop() }

// fill writes every 1 MiB slot of the LUN with CRC32C-checked blocks and
// reads them all back (srpctl bench --verify).
func (g *gosrp) fill(ctx context.Context) (Fill, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, g.srpctl, "bench", g.target, "--rw", "write", "--bs", "1m", "--qd", "8", "--verify").CombinedOutput()
	if err != nil {
		return Fill{}, fmt.Errorf("srpctl bench --verify: %v: %s", err, bytes.TrimSpace(out))
	}
	return Fill{Side: sideOurs, Seconds: time.Since(t0).Seconds(), Verified: true}, nil
}

// srpctlResult is the part of srpctl bench --json this program reads.
type srpctlResult struct {
	Channels int     `json:"channels"`
	Runtime  float64 `json:"runtime_s"`
	IOs      int64   `json:"ios"`
	Errors   int64   `json:"errors"`
	IOPS     float64 `json:"iops"`
	MiBps    float64 `json:"mib_per_s"`
	LatP50Us float64 `json:"lat_p50_us"`
	LatP99Us float64 `json:"lat_p99_us"`
}

func (g *gosrp) client(ctx context.Context, j Job, runtime time.Duration) (*exec.Cmd, func() (clientResult, error)) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, g.srpctl, "bench", g.target, "--rw", j.RW, "--bs", strconv.Itoa(j.BS),
		"--qd", strconv.Itoa(j.QD), "--runtime", runtime.String(), "--json")
	cmd.Stdout = &out
	return cmd, func() (clientResult, error) {
		r, err := parseSrpctl(out.Bytes())
		if err == nil {
			g.channels = r.Channels
		}
		return r, err
	}
}

func parseSrpctl(b []byte) (clientResult, error) {
	var r srpctlResult
	if err := json.Unmarshal(b, &r); err != nil {
		return clientResult{}, fmt.Errorf("srpctl bench output: %v: %q", err, b)
	}
	if r.Errors > 0 {
		return clientResult{}, fmt.Errorf("srpctl bench: %d I/O errors", r.Errors)
	}
	if r.IOs == 0 {
		return clientResult{}, errors.New("srpctl bench: no I/O completed")
	}
	return clientResult{Channels: r.Channels, RuntimeS: r.Runtime, IOs: r.IOs, IOPS: r.IOPS, MiBps: r.MiBps, LatP50Us: r.LatP50Us, LatP99Us: r.LatP99Us}, nil
}

// nbd is nbdkit's memory plugin on 127.0.0.1, with fio's nbd engine
// (libnbd, one connection per fio job) as the client.
type nbd struct {
	srv      *server
	uri      string
	dir      string
	lunBytes int64
}

// startNBD starts nbdkit in the foreground on a free loopback port.
func startNBD(ctx context.Context, dir string, lunBytes int64) (*nbd, error) {
	var last error
	for range 3 { // the port may be taken between freePort and nbdkit's bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		srv, err := startServer(ctx, filepath.Join(dir, "nbdkit.log"), "nbdkit", "-f", "-i", "127.0.0.1", "-p", strconv.Itoa(port),
			"memory", strconv.FormatInt(lunBytes, 10))
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if last = waitListening(ctx, srv, addr, 20*time.Second); last == nil {
			return &nbd{srv: srv, uri: "nbd://" + addr, dir: dir, lunBytes: lunBytes}, nil
		}
		srv.stop()
	}
	return nil, fmt.Errorf("nbdkit: %w", last)
}

func (n *nbd) info() Side {
	return Side{
		Name:   sidePeer,
		Server: "nbdkit -f -i 127.0.0.1 -p PORT memory SIZE",
		Client: "fio --name=JOB --ioengine=nbd --uri=nbd://127.0.0.1:PORT --rw=RW --bs=BS --iodepth=QD --size=SIZE --thread=1 " +
			"--lat_percentiles=1 --clat_percentiles=0 --percentile_list=50:99 --time_based=1 --runtime=T --output-format=json",
		Detail: "one NBD connection (fio's nbd engine, one job)",
	}
}

func (n *nbd) serverPID() int { return n.srv.cmd.Process.Pid }

func (n *nbd) stop() { n.srv.stop() }

// fioArgs are fio's arguments for j: one job (thread=1, so that one
// process does all the client work) at iodepth QD, latency percentiles of
// the whole I/O (submission to completion, as srpctl measures), JSON to
// out. runtime 0 leaves the job size-bound (the fill).
func (n *nbd) fioArgs(j Job, runtime time.Duration, out string) []string {
	args := []string{
		"--name=" + j.Name, "--ioengine=nbd", "--uri=" + n.uri, "--rw=" + j.RW, "--bs=" + strconv.Itoa(j.BS),
		"--iodepth=" + strconv.Itoa(j.QD), "--size=" + strconv.FormatInt(n.lunBytes, 10), "--thread=1",
		"--lat_percentiles=1", "--clat_percentiles=0", "--percentile_list=50:99",
		"--output-format=json", "--output=" + out,
	}
	if runtime > 0 {
		args = append(args, "--time_based=1", fmt.Sprintf("--runtime=%dms", runtime.Milliseconds()))
	}
	return args
}

// fill writes the LUN with 1 MiB writes carrying CRC32C checksums and
// reads it back (fio verify=crc32c).
func (n *nbd) fill(ctx context.Context) (Fill, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	out := filepath.Join(n.dir, "fio-fill.json")
	args := append(n.fioArgs(Job{Name: "fill", RW: "write", BS: 1 << 20, QD: 8}, 0, out), "--verify=crc32c", "--do_verify=1", "--verify_state_save=0")
	t0 := time.Now()
	if b, err := exec.CommandContext(ctx, "fio", args...).CombinedOutput(); err != nil {
		return Fill{}, fmt.Errorf("fio fill: %v: %s %s", err, bytes.TrimSpace(b), tail(out, 600))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return Fill{}, err
	}
	if _, err := parseFio(b, "write"); err != nil {
		return Fill{}, fmt.Errorf("fio fill: %w", err)
	}
	return Fill{Side: sidePeer, Seconds: time.Since(t0).Seconds(), Verified: true}, nil
}

func (n *nbd) client(ctx context.Context, j Job, runtime time.Duration) (*exec.Cmd, func() (clientResult, error)) {
	out := filepath.Join(n.dir, "fio-"+strings.ReplaceAll(j.Name, "/", "-")+".json")
	cmd := exec.CommandContext(ctx, "fio", n.fioArgs(j, runtime, out)...)
	return cmd, func() (clientResult, error) {
		b, err := os.ReadFile(out)
		if err != nil {
			return clientResult{}, err
		}
		dir := "read"
		if strings.HasSuffix(j.RW, "write") {
			dir = "write"
		}
		return parseFio(b, dir)
	}
}

// fioDir is one direction of a fio job in fio's JSON output (fio 3.x,
// --output-format=json).
type fioDir struct {
	IOPS      float64 `json:"iops"`
	BWBytes   float64 `json:"bw_bytes"` // bytes per second
	TotalIOs  int64   `json:"total_ios"`
	RuntimeMs float64 `json:"runtime"`
	Lat       struct {
		// Percentile → nanoseconds, keys as "50.000000".
		Percentile map[string]float64 `json:"percentile"`
	} `json:"lat_ns"`
}

// parseFio reads the first job's dir ("read" or "write") from fio's JSON
// output. Engines may print lines before the JSON (the nbd engine says it
// connected), so decoding starts at the first '{'.
func parseFio(b []byte, dir string) (clientResult, error) {
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return clientResult{}, fmt.Errorf("fio output has no JSON: %q", b)
	}
	var out struct {
		Jobs []struct {
			Error int    `json:"error"`
			Read  fioDir `json:"read"`
			Write fioDir `json:"write"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(bytes.NewReader(b[i:])).Decode(&out); err != nil {
		return clientResult{}, fmt.Errorf("fio output: %v", err)
	}
	if len(out.Jobs) != 1 {
		return clientResult{}, fmt.Errorf("fio output: %d jobs, want 1", len(out.Jobs))
	}
	j := out.Jobs[0]
	if j.Error != 0 {
		return clientResult{}, fmt.Errorf("fio job error %d (%s)", j.Error, syscall.Errno(j.Error))
	}
	d := j.Read
	if dir == "write" {
		d = j.Write
	}
	if d.TotalIOs == 0 {
		return clientResult{}, fmt.Errorf("fio: no %s I/O completed", dir)
	}
	p50, ok50 := d.Lat.Percentile["50.000000"]
	p99, ok99 := d.Lat.Percentile["99.000000"]
	if !ok50 || !ok99 {
		return clientResult{}, errors.New("fio output: no 50th/99th latency percentiles (lat_percentiles=1, percentile_list=50:99)")
	}
	return clientResult{
		Channels: 1, RuntimeS: d.RuntimeMs / 1e3, IOs: d.TotalIOs, IOPS: d.IOPS, MiBps: d.BWBytes / (1 << 20),
		LatP50Us: p50 / 1e3, LatP99Us: p99 / 1e3,
	}, nil
}
