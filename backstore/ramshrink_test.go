package backstore

import (
	"bytes"
	"sync"
	"testing"
)

// Shrinking into a chunk whose written pages all lie past the new end
// leaves it with no written page: it is freed, as Unmap frees such a
// chunk.
func TestShrinkFreesEmptyChunk(t *testing.T) {
	r := NewRAM(RAMChunkSize)
	if _, err := r.WriteAt(bytes.Repeat([]byte{7}, RAMPageSize), 8*RAMPageSize); err != nil {
		t.Fatal(err)
	}
	if err := r.Resize(2 * RAMPageSize); err != nil {
		t.Fatal(err)
	}
	mapped, n, err := r.AllocationStatus(0, 2*RAMPageSize)
	if err != nil || mapped {
		t.Fatalf("AllocationStatus after shrink: mapped=%v n=%d err=%v", mapped, n, err)
	}
	if got := r.AllocatedBytes(); got != 0 {
		t.Errorf("AllocatedBytes after shrink = %d, want 0: a chunk with no mapped page stays allocated", got)
	}
}

// Shrink then grow: a held view keeps the old data, bytes past the old cut read
// zeros, page bits past the cut are dropped.
func TestShrinkGrowViewsPages(t *testing.T) {
	r := NewRAM(RAMChunkSize)
	all := bytes.Repeat([]byte{0xAB}, RAMChunkSize)
	if _, err := r.WriteAt(all, 0); err != nil {
		t.Fatal(err)
	}
	v, err := r.View(nil, 0, RAMChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	cut := int64(RAMPageSize + 512)
	if err := r.Resize(cut); err != nil {
		t.Fatal(err)
	}
	if err := r.Resize(RAMChunkSize); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, RAMChunkSize)
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:cut], all[:cut]) || !bytes.Equal(got[cut:], make([]byte, RAMChunkSize-cut)) {
		t.Fatal("grow after shrink: wrong bytes")
	}
	if !bytes.Equal(v[0], all) {
		t.Fatal("held view changed by shrink")
	}
	if m, n, _ := r.AllocationStatus(2*RAMPageSize, RAMChunkSize); m {
		t.Fatalf("page past the cut still mapped (%d bytes)", n)
	}
}

// Resize racing WriteAt / View / Unmap / AllocationStatus on the last chunk.
func TestShrinkRace(t *testing.T) {
	r := NewRAM(2 * RAMChunkSize)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	p := bytes.Repeat([]byte{1}, 8192)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var views [][]byte
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := int64(RAMChunkSize + (i%4)*4096)
				switch g {
				case 0:
					_, _ = r.WriteAt(p, off)
				case 1:
					views, _ = r.View(views[:0], off, 8192)
				case 2:
					_ = r.Unmap(off, 4096)
				case 3:
					_, _, _ = r.AllocationStatus(off, 8192)
				}
			}
		}()
	}
	for i := range 2000 {
		_ = r.Resize(int64(RAMChunkSize + 1024 + (i%40)*1024))
	}
	close(stop)
	wg.Wait()
}
