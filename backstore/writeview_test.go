package backstore

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

// TestRAMWriteView: WriteView gives the medium itself, one slice per chunk
// the range touches; bytes written into the slices read back through
// ReadAt, the range's pages count as written, and the errors are
// WriteAt's.
func TestRAMWriteView(t *testing.T) {
	r := NewRAM(4 * RAMChunkSize)
	off, n := int64(RAMChunkSize-4096), int64(RAMChunkSize+8192) // three chunks: 4 KiB, 64 KiB, 4 KiB
	views, err := r.WriteView(nil, off, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 || len(views[0]) != 4096 || len(views[1]) != RAMChunkSize || len(views[2]) != 4096 {
		t.Fatalf("views of lengths %d, want 4096, %d, 4096", lens(views), RAMChunkSize)
	}
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + 1)
	}
	k := 0
	for _, v := range views {
		k += copy(v, want[k:])
	}
	got := make([]byte, n)
	if _, err := r.ReadAt(got, off); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAt after filling the views: err %v, equal %v", err, bytes.Equal(got, want))
	}
	// The pages the range touches are mapped, the one before it is not.
	if mapped, run, _ := r.AllocationStatus(off, n); !mapped || run != n {
		t.Fatalf("AllocationStatus(%d) = %v, %d; want mapped for %d bytes", off, mapped, run, n)
	}
	if mapped, _, _ := r.AllocationStatus(off-4096, 4096); mapped {
		t.Fatal("the page before the range is mapped")
	}
	if got := r.AllocatedBytes(); got != 3*RAMChunkSize {
		t.Fatalf("AllocatedBytes = %d, want %d", got, 3*RAMChunkSize)
	}
	if _, err := r.WriteView(nil, 4*RAMChunkSize-4096, 8192); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("WriteView past the end: %v, want ErrOutOfRange", err)
	}
	r.Close()
	if _, err := r.WriteView(nil, 0, 4096); !errors.Is(err, ErrClosed) {
		t.Fatalf("WriteView after Close: %v, want ErrClosed", err)
	}
}

func lens(v [][]byte) []int {
	var n []int
	for _, b := range v {
		n = append(n, len(b))
	}
	return n
}

// A chunk's memory starts page-aligned: the view of a block at a 4 KiB
// offset lies in one page of memory (one TLB entry, whole cache lines),
// both for a chunk WriteView allocates and one WriteAt allocates.
func TestRAMViewsPageAligned(t *testing.T) {
	r := NewRAM(4 * RAMChunkSize)
	if _, err := r.WriteAt(make([]byte, 512), 3*RAMChunkSize+512); err != nil {
		t.Fatal(err)
	}
	wv, err := r.WriteView(nil, RAMChunkSize+2*RAMPageSize, RAMPageSize)
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.View(nil, 3*RAMChunkSize+RAMPageSize, RAMPageSize)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string][][]byte{"WriteView": wv, "View": v} {
		if len(s) != 1 || len(s[0]) != RAMPageSize {
			t.Fatalf("%s: %d slices, want one of %d bytes", name, len(s), RAMPageSize)
		}
		if a := uintptr(unsafe.Pointer(&s[0][0])); a%RAMPageSize != 0 {
			t.Errorf("%s of a 4 KiB-aligned block at %#x: %d bytes into a page", name, a, a%RAMPageSize)
		}
	}
}
