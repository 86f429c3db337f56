package e2e

import (
	"bufio"
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

// needTool skips a test without tool, except in CI, where scripts/deps.sh
// installs it and its absence is a failure.
func needTool(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (scripts/deps.sh installs it)", tool)
		}
		t.Skipf("%s not installed", tool)
	}
}

// TestNBD serves the target's LUNs with `srpctl nbd` on a unix socket and
// drives them with the NBD clients admins use: fio's nbd engine on two
// connections at once with verify=crc32c, qemu-img convert into LUN 0 (the
// default export) and back out, checked against what the target holds
// over a separate SRP login, and qemu-io's write-zeroes, discard, flush,
// FUA and unaligned writes on LUN 1 (4096-byte blocks). SIGTERM ends the
// server and removes its socket.
func TestNBD(t *testing.T) {
	if testing.Short() {
		t.Skip("builds srpctl")
	}
	for _, tool := range []string{"fio", "qemu-img", "qemu-io"} {
		needTool(t, tool)
	}
	bin := buildSrpctl(t)
	e := startTarget(t, iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), "127.0.0.1:0")
	tgt := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", guid, guid, e.addr)
	dir := t.TempDir()
	sock := filepath.Join(dir, "nbd.sock")

	srv := exec.Command(bin, "nbd", tgt, "--socket", sock)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var slog syncBuffer
	srv.Stderr = &slog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var out syncBuffer
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			if strings.HasPrefix(sc.Text(), "serving ") {
				close(ready)
			}
		}
		exited <- srv.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.Process.Kill()
			<-exited
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		stopped = true
		t.Fatalf("srpctl nbd exited: %v\n%s%s", err, out.String(), slog.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("srpctl nbd not serving\n%s%s", out.String(), slog.String())
	}
	for _, want := range []string{"export lun0: 64.0 MiB, 512-byte blocks, trim", "export lun1: 16.0 MiB, 4096-byte blocks, trim", "(default export lun0)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("srpctl nbd printed no %q:\n%s", want, out.String())
		}
	}
	uri := func(export string) string { return "nbd+unix:///" + export + "?socket=" + sock }
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s\nsrpctl nbd:\n%s", name, strings.Join(args, " "), err, b, slog.String())
		}
		return string(b)
	}

	// fio: two jobs, each its own NBD connection, on halves of LUN 0,
	// every block checked with crc32c after it is written.
	fio := run("fio", "--name=nbd", "--ioengine=nbd", "--uri="+uri("lun0"), "--rw=randwrite", "--bs=4k",
		"--size=8M", "--offset_increment=32M", "--numjobs=2", "--iodepth=16",
		"--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0", "--group_reporting")
	if !strings.Contains(fio, "err= 0") || strings.Contains(fio, "verify: bad") {
		t.Fatalf("fio:\n%s", fio)
	}

	// qemu-img into the default export and back out.
	src := filepath.Join(dir, "src.raw")
	data := make([]byte, 6<<20)
	rand.Read(data)
	clear(data[2<<20 : 3<<20]) // a zero run, which qemu-img sends as WRITE_ZEROES
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	syncs := e.syncs.Load()
	run("qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, "nbd+unix:///?socket="+sock)
	if e.syncs.Load() == syncs {
		t.Error("qemu-img's flush sent no SYNCHRONIZE CACHE")
	}
	s := e.dial(t, func(o *initiator.Options) { o.MaxSect = 16384 })
	got := make([]byte, len(data))
	if err := s.Read16(ctxFor(t), initiator.LUN(0), 0, got, 512, false); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("LUN 0 after qemu-img convert in: %v, equal %v", err, bytes.Equal(got, data))
	}
	back := filepath.Join(dir, "back.raw")
	run("qemu-img", "convert", "-f", "raw", "-O", "raw", uri("lun0"), back)
	b, err := os.ReadFile(back)
	if err != nil || len(b) != 64<<20 || !bytes.Equal(b[:len(data)], data) {
		t.Fatalf("qemu-img convert out: %v, %d bytes", err, len(b))
	}

	// qemu-io on LUN 1: patterns written and read back through WRITE,
	// WRITE_ZEROES (with and without may-trim), TRIM, FLUSH, FUA and
	// writes not aligned to the 4096-byte block.
	io := run("qemu-io", "-f", "raw",
		"-c", "write -P 0xab 0 1M",
		"-c", "write -z 8192 16384", "-c", "read -P 0 8192 16384", "-c", "read -P 0xab 0 8192",
		"-c", "write -z -u 65536 65536", "-c", "read -P 0 65536 65536",
		"-c", "discard 512k 512k",
		"-c", "write -P 0x11 100 300", "-c", "read -P 0x11 100 300", "-c", "read -P 0xab 400 3696",
		"-c", "write -f -P 0x22 12288 4096", "-c", "read -P 0x22 12288 4096",
		"-c", "flush", uri("lun1"))
	if strings.Contains(io, "failed") || strings.Contains(io, "error") {
		t.Fatalf("qemu-io:\n%s", io)
	}
	blk := make([]byte, 4096)
	if err := s.Read16(ctxFor(t), initiator.LUN(1), 0, blk, 4096, false); err != nil ||
		!bytes.Equal(blk[100:400], bytes.Repeat([]byte{0x11}, 300)) || blk[99] != 0xab || blk[400] != 0xab {
		t.Fatalf("LUN 1 block 0 after the unaligned write: %v %x", err, blk[96:404])
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("srpctl nbd after SIGTERM: %v\n%s", err, slog.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("srpctl nbd did not stop on SIGTERM")
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("socket left behind")
	}

	// --listen: NBD over TCP, the exports by name in the URI.
	tcp := exec.Command(bin, "nbd", tgt, "--listen", "127.0.0.1:0")
	tout, err := tcp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tcp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		tcp.Process.Signal(syscall.SIGTERM)
		tcp.Wait()
	}()
	sc := bufio.NewScanner(tout)
	var base string
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "serving "); ok {
			base, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if !strings.HasPrefix(base, "nbd://127.0.0.1:") {
		t.Fatalf("srpctl nbd --listen serves %q", base)
	}
	if info := run("qemu-img", "info", base+"lun1"); !strings.Contains(info, "virtual size: 16 MiB") {
		t.Errorf("qemu-img info %slun1:\n%s", base, info)
	}
}
