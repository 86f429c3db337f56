package backstore

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBlockDevice runs the backstore contract on a loop device (root and
// losetup needed; skipped otherwise): BLKGETSIZE64, BLKSSZGET, pread/pwrite,
// fdatasync and Unmap.
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

// loopDevice attaches a fresh image of size bytes as a loop device with the
// given logical sector size and returns the image path, the device node and
// the device's sysfs queue directory. It skips the test when not root or
// when losetup is missing.
func loopDevice(t *testing.T, size int64, sectorSize int) (img, dev, queue string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop device test needs root (losetup)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("loop device test needs losetup (util-linux), not installed")
	}
	img = filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", "--sector-size", strconv.Itoa(sectorSize), img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --sector-size %d: %v: %s", sectorSize, err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec.CommandContext(ctx, "losetup", "-d", dev).Run()
	})
	return img, dev, "/sys/block/" + filepath.Base(dev) + "/queue"
}

// sysfsInt reads one integer attribute of a sysfs queue directory.
func sysfsInt(t *testing.T, queue, attr string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(queue, attr))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", queue, attr, err)
	}
	return v
}

// A loop device with 4096-byte sectors: the logical and physical block
// sizes, the size and the unmap support come from the device (BLKSSZGET,
// BLKPBSZGET, BLKGETSIZE64, sysfs queue limits), and Unmap deallocates
// whole blocks in the backing file and zeroes an unaligned head and tail.
func TestBlockDevice4KSectors(t *testing.T) {
	const size = 8 << 20
	img, dev, queue := loopDevice(t, size, 4096)
	b, err := OpenFile(dev, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.LogicalBlockSize(); got != 4096 {
		t.Fatalf("logical block size %d, want 4096 (losetup --sector-size)", got)
	}
	if got, want := b.PhysicalBlockSize(), sysfsInt(t, queue, "physical_block_size"); int64(got) != want {
		t.Fatalf("physical block size %d, sysfs says %d", got, want)
	}
	if got := b.Size(); got != size {
		t.Fatalf("size %d, want %d", got, size)
	}
	canUnmap := sysfsInt(t, queue, "discard_max_bytes") > 0 || sysfsInt(t, queue, "write_zeroes_max_bytes") > 0
	if b.UnmapSupported() != canUnmap {
		t.Fatalf("UnmapSupported %v, sysfs limits say %v", b.UnmapSupported(), canUnmap)
	}

	// Blocks 10..14 hold 0x5A; unmap from 100 bytes into block 10 to 100
	// bytes into block 13.
	const bs = 4096
	pat := bytes.Repeat([]byte{0x5A}, 5*bs)
	if _, err := b.WriteAt(pat, 10*bs); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := b.Unmap(10*bs+100, 3*bs); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(pat)
	clear(want[100 : 100+3*bs])
	got := make([]byte, 5*bs)
	if _, err := b.ReadAt(got, 10*bs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("device data after Unmap differs from the expected zeroed range")
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[10*bs:15*bs], want) {
		t.Fatal("backing file after Unmap differs from the expected zeroed range")
	}
	if canUnmap {
		// Blocks 11 and 12 lie wholly inside the range: the loop driver
		// punched them out of the backing file.
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		hole, err := unix.Seek(int(f.Fd()), 11*bs, unix.SEEK_HOLE)
		if err != nil || hole != 11*bs {
			t.Fatalf("SEEK_HOLE at block 11: %d %v, want a hole", hole, err)
		}
	}
	// Out of range.
	if err := b.Unmap(size-bs, 2*bs); err != ErrOutOfRange {
		t.Fatalf("Unmap beyond the end: %v", err)
	}
}
