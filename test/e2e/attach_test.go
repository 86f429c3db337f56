package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
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

// TestAttachFilesystem attaches the target's LUNs through FUSE with
// `srpctl attach`, puts a loop device on lun0, makes and mounts an ext4
// filesystem, copies files, unmounts, checks it with fsck and detaches.
func TestAttachFilesystem(t *testing.T) {
	if testing.Short() {
		t.Skip("builds srpctl")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for FUSE mounts and loop devices")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	bin := buildSrpctl(t)
	e := startTarget(t, iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), "127.0.0.1:0")
	tgt := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", guid, guid, e.addr)
	dir := t.TempDir()
	mnt, fsdir := filepath.Join(dir, "luns"), filepath.Join(dir, "fs")
	os.Mkdir(mnt, 0o755)
	os.Mkdir(fsdir, 0o755)

	sh := func(timeout time.Duration, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		return string(out), err
	}
	must := func(name string, args ...string) string {
		t.Helper()
		out, err := sh(60*time.Second, name, args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return out
	}

	var logBuf bytes.Buffer
	att := exec.Command(bin, "attach", tgt, mnt)
	att.Stdout, att.Stderr = &logBuf, &logBuf
	if err := att.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- att.Wait() }()
	detached := false
	t.Cleanup(func() {
		if !detached {
			att.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				att.Process.Kill()
				sh(10*time.Second, "umount", "-l", mnt)
			}
		}
	})
	lun0 := filepath.Join(mnt, "lun0")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(lun0); err == nil && st.Size() == 64<<20 {
			break
		}
		select {
		case err := <-exited:
			detached = true
			if l := logBuf.String(); strings.Contains(l, "operation not permitted") || strings.Contains(l, "permission denied") {
				t.Skipf("FUSE mounts not permitted here: %s", l)
			}
			t.Fatalf("srpctl attach exited: %v\n%s", err, logBuf.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared\n%s", lun0, logBuf.String())
		}
	}
	lun1 := filepath.Join(mnt, "lun1")
	if st, err := os.Stat(lun1); err != nil || st.Size() != 16<<20 {
		t.Errorf("lun1: %v", err)
	}
	// O_DIRECT writes and an fsync through the FUSE file reach the target:
	// read the blocks back over a separate login.
	direct := make([]byte, 1<<20)
	rand.Read(direct)
	src := filepath.Join(dir, "direct")
	os.WriteFile(src, direct, 0o644)
	syncs := e.syncs.Load()
	must("dd", "if="+src, "of="+lun1, "bs=64k", "count=16", "oflag=direct", "conv=fsync,notrunc", "status=none")
	if e.syncs.Load() == syncs {
		t.Error("fsync of the FUSE file sent no SYNCHRONIZE CACHE")
	}
	// 1 MiB reads (FUSE's largest) are served quietly: no trySplice lines.
	must("dd", "if="+lun1, "of=/dev/null", "bs=1M", "count=4", "iflag=direct", "status=none")
	must("dd", "if="+lun1, "of=/dev/null", "bs=1M", "count=4", "status=none")
	s := e.dial(t, func(o *initiator.Options) { o.MaxSect = 2048 })
	got := make([]byte, len(direct))
	if err := s.Read16(ctxFor(t), initiator.LUN(1), 0, got, 4096, false); err != nil || !bytes.Equal(got, direct) {
		t.Errorf("O_DIRECT data not at the target: %v", err)
	}
	loop, err := sh(30*time.Second, "losetup", "-f", "--show", lun0)
	if err != nil {
		t.Skipf("losetup unavailable here: %v %s", err, loop)
	}
	loop = strings.TrimSpace(loop)
	looped := true
	defer func() {
		if looped {
			sh(30*time.Second, "losetup", "-d", loop)
		}
	}()
	must("mkfs.ext4", "-q", "-F", loop)
	must("mount", loop, fsdir)
	mounted := true
	defer func() {
		if mounted {
			sh(30*time.Second, "umount", fsdir)
		}
	}()
	files := map[string][]byte{}
	for i, n := range []int{1, 4096, 100000, 3 << 20} {
		b := make([]byte, n)
		rand.Read(b)
		name := fmt.Sprintf("f%d", i)
		files[name] = b
		if err := os.WriteFile(filepath.Join(fsdir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := e.syncs.Load()
	must("sync")
	must("umount", fsdir)
	mounted = false
	// ext4's flushes reach the loop device, whose flush is an fsync of the
	// FUSE file, which srpctl turns into SYNCHRONIZE CACHE.
	if e.syncs.Load() == before {
		t.Error("no SYNCHRONIZE CACHE reached the target after sync and umount")
	}
	// Drop the loop device's cache so the check reads from the target.
	must("losetup", "-d", loop)
	looped = false
	loop = strings.TrimSpace(must("losetup", "-f", "--show", lun0))
	looped = true
	must("fsck.ext4", "-fn", loop)
	must("mount", "-o", "ro", loop, fsdir)
	mounted = true
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(fsdir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v (%d bytes, want %d)", name, err, len(got), len(want))
		}
	}
	must("umount", fsdir)
	mounted = false
	must("losetup", "-d", loop)
	looped = false
	att.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		detached = true
		if err != nil {
			t.Errorf("srpctl attach after SIGTERM: %v\n%s", err, logBuf.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("srpctl attach did not detach\n%s", logBuf.String())
	}
	if strings.Contains(logBuf.String(), "trySplice") {
		t.Errorf("srpctl attach logged splice errors:\n%s", logBuf.String())
	}
	if !strings.Contains(logBuf.String(), "detached") {
		t.Errorf("no detach message:\n%s", logBuf.String())
	}
}
