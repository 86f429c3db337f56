package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/spf13/cobra"
)

func adminTestCtx(t *testing.T) context.Context {
	d := 120 * time.Second
	if dl, ok := t.Deadline(); ok {
		d = time.Until(dl) - 5*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startSrptd builds and runs the srptd binary on the embedded default with
// a fresh data directory and a free loopback port. It returns the
// login_info lines and the data directory; srptd gets SIGTERM at the end
// of the test and must exit 0.
func startSrptd(t *testing.T, ctx context.Context) ([]string, string) {
	t.Helper()
	return startSrptdArgs(t, ctx)
}

// startSrptdArgs is startSrptd with more srptd arguments (e.g. --config).
func startSrptdArgs(t *testing.T, ctx context.Context, args ...string) ([]string, string) {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "srptd")
	// go test puts its own toolchain's bin directory first in PATH.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command: %v", err)
	}
	if out, err := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "../srptd").CombinedOutput(); err != nil {
		t.Fatalf("go build srptd: %v\n%s", err, out)
	}
	data := filepath.Join(tmp, "data")
	cmd := exec.Command(bin, append([]string{"--data-dir", data, "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("srptd after SIGTERM: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("srptd did not exit after SIGTERM")
		}
	})
	var info []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("srptd exited without login_info")
			}
			if s, ok := strings.CutPrefix(l, "login_info: "); ok {
				info = append(info, s)
			}
		case <-ctx.Done():
			t.Fatal("no login_info")
		}
		if len(info) > 0 {
			break
		}
	}
	// The admin socket exists before login_info is printed... almost: it
	// is created right after. Wait for it.
	sock := filepath.Join(data, "srptd.sock")
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no admin socket")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return info, data
}

// srpctl runs `srpctl target ARGS...` in-process.
func srpctl(ctx context.Context, sock string, args ...string) (string, error) {
	c := newTargetAdminCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(append([]string{"--socket", sock}, args...))
	err := c.ExecuteContext(ctx)
	return out.String(), err
}

// TestTargetAdmin drives a running srptd binary with srpctl target.
func TestTargetAdmin(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	sock := filepath.Join(data, "srptd.sock")
	run := func(args ...string) string {
		t.Helper()
		out, err := srpctl(ctx, sock, args...)
		if err != nil {
			t.Fatalf("srpctl target %v: %v\n%s", args, err, out)
		}
		return out
	}

	if out := run("login-info"); out != "login_info: "+info[0]+"\n" {
		t.Fatalf("login-info %q, srptd printed %q", out, info)
	}
	opts, err := initiator.ParseTarget(info[0])
	if err != nil {
		t.Fatal(err)
	}
	opts.ReconnectDelay = -1
	opts.ChCount = 1
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	s, err := initiator.Dial(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.TestUnitReady(ctx, initiator.LUN(0)); err != nil {
		t.Fatal(err)
	}

	out := run("luns")
	if !regexp.MustCompile(`(?m)^0\s+disk0\s+file\s+1\.0 GiB\s+512\s+rw\s+[0-9a-f]{16}\s+\d+ .*` + regexp.QuoteMeta(filepath.Join(data, "lun0.img")) + `$`).MatchString(out) {
		t.Fatalf("luns:\n%s", out)
	}
	out = run("backstores")
	if !regexp.MustCompile(`(?m)^0\s+disk0\s+file\s+1\.0 GiB\s+\d+\.\d \w+\s+rw\s+` + regexp.QuoteMeta(filepath.Join(data, "lun0.img")) + `$`).MatchString(out) {
		t.Fatalf("backstores:\n%s", out)
	}
	// The target counts a command until its response's SEND completes,
	// which can come after the initiator has the response: wait for the
	// queue to drain.
	idle := regexp.MustCompile(`(?m)^iwarp0\s+\d+\s+[0-9a-f]{32}\s+127\.0\.0\.1:\d+\s+LIVE\s+\d+\s+0\s+\d+`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		out = run("sessions")
		if idle.MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if out := run("lun", "add", "--lun", "3", "--size", "2MiB", "--block-size", "4096", "--name", "three"); !regexp.MustCompile(`^added LUN 3: file \S+lun3\.img, 2\.0 MiB, 4096-byte blocks, serial [0-9a-f]{16}\n$`).MatchString(out) {
		t.Errorf("lun add printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(data, "lun3.img")); err != nil {
		t.Fatalf("lun3.img: %v", err)
	}
	if luns, err := s.ReportLUNs(ctx); err != nil || len(luns) != 2 || luns[1] != initiator.LUN(3) {
		t.Fatalf("REPORT LUNS %x %v", luns, err)
	}
	// With --wwn and no --serial the serial is derived (SPC-4 VPD 80h
	// needs one): the confirmation prints the one initiators read.
	out = run("lun", "add", "--lun", "5", "--backstore", "ram", "--size", "1MiB", "--wwn", "6001405abcdef0123456789abcdef012")
	vpd80, err := s.Inquiry(ctx, initiator.LUN(5), true, 0x80, 255)
	if err != nil || len(vpd80) < 4 || vpd80[1] != 0x80 || len(vpd80) < 4+int(vpd80[3]) {
		t.Fatalf("VPD 80h of LUN 5: %x %v", vpd80, err)
	}
	serial5 := strings.TrimSpace(string(vpd80[4 : 4+int(vpd80[3])]))
	if serial5 == "" || out != "added LUN 5: ram, 1.0 MiB, 512-byte blocks, serial "+serial5+"\n" {
		t.Errorf("lun add --wwn printed %q; VPD 80h serial %q", out, serial5)
	}
	if out := run("luns"); !regexp.MustCompile(`(?m)^5\s+ram\s+1\.0 MiB\s+512\s+rw\s+` + regexp.QuoteMeta(serial5) + `\s`).MatchString(out) {
		t.Errorf("luns, serial %s of LUN 5 not shown:\n%s", serial5, out)
	}
	run("lun", "remove", "5")
	if out, err := srpctl(ctx, sock, "lun", "add", "--lun", "3", "--backstore", "ram", "--size", "1MiB"); err == nil || !strings.Contains(err.Error(), "LUN 3 exists") {
		t.Fatalf("second LUN 3: %v %s", err, out)
	}
	if out, err := srpctl(ctx, sock, "lun", "add", "--lun", "4", "--backstore", "ram"); err == nil || !strings.Contains(err.Error(), "lun.size: a ram backstore needs a size") {
		t.Fatalf("ram without size: %v %s", err, out)
	}

	// srptd runs the embedded default on loopback: demo mode, which
	// admits everyone whatever the ACLs say.
	if out := run("acl", "add", "0002:c903:0000:1234", "--map", "0=3", "--read-only", "0"); out != "admitted 0002:c903:0000:1234: LUNs 0=3, read-only 0\n"+demoModeNote+"\n" ||
		!strings.Contains(out, "demo mode") || !strings.Contains(out, "takes effect only once demo mode is off") {
		t.Errorf("acl add printed %q", out)
	}
	run("acl", "add", "192.0.2.9")
	out = run("acl", "list")
	if !regexp.MustCompile(`(?m)^0002:c903:0000:1234\s+0=3\s+0$`).MatchString(out) || !regexp.MustCompile(`(?m)^192\.0\.2\.9\s+all\s+-$`).MatchString(out) {
		t.Fatalf("acl list:\n%s", out)
	}
	if _, err := srpctl(ctx, sock, "lun", "remove", "3"); err == nil || !strings.Contains(err.Error(), "remove or change the ACL first") {
		t.Fatalf("remove a mapped LUN: %v", err)
	}
	if out := run("acl", "remove", "0002:c903:0000:1234"); out != "removed the ACL of 0002:c903:0000:1234\n" {
		t.Errorf("acl remove printed %q", out)
	}
	if out := run("lun", "remove", "3"); out != "removed LUN 3 (backstore flushed and closed; its data stays)\n" {
		t.Errorf("lun remove printed %q", out)
	}
	// bench's size forms: a lower-case unit with a fraction.
	if out := run("lun", "add", "--lun", "4", "--backstore", "ram", "--size", "1.5m"); !strings.HasPrefix(out, "added LUN 4: ram, 1.5 MiB, 512-byte blocks,") {
		t.Errorf("lun add --size 1.5m printed %q", out)
	}
	if out := run("lun", "remove", "4"); out != "removed LUN 4 (RAM backstore freed; its data is gone)\n" {
		t.Errorf("lun remove of a RAM LUN printed %q", out)
	}
	if out := run("save"); out != "saved "+filepath.Join(data, "srptd.toml")+"\n" {
		t.Fatalf("save: %q", out)
	}
	saved, err := os.ReadFile(filepath.Join(data, "srptd.toml"))
	if err != nil || !strings.Contains(string(saved), `initiator = "192.0.2.9"`) || strings.Contains(string(saved), "lun3") {
		t.Fatalf("saved config %v:\n%s", err, saved)
	}

	out = run("sessions", "--json")
	if !strings.Contains(out, `"InitiatorPort"`) {
		t.Fatalf("sessions --json:\n%s", out)
	}
	ipid := regexp.MustCompile(`"InitiatorPort": "([0-9a-f]{32})"`).FindStringSubmatch(out)[1]
	if out := run("logout", ipid); out != "logged out "+ipid+" (SRP_T_LOGOUT)\n" {
		t.Errorf("logout printed %q", out)
	}
	if _, err := srpctl(ctx, sock, "logout", "12345"); err == nil || !strings.Contains(err.Error(), "no session") {
		t.Fatalf("logout unknown: %v", err)
	}
}

// TestTargetAdminNoDaemon: a missing socket is a clear error.
func TestTargetAdminNoDaemon(t *testing.T) {
	_, err := srpctl(adminTestCtx(t), filepath.Join(t.TempDir(), "none.sock"), "luns")
	if err == nil || !strings.Contains(err.Error(), "is srptd running?") || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("err %v", err)
	}
}

// TestTargetAdminUsageErrors: a mistyped subcommand and a LUN mapped twice
// fail (nonzero exit) before any request is sent.
func TestTargetAdminUsageErrors(t *testing.T) {
	ctx := adminTestCtx(t)
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"target", "bogus"}, `unknown command "bogus" for "srpctl target"`},
		{[]string{"target", "lun", "bogus"}, `unknown command "bogus" for "srpctl target lun"`},
		{[]string{"target", "acl", "bogus"}, `unknown command "bogus" for "srpctl target acl"`},
		{[]string{"target", "acl", "add", "192.0.2.7", "--map", "0=1,0=3"}, `--map "0=1,0=3": initiator LUN 0 is mapped twice`},
		{[]string{"target", "luns", "--timeout", "0"}, `--timeout 0s: must be positive`},
		{[]string{"target", "luns", "--timeout", "-1s"}, `--timeout -1s: must be positive`},
		// Sizes are parsed here, as bench's are, before any request.
		{[]string{"target", "lun", "add", "--lun", "1", "--size", "30GB"}, `--size: bad size "30GB": GB is a power of 1000 to some programs and of 1024 to others; write 30GiB or 30g for the power of 1024, or the bytes`},
		{[]string{"target", "lun", "add", "--lun", "1", "--size", "1 parsec"}, `--size: bad size "1 parsec": want ` + adminapi.SizeSyntax},
	} {
		// The command tree as main builds it: target under the root.
		root := &cobra.Command{Use: "srpctl", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newTargetAdminCmd())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(tc.args, "--socket", sock))
		err := root.ExecuteContext(ctx)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
	// Alone, a group command prints its help and succeeds.
	root := &cobra.Command{Use: "srpctl"}
	root.AddCommand(newTargetAdminCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"target", "lun"})
	if err := root.ExecuteContext(ctx); err != nil || !strings.Contains(out.String(), "Available Commands:") {
		t.Fatalf("srpctl target lun: %v\n%s", err, out.String())
	}
}
