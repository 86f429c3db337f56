package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCompatArgs: the earlier spellings still parse: one-dash long flags,
// and --demo with a separate true/false/on/off/1/0 value.
func TestCompatArgs(t *testing.T) {
	c := newRootCmd(&options{}, func() {})
	for _, tc := range []struct{ in, want []string }{
		{[]string{"-config", "f", "-data-dir=d", "-v", "--listen", "a"}, []string{"--config", "f", "--data-dir=d", "-v", "--listen", "a"}},
		{[]string{"-demo", "true"}, []string{"--demo=true"}},
		{[]string{"--demo", "maybe"}, []string{"--demo=maybe"}},
		{[]string{"--demo", "off", "-check"}, []string{"--demo=false", "--check"}},
		{[]string{"--demo", "--check"}, []string{"--demo", "--check"}},
		{[]string{"--demo=on"}, []string{"--demo=true"}},
		{[]string{"-bogus", "--", "-config"}, []string{"-bogus", "--", "-config"}},
	} {
		if got := compatArgs(tc.in, c); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCommandLine: --demo is a plain boolean (and its old two-word form
// still works), --version prints the build, --help and man answer
// without starting, a stray argument is an error.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		demo    bool
		demoSet bool
	}{
		{nil, false, false},
		{[]string{"--demo"}, true, true},
		{[]string{"--demo=false"}, false, true},
		{[]string{"-demo", "false"}, false, true},
		{[]string{"--demo", "true", "--check"}, true, true},
	} {
		o, err := parseFlags(tc.args, io.Discard, io.Discard)
		if err != nil || o.demo != tc.demo || o.demoSet != tc.demoSet {
			t.Errorf("%q: %+v %v", tc.args, o, err)
		}
	}
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--version"}, &out, io.Discard); err != errHandled || !strings.HasPrefix(out.String(), "srptd ") || !strings.Contains(out.String(), " go1.") {
		t.Errorf("--version: %v %q", err, out.String())
	}
	out.Reset()
	if _, err := parseFlags([]string{"-h"}, &out, io.Discard); err != errHandled || !strings.Contains(out.String(), "--data-dir") {
		t.Errorf("-h: %v %q", err, out.String())
	}
	for _, args := range [][]string{{"--listen", ""}, {"--config="}, {"-data-dir", ""}, {"--metrics", ""}} {
		if _, err := parseFlags(args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), ": empty value (leave the flag out for its default)") {
			t.Errorf("%q: %v, want an empty value refused", args, err)
		}
	}
	if _, err := parseFlags([]string{"stray"}, io.Discard, io.Discard); err == nil || err == errHandled {
		t.Errorf("stray argument: %v", err)
	}
	dir := t.TempDir()
	if _, err := parseFlags([]string{"man", dir}, io.Discard, io.Discard); err != errHandled {
		t.Fatalf("man: %v", err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "srptd.8"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.TH "SRPTD" "8"`, `\fB--data-dir\fP`, `\fB--check\fP`, "srptd.toml(5)"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("srptd.8 has no %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "srptd-man.8")); err == nil {
		t.Error("the hidden man command has a page")
	}
}

// TestSdNotify: under a service manager (NOTIFY_SOCKET) srptd sends
// READY=1 once it serves, RELOADING=1 then READY=1 around a SIGHUP
// reload, and STOPPING=1 at SIGTERM.
func TestSdNotify(t *testing.T) {
	ctx := testCtx(t)
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 16)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := conn.Read(b)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b[:n])
		}
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SRPTD_TEST_MAIN=1", "NOTIFY_SOCKET="+sock, "SRPTD_TEST_ARGS=--data-dir "+t.TempDir()+" --listen 127.0.0.1:0")
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
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if !strings.HasPrefix(m, want) {
				t.Fatalf("sd_notify %q, want %q first\n%s", m, want, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %q from srptd\n%s", want, logs.String())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	next("READY=1\nSTATUS=serving 1 LUN(s)")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next("RELOADING=1")
	next("READY=1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}
