// Package backstoretest is the conformance suite of the backstore contract
// (package backstore): every backstore kind — RAM, file, block device, Ceph
// RBD — runs it, as every RDMA provider runs rdma/rdmatest. It checks the
// core contract (size, zero-filled start, reads returning what was written,
// range errors, concurrent use, Close) and each optional ability the
// backstore has (Syncer, Unmapper, WriteSamer, CompareAndWriter, Resizer)
// against an in-memory model through a random operation sequence, in the
// manner of pebble's metamorphic tests.
package backstoretest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/backstore"
)

// Open returns a new, zero-filled backstore of size bytes; the suite closes
// it (a backstore the test cleanup closes again must tolerate that).
type Open func(t *testing.T, size int64) backstore.Backstore

// Size of the backstores the suite asks for, bytes: two 4 MiB RBD objects
// and a piece, so ranges cross object boundaries.
const Size = 9 << 20

// unit is the granularity of the suite's offsets and lengths, bytes (one
// 512-byte logical block).
const unit = 512

// Run runs the suite against backstores from open.
func Run(t *testing.T, open Open) {
	t.Run("Basics", func(t *testing.T) { basics(t, open(t, Size)) })
	t.Run("Random", func(t *testing.T) { random(t, open(t, Size), 300) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, open(t, Size)) })
	t.Run("Resize", func(t *testing.T) { resize(t, open(t, Size)) })
	t.Run("Close", func(t *testing.T) { closed(t, open(t, Size)) })
}

func basics(t *testing.T, bs backstore.Backstore) {
	defer bs.Close()
	if got := bs.Size(); got != Size {
		t.Fatalf("Size = %d, want %d", got, Size)
	}
	// A new backstore reads as zeros, across an object boundary too.
	buf := bytes.Repeat([]byte{0xEE}, 64<<10)
	if _, err := bs.ReadAt(buf, 4<<20-32<<10); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Fatal("a new backstore does not read as zeros")
	}
	// The last byte can be written and read; one more cannot.
	if _, err := bs.WriteAt([]byte{0x5A}, Size-1); err != nil {
		t.Fatalf("write of the last byte: %v", err)
	}
	one := make([]byte, 1)
	if _, err := bs.ReadAt(one, Size-1); err != nil || one[0] != 0x5A {
		t.Fatalf("read of the last byte: %v %x", err, one)
	}
	for _, r := range []struct {
		name string
		off  int64
		n    int
	}{{"past the end", Size - unit/2, unit}, {"at the end", Size, 1}, {"negative offset", -unit, unit}} {
		if _, err := bs.ReadAt(make([]byte, r.n), r.off); !errors.Is(err, backstore.ErrOutOfRange) {
			t.Errorf("read %s: %v, want ErrOutOfRange", r.name, err)
		}
		if _, err := bs.WriteAt(make([]byte, r.n), r.off); !errors.Is(err, backstore.ErrOutOfRange) {
			t.Errorf("write %s: %v, want ErrOutOfRange", r.name, err)
		}
	}
	// The last byte survived the refused writes.
	if _, err := bs.ReadAt(one, Size-1); err != nil || one[0] != 0x5A {
		t.Fatalf("last byte after refused writes: %v %x", err, one)
	}
	if s, ok := bs.(backstore.Syncer); ok {
		if err := s.Sync(); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
}

// random applies n random operations to bs and to a model, checking every
// read against the model.
func random(t *testing.T, bs backstore.Backstore, n int) {
	defer bs.Close()
	model := make([]byte, Size)
	rng := rand.New(rand.NewPCG(uint64(n), 0xbac))
	span := func(maxUnits int) (int64, int) {
		l := unit * (1 + rng.IntN(maxUnits))
		off := int64(unit * rng.IntN((Size-l)/unit+1))
		if rng.IntN(8) == 0 { // aim at the 4 MiB boundary
			off = max(0, min(int64(Size-l), 4<<20-int64(l)/2/unit*unit))
		}
		return off, l
	}
	check := func(op string, off int64, l int) {
		t.Helper()
		got := make([]byte, l)
		if _, err := bs.ReadAt(got, off); err != nil {
			t.Fatalf("after %s: read [%d,+%d): %v", op, off, l, err)
		}
		if i := firstDiff(got, model[off:off+int64(l)]); i >= 0 {
			t.Fatalf("after %s: byte %d differs from the model (read %x, want %x)", op, off+int64(i), got[i], model[off+int64(i)])
		}
	}
	unmapper, _ := bs.(backstore.Unmapper)
	samer, _ := bs.(backstore.WriteSamer)
	cw, _ := bs.(backstore.CompareAndWriter)
	for i := 0; i < n; i++ {
		switch k := rng.IntN(10); {
		case k < 4:
			off, l := span(256)
			p := make([]byte, l)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if _, err := bs.WriteAt(p, off); err != nil {
				t.Fatalf("write [%d,+%d): %v", off, l, err)
			}
			copy(model[off:], p)
		case k < 7:
			off, l := span(256)
			check("reads", off, l)
		case k == 7 && unmapper != nil:
			off, l := span(2048)
			if err := unmapper.Unmap(off, int64(l)); err != nil {
				t.Fatalf("Unmap [%d,+%d): %v", off, l, err)
			}
			clear(model[off : off+int64(l)])
			check("unmap", max(0, off-unit), min(l+2*unit, int(Size-max(0, off-unit))))
		case k == 8 && samer != nil:
			off, l := span(64)
			block := make([]byte, unit)
			for j := range block {
				block[j] = byte(rng.Uint32())
			}
			if err := samer.WriteSame(block, off, int64(l/unit)); err != nil {
				t.Fatalf("WriteSame [%d,+%d): %v", off, l, err)
			}
			for p := off; p < off+int64(l); p += unit {
				copy(model[p:], block)
			}
			check("write same", off, l)
		case k == 9 && cw != nil:
			// One sector: what every CompareAndWriter takes (librbd's limit).
			off, _ := span(1)
			cmp := bytes.Clone(model[off : off+unit])
			w := make([]byte, unit)
			for j := range w {
				w[j] = byte(rng.Uint32())
			}
			bad := rng.IntN(2) == 0
			at := rng.IntN(unit)
			if bad {
				cmp[at] ^= 0x81
			}
			err := cw.CompareAndWrite(cmp, w, off)
			var mis *backstore.MiscompareError
			switch {
			case bad && (!errors.As(err, &mis) || mis.Offset != int64(at)):
				t.Fatalf("CompareAndWrite with byte %d different: %v, want a miscompare at %d", at, err, at)
			case !bad && err != nil:
				t.Fatalf("CompareAndWrite of matching data: %v", err)
			case !bad:
				copy(model[off:], w)
			}
			check("compare and write", off, unit)
		}
	}
	// Everything, in 1 MiB reads.
	for off := int64(0); off < Size; off += 1 << 20 {
		check("the sequence", off, int(min(1<<20, Size-off)))
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// concurrent: 8 writers on disjoint ranges at once, then each range reads
// back its own writer's data.
func concurrent(t *testing.T, bs backstore.Backstore) {
	defer bs.Close()
	const writers, per = 8, 64 << 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(w + 1)}, unit)
			for off := int64(w * per); off < int64((w+1)*per); off += unit {
				// Interleaved with the others: each range hops across the
				// backstore, 1 MiB apart.
				pos := off%per + int64(w)*(1<<20)
				if _, err := bs.WriteAt(p, pos); err != nil {
					errs <- fmt.Errorf("writer %d at %d: %w", w, pos, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < writers; w++ {
		got := make([]byte, per)
		if _, err := bs.ReadAt(got, int64(w)*(1<<20)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(w + 1)}, per)) {
			t.Fatalf("writer %d's range does not read back its data", w)
		}
	}
}

// resize: a Resizer grows (the new part reads zeros) and shrinks (the end
// moves), and data before the old end stays.
func resize(t *testing.T, bs backstore.Backstore) {
	defer bs.Close()
	r, ok := bs.(backstore.Resizer)
	if !ok {
		t.Skip("not a Resizer")
	}
	mark := bytes.Repeat([]byte{0x77}, unit)
	if _, err := bs.WriteAt(mark, Size-unit); err != nil {
		t.Fatal(err)
	}
	if err := r.Resize(Size + 4<<20); err != nil {
		t.Fatal(err)
	}
	if got := bs.Size(); got != Size+4<<20 {
		t.Fatalf("Size after growing = %d, want %d", got, Size+4<<20)
	}
	tail := make([]byte, 4<<20+unit)
	if _, err := bs.ReadAt(tail, Size-unit); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tail[:unit], mark) || !bytes.Equal(tail[unit:], make([]byte, 4<<20)) {
		t.Fatal("after growing: the old data is gone or the new part is not zeros")
	}
	if _, err := bs.WriteAt(mark, Size+4<<20-unit); err != nil {
		t.Fatalf("write at the new end: %v", err)
	}
	if err := r.Resize(Size); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ReadAt(make([]byte, unit), Size); !errors.Is(err, backstore.ErrOutOfRange) {
		t.Fatalf("read past the shrunk end: %v, want ErrOutOfRange", err)
	}
	if err := r.Resize(-1); err == nil {
		t.Fatal("Resize(-1) succeeded")
	}
}

// closed: after Close, reads and writes fail.
func closed(t *testing.T, bs backstore.Backstore) {
	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ReadAt(make([]byte, unit), 0); err == nil {
		t.Fatal("read after Close succeeded")
	}
	if _, err := bs.WriteAt(make([]byte, unit), 0); err == nil {
		t.Fatal("write after Close succeeded")
	}
}
