package backstore

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBlockDevice runs the backstore contract on a loop device (root and
// losetup needed; skipped otherwise): BLKGETSIZE64, BLKSSZGET, pread/pwrite,
// fdatasync and BLKDISCARD.
func TestBlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Skipf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec.CommandContext(ctx, "losetup", "-d", dev).Run()
	})
	b, err := OpenFile(dev, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.IsBlockDevice() || b.LogicalBlockSize() != 512 {
		t.Fatalf("block device %v, logical block size %d", b.IsBlockDevice(), b.LogicalBlockSize())
	}
	exercise(t, b, 8<<20)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	// Data reached the backing file.
	raw, err := os.ReadFile(img)
	if err != nil || !bytes.Equal(raw[RAMChunkSize-3000:RAMChunkSize-2900], fill(10000, 7)[:100]) {
		t.Fatalf("backing file: %v", err)
	}
	if err := b.Resize(1 << 20); err == nil {
		t.Fatal("block device resized")
	}
	if n, err := b.Refresh(); err != nil || n != 8<<20 {
		t.Fatalf("refresh %d %v", n, err)
	}
}
