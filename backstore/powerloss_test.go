package backstore

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestPowerLossCut: writes before a Sync survive a cut, writes and unmaps
// after it are undone newest first, and the cut machine answers nothing.
func TestPowerLossCut(t *testing.T) {
	ram := NewRAM(1 << 16)
	p := NewPowerLoss(ram)
	exerciseRead := func(off int64, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if _, err := ram.ReadAt(got, off); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("at %d: %v, got % x..., want % x...", off, err, got[:4], want[:4])
		}
	}
	a, b, c := fill(4096, 1), fill(4096, 2), fill(1024, 3)
	if _, err := p.WriteAt(a, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	// Overlapping volatile writes and an unmap: the undo must restore a.
	if _, err := p.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteAt(c, 512); err != nil {
		t.Fatal(err)
	}
	if err := p.Unmap(1024, 2048); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteAt(b, 8192); err != nil {
		t.Fatal(err)
	}
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	exerciseRead(0, a)
	exerciseRead(8192, make([]byte, 4096))
	st := p.Stats()
	if st.Writes != 5 || st.Syncs != 1 || st.Dropped != 4 || st.Bytes != 4096+1024+2048+4096 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := p.WriteAt(a, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after cut: %v", err)
	}
	if _, err := p.ReadAt(a, 0); !errors.Is(err, ErrPowerCut) {
		t.Fatalf("read after cut: %v", err)
	}
	if err := p.Sync(); !errors.Is(err, ErrPowerCut) {
		t.Fatalf("sync after cut: %v", err)
	}
	if _, err := NewPowerLoss(ram).WriteAt(a, 1<<16-10); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("write past end: %v", err)
	}
}

// TestFaultBadRange: an access reaching the bad range transfers the bytes
// before it and fails with EIO; a Hang blocks until closed.
func TestFaultBadRange(t *testing.T) {
	ram := NewRAM(1 << 16)
	f := NewFault(ram)
	f.Set(func(f *Fault) { f.BadOff, f.BadLen = 4096, 512 })
	d := fill(8192, 9)
	n, err := f.WriteAt(d, 0)
	if n != 4096 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("write across the bad range: %d %v", n, err)
	}
	got := make([]byte, 8192)
	n, err = f.ReadAt(got, 2048)
	if n != 2048 || !errors.Is(err, syscall.EIO) || !bytes.Equal(got[:2048], d[2048:4096]) {
		t.Fatalf("read across the bad range: %d %v", n, err)
	}
	if n, err := f.ReadAt(got[:512], 4608); n != 512 || err != nil {
		t.Fatalf("read after the bad range: %d %v", n, err)
	}
	hang := make(chan struct{})
	f.Set(func(f *Fault) { f.Hang = hang })
	done := make(chan error, 1)
	go func() { _, err := f.ReadAt(got[:512], 0); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("read returned during the hang: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hang)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
