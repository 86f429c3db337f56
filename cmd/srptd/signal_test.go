package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestMain lets the test binary run as srptd itself (SRPTD_TEST_MAIN=1),
// so a test can deliver real signals to a real process.
func TestMain(m *testing.M) {
	if os.Getenv("SRPTD_TEST_MAIN") == "1" {
		os.Args = append([]string{"srptd"}, strings.Fields(os.Getenv("SRPTD_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSIGTERM: srptd with an initiator logged in and data written gets
// SIGTERM: it logs the channel out, drains, flushes and closes the
// backstore, and exits 0; the data is in the file.
func TestSIGTERM(t *testing.T) {
	ctx := testCtx(t)
	data := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SRPTD_TEST_MAIN=1", "SRPTD_TEST_ARGS=--data-dir "+data+" --listen 127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var line string
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "login_info: "); ok {
			line = s
			break
		}
	}
	if line == "" {
		t.Fatalf("no login_info:\n%s", logs.String())
	}
	go func() { // keep draining stdout
		for sc.Scan() {
		}
	}()
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
	w := bytes.Repeat([]byte("gosrp-sigterm-01"), 4096/16)
	if err := s.Write16(ctx, initiator.LUN(0), 7, w, 512, false); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-ctx.Done():
		t.Fatalf("srptd did not exit after SIGTERM\n%s", logs.String())
	}
	for _, want := range []string{"shutting down", "logging out channel", "channel released"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, logs.String())
		}
	}
	f, err := os.Open(filepath.Join(data, "lun0.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(w))
	if _, err := f.ReadAt(got, 7*512); err != nil || !bytes.Equal(got, w) {
		t.Fatalf("data after SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "srptd.sock")); err == nil {
		t.Error("admin socket left behind")
	}
}

// TestListenAddressInUse: srptd whose listen address is taken exits with
// status 1 and an error naming the address, having created nothing: no
// data directory (or nothing in an existing one: no lock, identity.json,
// lun0.img or admin socket) and no admin socket elsewhere.
func TestListenAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	empty := t.TempDir()
	missing := filepath.Join(t.TempDir(), "new")
	adminDir := t.TempDir()
	for _, args := range []string{
		"--data-dir " + empty + " --listen " + addr,
		"--data-dir " + missing + " --listen " + addr + " --admin " + filepath.Join(adminDir, "srptd.sock"),
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SRPTD_TEST_MAIN=1", "SRPTD_TEST_ARGS="+args)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("srptd %s: %v, want exit status 1\n%s", args, err, stderr.String())
		}
		if want := "srptd: --listen: " + addr + ": "; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "address already in use") {
			t.Errorf("srptd %s: stderr\n%s\nwant %q ... address already in use", args, stderr.String(), want)
		}
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf("data directory after the failed start: %v %v", ents, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("data directory created: %v", err)
	}
	if ents, err := os.ReadDir(adminDir); err != nil || len(ents) != 0 {
		t.Errorf("admin socket directory after the failed start: %v %v", ents, err)
	}
}

// TestStartErrorLeavesNothing: a start that fails on a LUN path (a file
// LUN in a missing directory; a missing block device after a file LUN the
// start would create) or on the admin socket's directory stops before it
// creates anything: no data directory, lock, identity.json or LUN image.
func TestStartErrorLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("[target]\ndemo_mode = true\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missingDir := cfg("missing-dir.toml", "[[lun]]\nlun = 0\nbackstore = \"file\"\npath = \""+filepath.Join(dir, "no", "x.img")+"\"\nsize = \"1MiB\"\n")
	noBlock := cfg("no-block.toml", "[[lun]]\nlun = 0\nbackstore = \"file\"\npath = \"l0.img\"\nsize = \"1MiB\"\n[[lun]]\nlun = 1\nbackstore = \"block\"\npath = \""+filepath.Join(dir, "no-such-device")+"\"\n")
	for i, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", missingDir}, "lun[0].path"},
		{[]string{"--config", noBlock}, "lun[1].path"},
		{[]string{"--admin", filepath.Join(dir, "no", "srptd.sock")}, "admin socket"},
	} {
		data := filepath.Join(dir, fmt.Sprintf("data%d", i))
		args := append([]string{"--data-dir", data, "--listen", "127.0.0.1:0"}, c.args...)
		ctx, cancel := context.WithCancel(testCtx(t))
		started := false
		err := run(ctx, args, io.Discard, io.Discard, func(ready) { started = true; cancel() })
		cancel()
		if started || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("srptd %v: started %v, error %v; want an error naming %s", args, started, err, c.want)
		}
		if ents, err := os.ReadDir(data); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("srptd %v: data directory left behind: %v %v", args, ents, err)
		}
	}
}
