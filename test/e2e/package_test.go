package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDebianPackage builds the Debian package with packaging/build-deb.sh,
// installs it into a scratch root with dpkg, checks what it installs
// (programs, manual pages, completions, the systemd unit, which
// systemd-analyze verify accepts), and runs srptd and srpctl from their
// installed paths: srptd serves, srpctl logs in and administers it.
func TestDebianPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	for _, tool := range []string{"dpkg-deb", "dpkg", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}
	const version = "0.0~test1"
	build := exec.CommandContext(ctx, "../../packaging/build-deb.sh", filepath.Join(tmp, "dist"))
	build.Env = append(os.Environ(), "GOSRP_DEB_VERSION="+version)
	var blog bytes.Buffer
	build.Stderr = &blog
	out, err := build.Output()
	if err != nil {
		t.Fatalf("build-deb.sh: %v\n%s", err, blog.String())
	}
	deb := strings.TrimSpace(string(out))
	if !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("build-deb.sh printed %q", deb)
	}
	if ctl := run("dpkg-deb", "--field", deb, "Package", "Version"); ctl != "Package: gosrp\nVersion: "+version+"\n" {
		t.Errorf("control fields %q", ctl)
	}

	root := filepath.Join(tmp, "root")
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The scratch root's dpkg database knows no libc6 or libibverbs1: the
	// host provides them.
	run("dpkg", "--root="+root, "--force-not-root", "--force-script-chrootless", "--force-depends", "--log=/dev/null", "-i", deb)
	if st := run("dpkg", "--root="+root, "-s", "gosrp"); !strings.Contains(st, "Status: install ok installed") {
		t.Fatalf("dpkg -s gosrp:\n%s", st)
	}

	srptd, srpctl := filepath.Join(root, "usr/sbin/srptd"), filepath.Join(root, "usr/bin/srpctl")
	for _, bin := range []string{srptd, srpctl} {
		if v := run(bin, "--version"); !strings.HasPrefix(v, filepath.Base(bin)+" "+version+" (commit ") {
			t.Errorf("%s --version: %q", bin, v)
		}
	}
	for page, want := range map[string]string{
		"man8/srptd.8.gz":                 `.TH "SRPTD" "8"`,
		"man8/srpctl.8.gz":                `.TH "SRPCTL" "8"`,
		"man8/srpctl-target-lun-add.8.gz": `\fB--block-size\fP`,
		"man5/srptd.toml.5.gz":            "max_req_size",
	} {
		if txt := gunzip(t, filepath.Join(root, "usr/share/man", page)); !strings.Contains(txt, want) {
			t.Errorf("%s has no %q", page, want)
		}
	}
	for _, f := range []string{"usr/share/bash-completion/completions/srpctl", "usr/share/zsh/vendor-completions/_srptd", "etc/default/srptd"} {
		if fi, err := os.Stat(filepath.Join(root, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	verifyUnit(t, ctx, root)

	// srptd from its installed path serves; srpctl from its installed path
	// logs in and talks to the admin socket.
	data := filepath.Join(tmp, "data")
	sock := filepath.Join(tmp, "srptd.sock")
	d := exec.Command(srptd, "--data-dir", data, "--listen", "127.0.0.1:0", "--admin", sock)
	stdout, err := d.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var dlog syncBuffer
	d.Stderr = &dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "login_info: "); ok {
				lines <- s
			}
		}
	}()
	var tgt string
	select {
	case tgt = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatalf("installed srptd printed no login_info\n%s", dlog.String())
	}
	if out := run(srpctl, "luns", tgt); !strings.Contains(out, "lun 0 ") || !strings.Contains(out, "1.0 GiB") {
		t.Errorf("srpctl luns:\n%s", out)
	}
	if out := run(srpctl, "target", "--socket", sock, "luns"); !strings.Contains(out, filepath.Join(data, "lun0.img")) {
		t.Errorf("srpctl target luns:\n%s", out)
	}
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Errorf("installed srptd after SIGTERM: %v\n%s", err, dlog.String())
	}
}

// verifyUnit runs systemd-analyze verify on the installed srptd.service,
// its program paths pointed into root; any complaint fails.
func verifyUnit(t *testing.T, ctx context.Context, root string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (scripts/deps.sh installs systemd)")
		}
		t.Log("systemd-analyze not installed: unit not verified")
		return
	}
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/srptd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "ProtectSystem=", "NoNewPrivileges=yes"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("srptd.service has no %s", want)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "srptd.service")
	if err := os.WriteFile(p, bytes.ReplaceAll(unit, []byte("/usr/sbin/srptd"), []byte(filepath.Join(root, "usr/sbin/srptd"))), 0o644); err != nil {
		t.Fatal(err)
	}
	// --man=no: the Documentation= pages are checked above, and man(1)
	// need not be installed.
	cmd := exec.CommandContext(ctx, "systemd-analyze", "verify", "--man=no", p)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify srptd.service: %v\n%s", err, out)
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Error(err)
		return ""
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
