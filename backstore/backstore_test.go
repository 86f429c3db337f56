package backstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*13)
	}
	return b
}

// exercise runs the common contract checks on a backstore of size bytes.
func exercise(t *testing.T, b Backstore, size int64) {
	t.Helper()
	if b.Size() != size {
		t.Fatalf("Size %d, want %d", b.Size(), size)
	}
	z := make([]byte, 4096)
	if _, err := b.ReadAt(z, 8192); err != nil || !bytes.Equal(z, make([]byte, 4096)) {
		t.Fatalf("fresh read: %v", err)
	}
	// A write spanning a RAM chunk boundary.
	d := fill(10000, 7)
	off := int64(RAMChunkSize - 3000)
	if n, err := b.WriteAt(d, off); err != nil || n != len(d) {
		t.Fatalf("write: %d %v", n, err)
	}
	got := make([]byte, len(d))
	if n, err := b.ReadAt(got, off); err != nil || n != len(d) || !bytes.Equal(got, d) {
		t.Fatalf("read back: %d %v", n, err)
	}
	// Last byte is addressable, one past is not.
	if _, err := b.WriteAt([]byte{1}, size-1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt([]byte{1, 2}, size-1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("write past end: %v", err)
	}
	if _, err := b.ReadAt(make([]byte, 1), size); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := b.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("negative offset: %v", err)
	}
	// Unmap: the range reads back as zeros, neighbours keep their data.
	if u, ok := b.(Unmapper); ok {
		if err := u.Unmap(off+100, 5000); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		want := append([]byte{}, d...)
		clear(want[100:5100])
		if !bytes.Equal(got, want) {
			t.Fatal("unmap result")
		}
		if err := u.Unmap(size-10, 11); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("unmap past end: %v", err)
		}
	}
}

func TestRAM(t *testing.T) {
	r := NewRAM(1 << 20)
	exercise(t, r, 1<<20)
}

func TestRAMSparse(t *testing.T) {
	r := NewRAM(1 << 30)
	if r.AllocatedBytes() != 0 {
		t.Fatal("fresh RAM backstore allocated memory")
	}
	if _, err := r.WriteAt([]byte{1}, 5<<20); err != nil {
		t.Fatal(err)
	}
	if r.AllocatedBytes() != RAMChunkSize {
		t.Fatalf("allocated %d after a 1-byte write", r.AllocatedBytes())
	}
	m, l, err := r.AllocationStatus(0, 1<<30)
	if err != nil || m || l != 5<<20-(5<<20)%RAMChunkSize {
		t.Fatalf("status %v %d %v", m, l, err)
	}
	m, l, _ = r.AllocationStatus(5<<20, 1<<30)
	if !m || l != RAMPageSize {
		t.Fatalf("status %v %d", m, l)
	}
	// Unmapping part of a page leaves it mapped (and zeroed); unmapping
	// the whole page leaves the chunk with no mapped page: freed.
	if err := r.Unmap(5<<20, 100); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := r.AllocationStatus(5<<20, 1); !m || r.AllocatedBytes() != RAMChunkSize {
		t.Fatal("partial page unmap")
	}
	if err := r.Unmap(5<<20, RAMPageSize); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := r.AllocationStatus(5<<20, 1); m || r.AllocatedBytes() != 0 {
		t.Fatal("whole page unmap")
	}
	if _, err := r.WriteAt([]byte{1}, 5<<20); err != nil {
		t.Fatal(err)
	}
	// Unmapping a whole chunk frees it.
	if err := r.Unmap(5<<20, RAMChunkSize); err != nil {
		t.Fatal(err)
	}
	if r.AllocatedBytes() != 0 {
		t.Fatal("chunk not freed")
	}
}

func TestRAMResize(t *testing.T) {
	r := NewRAM(3 * RAMChunkSize / 2)
	end := r.Size() - 1
	if _, err := r.WriteAt([]byte{9}, end); err != nil {
		t.Fatal(err)
	}
	if err := r.Resize(RAMChunkSize + 10); err != nil {
		t.Fatal(err)
	}
	if err := r.Resize(2 * RAMChunkSize); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := r.ReadAt(b, end); err != nil || b[0] != 0 {
		t.Fatalf("bytes past a shrink must read zero after growing: %v %d", err, b[0])
	}
}

func TestRAMConcurrent(t *testing.T) {
	r := NewRAM(1 << 20)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := 0; i < 200; i++ {
				off := int64((i*4096 + g*512) % (1<<20 - 4096))
				if i%2 == 0 {
					r.WriteAt(buf, off)
				} else {
					r.ReadAt(buf, off)
				}
				if i%50 == 0 {
					r.Unmap(off, 4096)
				}
			}
		}()
	}
	wg.Wait()
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lun.img")
	f, err := OpenFile(path, FileOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exercise(t, f, 1<<20)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Data reaches the file.
	raw, err := os.ReadFile(path)
	if err != nil || len(raw) != 1<<20 || !bytes.Equal(raw[RAMChunkSize-3000:RAMChunkSize-2900], fill(10000, 7)[:100]) {
		t.Fatalf("file contents: %v %d", err, len(raw))
	}
	// A punched 64 KiB aligned hole is reported unallocated (on
	// filesystems with SEEK_HOLE; tmpfs and ext4 have it).
	if _, err := f.WriteAt(fill(1<<16, 1), 1<<18); err != nil {
		t.Fatal(err)
	}
	if err := f.Unmap(1<<18, 1<<16); err != nil {
		t.Fatal(err)
	}
	if m, l, err := f.AllocationStatus(1<<18, 1<<16); err != nil || m || l != 1<<16 {
		if f.noPunch {
			t.Logf("filesystem without hole punching: %v %d %v", m, l, err)
		} else {
			t.Fatalf("status after punch: mapped=%v len=%d err=%v", m, l, err)
		}
	}
	if m, _, err := f.AllocationStatus(RAMChunkSize-3000, 100); err != nil || !m {
		t.Fatalf("written range reported unmapped: %v %v", m, err)
	}
	// Resize and Refresh.
	if err := f.Resize(2 << 20); err != nil || f.Size() != 2<<20 {
		t.Fatalf("resize: %v %d", err, f.Size())
	}
	if err := os.Truncate(path, 3<<20); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Refresh(); err != nil || n != 3<<20 || f.Size() != 3<<20 {
		t.Fatalf("refresh: %d %v", n, err)
	}
	if f.IsBlockDevice() || f.LogicalBlockSize() != 0 {
		t.Fatal("regular file reported as block device")
	}
}

func TestFileReadOnlyAndErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFile(filepath.Join(dir, "missing"), FileOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := OpenFile(dir, FileOptions{}); err == nil {
		t.Fatal("directory accepted")
	}
	path := filepath.Join(dir, "ro.img")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{1}, 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write to read-only file: %v", err)
	}
}

func TestFaultPassThrough(t *testing.T) {
	fb := NewFault(NewRAM(1 << 20))
	exercise(t, fb, 1<<20)
	fb.Set(func(f *Fault) { f.ReadErr = syscall.EIO })
	if _, err := fb.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EIO) {
		t.Fatal(err)
	}
	if err := fb.Sync(); err != nil || fb.SyncCount() != 1 {
		t.Fatal("sync")
	}
}
