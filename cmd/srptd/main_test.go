package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
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

// TestConfigErrors: every configuration error names the file, the line
// and the key, and nothing starts.
func TestConfigErrors(t *testing.T) {
	base := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n" // lines 1-2
	ram := "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\n"
	for _, tc := range []struct{ cfg, want string }{
		{"", "srptd.toml: port: at least one [[port]] is required (or --listen HOST:PORT)"},
		{base + "[target]\nbogus = 1\n", "srptd.toml:4: target.bogus: unknown key"},
		{base + ram + "[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=1024\nfrob=2\n", "srptd.toml:11: lun[1].frob: unknown key"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\n", "srptd.toml:3: lun[0].size: a ram backstore needs a size"},
		{base + "[[lun]]\nlun=0\nbackstore=\"tape\"\nsize=1\n", `srptd.toml:5: lun[0].backstore: "tape" is not ram, file, block or rbd`},
		{base + "[[lun]]\nbackstore=\"ram\"\nsize=\"1MiB\"\n", "srptd.toml:3: lun[0].lun: required (the LUN number, 0..16383)"},
		{base + ram + "[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=\"1 parsec\"\n", `srptd.toml:10: lun[1].size: bad size "1 parsec": want bytes, or a number with a binary unit in any case: k or KiB, m or MiB, g or GiB, t or TiB (powers of 1024; fractions too, as in 1.5g)`},
		{base + ram + "[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=\"1MiB\"\nblock_size=\"big\"\n", "srptd.toml:11: lun[1].block_size: incompatible types: TOML value has type string; destination has type integer"},
		{base + "[[lun]]\nlun=0\nbackstore=\"file\"\n", "srptd.toml:3: lun[0].path: a file backstore needs a path"},
		{base + ram + "\n[[lun]]\nlun = 1\nbackstore = \"ram\"\nsize = \"1MiB\"\n# comment\nblock_size = 3000\n", "srptd.toml:13: lun[1].block_size: 3000 is not 512, 1024, 2048 or 4096"},
		{base + ram + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\n", "srptd.toml:8: lun[1].lun: LUN 0 used twice"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\nserial=\"d1\"\n[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=\"1MiB\"\nserial=\"d1\"\n", `srptd.toml:12: lun[1].serial: "d1" is the serial of lun[0] already (VPD 80h; each logical unit needs its own)`},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\nserial=\"vm01\"\n[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=\"1MiB\"\nserial=\"xx01\"\n", "srptd.toml:12: lun[1].serial: gives LUN 1 the NAA designator 60014050100000000000000000000000 (VPD 83h) of lun[0]: initiators and multipath would take the two for one disk; set another serial"},
		{base + "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\nwwn=\"60014050000000000000000000000001\"\n[[lun]]\nlun=1\nbackstore=\"ram\"\nsize=\"1MiB\"\nwwn=\"6001405000000000:0000000000000001\"\n", "srptd.toml:12: lun[1].wwn: gives LUN 1 the NAA designator 60014050000000000000000000000001 (VPD 83h) of lun[0]: initiators and multipath would take the two for one disk; set another wwn"},
		{base + "[target]\nmax_rsp_size = 20\n", "srptd.toml:4: target.max_rsp_size: 20 bytes out of range 40..1024"},
		{base + "[target]\nmax_data_memory = \"1MiB\"\n", "srptd.toml:4: target.max_data_memory: 1048576 bytes is below one buffer of max_data_len (16777216 bytes)"},
		{base + "[target]\nsq_size = 1\n", "srptd.toml:4: target.sq_size: 1 work requests out of range 4..65535"},
		{base + "[target]\nshutdown_timeout = \"soon\"\n", `srptd.toml:4: target.shutdown_timeout: bad duration "soon" (want e.g. "10s")`},
		{"[[port]]\ntransport=\"ib\"\nlisten=[\"1:2\"]\n", `srptd.toml:2: port[0].transport: "ib" is not iwarp or verbs`},
		{base + "[[port]]\nlisten=[\n  \"a:1\",\n  \"nohost\",\n]\n", `srptd.toml:4: port[1].listen: "nohost": want host:port or [ipv6]:port`},
		{base + "service_guid=\"12\"\n", `srptd.toml:3: port[0].service_guid: "12": want 16 hex digits (optionally xxxx:xxxx:xxxx:xxxx)`},
		{base + "[[acl]]\ninitiator=\"xyz\"\n", "srptd.toml:4: acl[0].initiator: initiator \"xyz\": want a port GUID"},
		{base + ram + "[[acl]]\ninitiator=\"0x01\"\nluns={0=3}\n", "srptd.toml:9: acl[0].luns.0: target LUN 3 is not configured"},
		{base + ram + "[[acl]]\ninitiator=\"0x01\"\n[acl.luns]\n0 = 0\n7 = 5\n", "srptd.toml:11: acl[0].luns.7: target LUN 5 is not configured"},
		{base + ram + "[[acl]]\ninitiator=\"0x01\"\nread_only = [0, 2]\n", "srptd.toml:9: acl[0].read_only: LUN 2 is not configured"},
		{base + ram + "[[acl]]\ninitiator=\"0x01\"\nluns = {1 = 0}\nread_only = [0]\n", "srptd.toml:10: acl[0].read_only: LUN 0 is not a key of luns"},
		{base + ram + "[[acl]]\ninitiator=\"0x01\"\n[[acl]]\ninitiator=\"0x0001\"\n", "srptd.toml:10: acl[1].initiator: 0x00000000000000000000000000000001 has an ACL already"},
		{base + "[target]\nsrq_size = 2\n", "srptd.toml:4: target.srq_size: 2 receive buffers out of range 4..65535"},
		{base + "[metrics]\nlisten = \"nowhere\"\n", `srptd.toml:4: metrics.listen: "nowhere": want host:port or [ipv6]:port`},
		{"port = 5\n", "srptd.toml:1: port: incompatible types: TOML value has type int64; destination has type slice"},
		{base + "[target\n", "srptd.toml:3: expected '.' or ']' to end table name"},
		{base + "[[lun]]\nlun = = 3\n", "srptd.toml:4: "},
	} {
		path := filepath.Join(t.TempDir(), "srptd.toml")
		if err := os.WriteFile(path, []byte(tc.cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := run(testCtx(t), []string{"-check", "-config", path}, &out, io.Discard, nil)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), filepath.Dir(path)+"/")
		}
		if err == nil || !strings.HasPrefix(got, tc.want) {
			t.Errorf("config %q:\n got %q\nwant %q", tc.cfg, got, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("config %q: -check printed %q", tc.cfg, out.String())
		}
	}
}

// TestFlagErrors: an error in a value a flag set names the flag.
func TestFlagErrors(t *testing.T) {
	cfg := writeConfig(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "nohost"}, `--listen: "nohost": want host:port or [ipv6]:port`},
		{[]string{"-guid", "xyz"}, `--guid: "xyz": want 16 hex digits`},
		{[]string{"-demo", "maybe"}, `invalid argument "maybe" for "--demo" flag`},
		{[]string{"--metrics", "x"}, `--metrics: "x": want host:port`},
	} {
		err := run(testCtx(t), append([]string{"-check", "-config", cfg}, tc.args...), io.Discard, io.Discard, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestNothingStartsOnError: a LUN that cannot open stops the daemon before
// anything listens, and closes what it had opened.
func TestNothingStartsOnError(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `
[admin]
socket = "`+filepath.Join(dir, "a.sock")+`"
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "file"
path = "`+filepath.Join(dir, "disk.img")+`"
size = "1MiB"
[[lun]]
lun = 1
backstore = "file"
path = "`+filepath.Join(dir, "missing", "disk.img")+`"
`)
	started := false
	err := run(testCtx(t), []string{"-config", cfg}, io.Discard, io.Discard, func(ready) { started = true })
	if err == nil || started || !strings.Contains(err.Error(), ":14: lun[1].path: ") {
		t.Fatalf("err %v started %v", err, started)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.sock")); err == nil {
		t.Error("admin socket created")
	}
}

func TestDefaultConfig(t *testing.T) {
	c, err := LoadConfig(defaultConfig, "default")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.LUNs) != 1 || c.LUNs[0].Size != 1<<30 || c.LUNs[0].Backstore != "file" || c.LUNs[0].Path != "lun0.img" {
		t.Fatalf("LUNs %+v", c.LUNs)
	}
	if p := c.Ports[0]; p.Transport != "iwarp" || len(p.Listen) != 1 || p.Listen[0] != "127.0.0.1:5555" {
		t.Fatalf("port %+v", p)
	}
	if c.Target.DemoMode != nil {
		t.Fatal("default config sets demo_mode")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-check", "-data-dir", filepath.Join(dir, "d"), "-listen", "127.0.0.1:0"}, &out, io.Discard, nil); err != nil || out.String() != "configuration OK\n" {
		t.Fatalf("-check: %v %q", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Fatal("-check created the data directory")
	}
}

func TestVerbsWithoutTag(t *testing.T) {
	cfg := writeConfig(t, "[[port]]\ntransport = \"verbs\"\n")
	err := run(testCtx(t), []string{"-config", cfg}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "verbs") {
		t.Fatalf("err %v", err)
	}
}

// TestSizeForms: a size key takes what srpctl's size flags take
// (adminapi.ParseSize): the forms accepted before keep their meaning, the
// lower-case short units (1g) and fractions of them are taken too, and an
// SI unit (30GB) is refused naming the binary forms.
func TestSizeForms(t *testing.T) {
	for str, want := range map[string]Size{
		"8276": 8276, "64KiB": 64 << 10, "1GiB": 1 << 30, "1.5MiB": 3 << 19, "2M": 2 << 20, "512B": 512, "64 KiB": 64 << 10, "1e3": 1000,
		"1g": 1 << 30, "1gib": 1 << 30, "1.5g": 3 << 29, "64k": 64 << 10, "2t": 2 << 40,
	} {
		var got Size
		if err := got.UnmarshalTOML(str); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", str, got, err, want)
		}
	}
	var got Size
	want := `bad size "30GB": GB is a power of 1000 to some programs and of 1024 to others; write 30GiB or 30g for the power of 1024, or the bytes`
	if err := got.UnmarshalTOML("30GB"); err == nil || err.Error() != want {
		t.Errorf("30GB: %d %v, want %q", got, err, want)
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

// TestEncodeRoundTrip: a configuration with every kind of key encodes to
// TOML that loads back to the same values.
func TestEncodeRoundTrip(t *testing.T) {
	withPhysicalMemory(t, 4<<30) // room for its 3 GiB RAM LUN on any machine
	text := `
[target]
max_req_size = "8276B"
max_rsp_size = 512
rq_size = 64
max_rdma_size = "1MiB"
max_data_memory = "256MiB"
max_total_channels = 32
use_srq = true
srq_size = 512
demo_mode = false
immediate_data = true
shutdown_timeout = "1m30s"
data_dir = "/var/lib/srptd"
[[port]]
name = "a"
listen = ["0.0.0.0:5555", "[::]:5555"]
service_guid = "0002:c903:00a0:b1c2"
mpa_crc = true
[[lun]]
lun = 0
backstore = "ram"
size = "3GiB"
thin_provisioning = false
[[lun]]
lun = 7
name = "seven"
backstore = "file"
path = "/srv/x.img"
size = 1536
block_size = 512
read_only = true
serial = "abc"
wwn = "6001405abcdef0123456789abcdef012"
[[acl]]
initiator = "192.0.2.1"
[[acl]]
initiator = "0x1234"
luns = { 0 = 7, 1 = 0 }
read_only = [1]
[admin]
socket = "/run/srptd.sock"
[metrics]
listen = "127.0.0.1:9100"
`
	c, err := LoadConfig(text, "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadConfig(string(b), "b.toml")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	back.src, c.src = nil, nil
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip differs:\n%+v\n%+v\n%s", back, c, b)
	}
	for _, want := range []string{`size = "3GiB"`, "size = 1536", `shutdown_timeout = "1m30s"`, `max_rdma_size = "1MiB"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in\n%s", want, b)
		}
	}
	// An empty configuration has no empty tables.
	b, _ = (&Config{Ports: []PortSection{{Listen: []string{"127.0.0.1:1"}}}}).Encode()
	if strings.Contains(string(b), "[target]") || strings.Contains(string(b), "acl") {
		t.Errorf("empty sections written:\n%s", b)
	}
}

// TestACLReadOnlyAndSRQ: an ACL's read_only LUN refuses writes with DATA
// PROTECT, WRITE PROTECTED (SBC-3: 07h/27h/00h) while its other LUN takes
// them; the port runs on a shared receive queue (use_srq).
func TestACLReadOnlyAndSRQ(t *testing.T) {
	cfg := writeConfig(t, `
[target]
use_srq = true
srq_size = 64
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "1MiB"
[[lun]]
lun = 1
backstore = "ram"
size = "1MiB"
[[acl]]
initiator = "127.0.0.1"
read_only = [1]
`)
	dr := launch(t, "-config", cfg)
	s := dr.login(t)
	ctx := testCtx(t)
	w := make([]byte, 512)
	if err := s.Write16(ctx, initiator.LUN(0), 0, w, 512, false); err != nil {
		t.Fatalf("write to LUN 0: %v", err)
	}
	if err := s.Write16(ctx, initiator.LUN(1), 0, w, 512, false); !initiator.IsSense(err, 7, 0x27, 0) {
		t.Fatalf("write to read-only LUN 1: %v", err)
	}
	if err := s.Read16(ctx, initiator.LUN(1), 0, w, 512, false); err != nil {
		t.Fatalf("read of read-only LUN 1: %v", err)
	}
}

// TestThinProvisioning: a RAM or file LUN advertises logical block
// provisioning by default (READ CAPACITY(16) LBPME, SBC-3 §5.16.2) and UNMAP
// works; thin_provisioning = false turns it off, and UNMAP is then an
// unsupported command (05/20/00, SBC-3 §5.29: UNMAP needs LBPME).
func TestThinProvisioning(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `
[target]
demo_mode = true
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "1MiB"
[[lun]]
lun = 1
backstore = "file"
path = "`+filepath.Join(dir, "thin.img")+`"
size = "1MiB"
[[lun]]
lun = 2
backstore = "ram"
size = "1MiB"
thin_provisioning = false
`)
	dr := launch(t, "-config", cfg)
	s := dr.login(t)
	ctx := testCtx(t)
	for lun, want := range []bool{true, true, false} {
		c, err := s.ReadCapacity16(ctx, initiator.LUN(lun))
		if err != nil {
			t.Fatalf("LUN %d: READ CAPACITY(16): %v", lun, err)
		}
		if c.LBPME != want {
			t.Errorf("LUN %d: LBPME = %v, want %v", lun, c.LBPME, want)
		}
		err = s.Unmap(ctx, initiator.LUN(lun), []initiator.Extent{{LBA: 0, Blocks: 8}})
		switch {
		case want && err != nil:
			t.Errorf("LUN %d: UNMAP: %v", lun, err)
		case !want && !initiator.IsSense(err, 5, 0x20, 0) && !initiator.IsSense(err, 5, 0x24, 0):
			t.Errorf("LUN %d: UNMAP without provisioning: %v, want ILLEGAL REQUEST", lun, err)
		}
	}
}
