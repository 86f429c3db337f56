package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
