package scsi

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
)

// loopDevice attaches a fresh image of size bytes as a loop device with
// the given logical sector size and returns the device node and its sysfs queue
// directory. It skips the test when not root or when losetup is missing.
func loopDevice(t *testing.T, size int64, sector int) (dev, queue string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop device test needs root (losetup)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("loop device test needs losetup (util-linux), not installed")
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", "--sector-size", strconv.Itoa(sector), img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --sector-size %d: %v: %s", sector, err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec.CommandContext(ctx, "losetup", "-d", dev).Run()
	})
	return dev, "/sys/block/" + filepath.Base(dev) + "/queue"
}

// A logical unit on a 4096-byte-sector block device takes its geometry
// from the device: READ CAPACITY(10)/(16) report 4096-byte blocks, the last
// LBA of the device and LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT =
// log2(physical/logical) as sysfs gives them (SBC-3 §5.15, §5.16); UNMAP
// reads back zeros; a configured block size of 512 is refused, naming both
// sizes.
func TestLogicalUnitOnBlockDevice(t *testing.T) {
	const size = 8 << 20
	dev, queue := loopDevice(t, size, 4096)
	bs, err := backstore.OpenFile(dev, backstore.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()

	_, err = NewLogicalUnit(LUConfig{Backstore: bs, BlockSize: 512})
	if err == nil || !strings.Contains(err.Error(), "512") || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("BlockSize 512 on a 4096-byte-sector device: %v", err)
	}

	pb, err := os.ReadFile(filepath.Join(queue, "physical_block_size"))
	if err != nil {
		t.Fatal(err)
	}
	pbs, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pbs < 4096 || pbs&(pbs-1) != 0 {
		t.Fatalf("sysfs physical_block_size %q", pb)
	}
	exp := byte(bits.TrailingZeros(uint(pbs)) - 12)

	f := newFixture(t, LUConfig{Backstore: bs, ThinProvisioning: true})
	const lastLBA = size/4096 - 1
	wantBytes(t, "READ CAPACITY(10)", f.in(cdb10(0x25, 0, 0, 0), 8), binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, lastLBA), 4096))
	rc := f.in(cdbRC16(32), 32)
	if got := binary.BigEndian.Uint64(rc[0:]); got != lastLBA {
		t.Fatalf("RETURNED LOGICAL BLOCK ADDRESS %d, want %d", got, lastLBA)
	}
	if got := binary.BigEndian.Uint32(rc[8:]); got != 4096 {
		t.Fatalf("LOGICAL BLOCK LENGTH IN BYTES %d, want 4096", got)
	}
	if got := rc[13] & 0x0F; got != exp {
		t.Fatalf("LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT %d, want %d (physical %d)", got, exp, pbs)
	}
	if rc[14]&0xC0 != 0xC0 {
		t.Fatalf("LBPME/LBPRZ not set: %#02x", rc[14])
	}

	// WRITE(10) two blocks at LBA 3, UNMAP LBA 3, read both back.
	data := bytes.Repeat([]byte{0xA5}, 2*4096)
	f.good(cdb10(0x2A, 0, 3, 2), data)
	p := unmapParam(3, 1)
	f.good(cdbUnmap(len(p)), p)
	got := f.in(cdb10(0x28, 0, 3, 2), 2*4096)
	if !bytes.Equal(got[:4096], make([]byte, 4096)) || !bytes.Equal(got[4096:], data[4096:]) {
		t.Fatal("after UNMAP of LBA 3: LBA 3 not zero or LBA 4 changed")
	}
}

// On a 512-byte-sector device the default logical block size is 512 and the
// physical block size is the device's, not the 4096-byte default of files;
// a configured 4096 is refused, naming both sizes.
func TestLogicalUnitOn512BlockDevice(t *testing.T) {
	const size = 4 << 20
	dev, queue := loopDevice(t, size, 512)
	bs, err := backstore.OpenFile(dev, backstore.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	_, err = NewLogicalUnit(LUConfig{Backstore: bs, BlockSize: 4096})
	if err == nil || !strings.Contains(err.Error(), "512") || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("BlockSize 4096 on a 512-byte-sector device: %v", err)
	}
	pb, err := os.ReadFile(filepath.Join(queue, "physical_block_size"))
	if err != nil {
		t.Fatal(err)
	}
	pbs, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil || pbs < 512 || pbs&(pbs-1) != 0 {
		t.Fatalf("sysfs physical_block_size %q", pb)
	}
	f := newFixture(t, LUConfig{Backstore: bs})
	rc := f.in(cdbRC16(32), 32)
	if got := binary.BigEndian.Uint64(rc[0:]); got != size/512-1 {
		t.Fatalf("RETURNED LOGICAL BLOCK ADDRESS %d, want %d", got, size/512-1)
	}
	if got := binary.BigEndian.Uint32(rc[8:]); got != 512 {
		t.Fatalf("LOGICAL BLOCK LENGTH IN BYTES %d, want 512", got)
	}
	if got, want := rc[13]&0x0F, byte(bits.TrailingZeros(uint(pbs))-9); got != want {
		t.Fatalf("LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT %d, want %d (physical %d)", got, want, pbs)
	}
}
