package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestCheckMountPoint: attach refuses, before logging in, a mount point
// that is missing, a file, or a directory with entries (whose files the
// mount would hide, or another attach's mount); an empty directory is
// accepted.
func TestCheckMountPoint(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	full := filepath.Join(dir, "full")
	file := filepath.Join(dir, "file")
	for _, d := range []string{empty, full} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{file, filepath.Join(full, "lun0")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkMountPoint(empty); err != nil {
		t.Errorf("empty directory: %v", err)
	}
	for path, want := range map[string]string{
		full:                          "mount point " + full + " is not empty (it holds lun0;",
		file:                          "mount point " + file + " is not a directory",
		filepath.Join(dir, "missing"): "mount point: stat " + filepath.Join(dir, "missing") + ": no such file or directory",
	} {
		if err := checkMountPoint(path); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// TestOneLine: the unmount error attach prints is one line (go-fuse's
// error carries fusermount's newline and its exit status on a new line).
func TestOneLine(t *testing.T) {
	err := errors.New("/usr/bin/fusermount3: failed to unmount /mnt/srp: Device or resource busy\n (code exit status 1)\n")
	if got, want := oneLine(err), "/usr/bin/fusermount3: failed to unmount /mnt/srp: Device or resource busy (code exit status 1)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestAttachIORetriesAbortedCommands: a LUN reset from another I_T nexus
// (TASK ABORTED status, the target's TAS) and one from another process on
// the attach's own nexus (commands end silently, then time out and are
// aborted) abort the attach's READ(16)/WRITE(16) in flight; the attach
// re-issues them as the SCSI midlayer does instead of failing the kernel's
// request with EIO, and every block holds what was written.
func TestAttachIORetriesAbortedCommands(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	dial := func(target string, join bool) *initiator.Session {
		t.Helper()
		opts, err := initiator.ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		opts.ChCount, opts.JoinNexus = 2, join
		opts.CommandTimeout, opts.TMFTimeout = 2*time.Second, time.Second
		s, err := initiator.Dial(ctx, dev, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.TestUnitReady(ctx, initiator.LUN(0)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := dial(info[0], false)
	other := dial(info[0]+",initiator_ext=2", false) // another I_T nexus
	same := dial(info[0], true)                      // this nexus, as a second srpctl joins it
	capy, err := a.ReadCapacity16(ctx, initiator.LUN(0))
	if err != nil {
		t.Fatal(err)
	}
	f := &lunFile{s: &conn{Session: a}, lun: initiator.LUN(0), capy: capy, maxIO: 64 << 10}

	const writers, per = 16, 64 << 10
	want := make([]byte, writers*per)
	if _, err := rand.Read(want); err != nil {
		t.Fatal(err)
	}
	for _, reset := range []*initiator.Session{other, same} {
		stop := make(chan struct{})
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := want[w*per : (w+1)*per]
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := f.io(ctx, true, uint64(w*per/512), buf, false); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		// Eight resets under 16 writers in flight abort some of them.
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			if err := reset.LUNReset(ctx, initiator.LUN(0)); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("write beside a LUN reset: %v", err)
		}
	}
	got := make([]byte, len(want))
	if err := f.io(ctx, false, 0, got, false); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("blocks differ from what was written")
	}
}
