package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// syncBuf is a goroutine-safe output buffer.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testCtx(t *testing.T) context.Context {
	d := 60 * time.Second
	if dl, ok := t.Deadline(); ok {
		d = time.Until(dl) - 5*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startDaemon runs srptd with args until the test ends and returns the
// login_info lines it printed.
func startDaemon(t *testing.T, args ...string) []string {
	t.Helper()
	ctx := testCtx(t)
	runCtx, stop := context.WithCancel(ctx)
	var out, errOut syncBuf
	up := make(chan ready, 1)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, args, &out, &errOut, func(r ready) { up <- r }) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("srptd: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("srptd did not shut down")
		}
		if testing.Verbose() {
			t.Log(errOut.String())
		}
	})
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("srptd exited: %v\n%s", err, errOut.String())
	case <-ctx.Done():
		t.Fatal("srptd did not start")
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(l, "login_info: "); ok {
			lines = append(lines, s)
		}
	}
	return lines
}

func writeConfig(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "srptd.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEndToEnd runs srptd on iWARP with a RAM LUN and a file LUN, logs in
// with the gosrp initiator from the printed login_info, and moves data.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `
[target]
demo_mode = true
max_req_size = "8276B"
rq_size = 32

[[port]]
name = "p0"
transport = "iwarp"
listen = ["127.0.0.1:0"]
service_guid = "0002:c903:00a0:b1c2"

[[lun]]
lun = 0
backstore = "ram"
size = "64MiB"

[[lun]]
lun = 1
backstore = "file"
path = "`+filepath.Join(dir, "disk.img")+`"
size = "16MiB"
block_size = 4096
`)
	lines := startDaemon(t, "-config", cfg)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "id_ext=0002c90300a0b1c2,ioc_guid=0002c90300a0b1c2,dest=127.0.0.1:") {
		t.Fatalf("login_info %q", lines)
	}
	opts, err := initiator.ParseTarget(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	s, err := initiator.Dial(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	luns, err := s.ReportLUNs(ctx)
	if err != nil || len(luns) != 2 {
		t.Fatalf("REPORT LUNS %v %v", luns, err)
	}
	for _, tc := range []struct {
		lun uint64
		bs  int
	}{{initiator.LUN(0), 512}, {initiator.LUN(1), 4096}} {
		c, err := s.ReadCapacity16(ctx, tc.lun)
		if err != nil {
			t.Fatal(err)
		}
		if int(c.BlockSize) != tc.bs {
			t.Fatalf("LUN %x: block size %d, want %d", tc.lun, c.BlockSize, tc.bs)
		}
		for _, n := range []int{tc.bs, 64 << 10, 512 << 10} {
			w := make([]byte, n)
			for k := range w {
				w[k] = byte(k*13 + n)
			}
			if err := s.Write16(ctx, tc.lun, 8, w, tc.bs, false); err != nil {
				t.Fatalf("write %d: %v", n, err)
			}
			r := make([]byte, n)
			if err := s.Read16(ctx, tc.lun, 8, r, tc.bs, false); err != nil {
				t.Fatalf("read %d: %v", n, err)
			}
			if !bytes.Equal(r, w) {
				t.Fatalf("LUN %x: %d bytes read back differ", tc.lun, n)
			}
		}
	}
}

func TestConfigErrors(t *testing.T) {
	base := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n"
	for _, tc := range []struct{ cfg, want string }{
		{"", "port: at least one"},
		{base + "[target]\nbogus = 1\n", "unknown key target.bogus"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\n", "lun[0].size"},
		{base + "[[lun]]\nlun=0\nbackstore=\"tape\"\nsize=1\n", "lun[0].backstore"},
		{base + "[[lun]]\nbackstore=\"ram\"\nsize=\"1MiB\"\n", "lun[0].lun"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1 parsec\"\n", "bad size"},
		{base + "[[lun]]\nlun=0\nbackstore=\"file\"\n", "lun[0].path"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\nblock_size=1000\n", "lun[0].block_size"},
		{base + "[target]\nmax_rsp_size = 20\n", "target.max_rsp_size"},
		{base + "[target]\nsq_size = 1\n", "target.sq_size"},
		{"[[port]]\ntransport=\"ib\"\nlisten=[\"1:2\"]\n", "port[0].transport"},
		{"[[port]]\nlisten=[\"nohost\"]\n", "port[0].listen"},
		{base + "service_guid=\"12\"\n", "port[0].service_guid"},
		{base + "[[acl]]\ninitiator=\"xyz\"\n", "acl[0].initiator"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\n[[acl]]\ninitiator=\"0x01\"\nluns={0=3}\n", "acl[0].luns.0"},
	} {
		c, err := LoadConfig(tc.cfg, "test")
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestDefaultConfig(t *testing.T) {
	c, err := readConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.LUNs) != 1 || c.LUNs[0].Size != 1<<30 || c.LUNs[0].Backstore != "ram" {
		t.Fatalf("LUNs %+v", c.LUNs)
	}
	if p := c.Ports[0]; p.Transport != "iwarp" || len(p.Listen) != 2 || p.Listen[0] != "0.0.0.0:5555" || p.Listen[1] != "[::]:5555" {
		t.Fatalf("port %+v", p)
	}
	if tc := c.targetConfig(1); !tc.DemoMode {
		t.Fatal("default config is not in demo mode")
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-check"}, &out, io.Discard, nil); err != nil || out.String() != "configuration OK\n" {
		t.Fatalf("-check: %v %q", err, out.String())
	}
}

func TestVerbsWithoutTag(t *testing.T) {
	cfg := writeConfig(t, "[[port]]\ntransport = \"verbs\"\n")
	err := run(testCtx(t), []string{"-config", cfg}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "verbs") {
		t.Fatalf("err %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"8276": 8276, "64KiB": 64 << 10, "1GiB": 1 << 30, "1.5MiB": 3 << 19, "2M": 2 << 20, "512B": 512} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", s, got, err, want)
		}
	}
}

// TestShutdownWithSession stops srptd while an initiator is logged in: the
// daemon logs the channel out and returns, and the initiator's next command
// fails instead of hanging.
func TestShutdownWithSession(t *testing.T) {
	cfg := writeConfig(t, `
[target]
demo_mode = true
shutdown_timeout = "20s"
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "8MiB"
`)
	ctx := testCtx(t)
	runCtx, stop := context.WithCancel(ctx)
	var out, errOut syncBuf
	up := make(chan ready, 1)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"-config", cfg}, &out, &errOut, func(r ready) { up <- r }) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("srptd exited: %v", err)
	}
	line, _ := strings.CutPrefix(strings.Split(out.String(), "\n")[0], "login_info: ")
	opts, err := initiator.ParseTarget(line)
	if err != nil {
		t.Fatal(err)
	}
	opts.ReconnectDelay = -1
	opts.FastIOFailTmo = 100 * time.Millisecond
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	s, err := initiator.Dial(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.TestUnitReady(ctx, initiator.LUN(0)); err != nil && !initiator.IsSense(err, 6, 0x29, 0) {
		t.Fatal(err)
	}
	t1 := time.Now()
	stop()
	defer func() { t.Logf("shutdown took %v", time.Since(t1)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("srptd did not shut down")
	}
	if !strings.Contains(errOut.String(), "logging out channel") {
		t.Errorf("no T_LOGOUT in the log:\n%s", errOut.String())
	}
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.TestUnitReady(cctx, initiator.LUN(0))
	t.Logf("after shutdown: %v in %v", err, time.Since(t0))
	if err == nil {
		t.Fatal("command succeeded after the target shut down")
	}
}

// TestSIGHUPReload: SIGHUP applies a new demo_mode to the next login.
func TestSIGHUPReload(t *testing.T) {
	text := `
[target]
demo_mode = false
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "8MiB"
`
	cfg := writeConfig(t, text)
	ctx := testCtx(t)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errOut syncBuf
	up := make(chan ready, 1)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"-config", cfg}, &out, &errOut, func(r ready) { up <- r }) }()
	t.Cleanup(func() { stop(); <-done })
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("srptd exited: %v", err)
	}
	line, _ := strings.CutPrefix(strings.Split(out.String(), "\n")[0], "login_info: ")
	opts, err := initiator.ParseTarget(line)
	if err != nil {
		t.Fatal(err)
	}
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	if s, err := initiator.Dial(ctx, dev, opts); err == nil {
		s.Close()
		t.Fatal("login accepted without an ACL")
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(text, "demo_mode = false", "demo_mode = true", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(errOut.String(), "access policy reloaded") {
		select {
		case <-ctx.Done():
			t.Fatalf("no reload:\n%s", errOut.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	s, err := initiator.Dial(ctx, dev, opts)
	if err != nil {
		t.Fatalf("login after reload: %v", err)
	}
	s.Close()
}
