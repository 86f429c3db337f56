package target

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/srp/initiator"
)

// viewCounter is a RAM backstore that counts the reads the SCSI core
// answered from its memory (backstore.Viewer) instead of by ReadAt.
type viewCounter struct {
	*backstore.RAM
	views atomic.Int32
}

func (v *viewCounter) View(views [][]byte, off, length int64) ([][]byte, error) {
	v.views.Add(1)
	return v.RAM.View(views, off, length)
}

// TestIWARPDataInFromBackstore reads, over pure-Go iWARP, ranges of a RAM
// logical unit whose data-in the target sends from the backstore's memory
// (RDMA WRITEs with one SGE per 64 KiB piece): ranges that start and end
// inside a piece, span written pieces and never written ones (zeros), and
// need more pieces than one WRITE takes (viewMaxSGE), with the default
// MaxRDMASize and with one that ends WRITEs inside pieces. Each read must
// return what ReadAt holds, and the large ones must have gone by View; a
// read below viewInMin is copied.
func TestIWARPDataInFromBackstore(t *testing.T) {
	for _, maxRDMA := range []int{0, 100 << 10} {
		t.Run(fmt.Sprintf("max_rdma_size=%d", maxRDMA), func(t *testing.T) { testDataInFromBackstore(t, maxRDMA) })
	}
}

func testDataInFromBackstore(t *testing.T, maxRDMA int) {
	const size = 8 << 20
	bs := &viewCounter{RAM: backstore.NewRAM(size)}
	// Written: the first 2 MiB, and 64 KiB pieces 40..41; pieces between
	// stay holes.
	pattern := make([]byte, 2<<20)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>9)
	}
	if _, err := bs.WriteAt(pattern, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.WriteAt(pattern[:128<<10], 40<<16); err != nil {
		t.Fatal(err)
	}
	ctx, s := iwarpStackOn(t, bs, 4096, maxRDMA)
	buf, err := s.NewBuffer(2<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		off, n    int // bytes, multiples of 512
		wantViews bool
	}{
		{"32 KiB inside a piece", 512, 32 << 10, true},
		{"across two pieces", 60 << 10, 64 << 10, true},
		{"1 MiB at an odd block: 17 pieces, two WRITEs", 3 * 512, 1 << 20, true},
		{"2 MiB aligned: 32 pieces", 0, 2 << 20, true},
		{"written, holes, written", 38 << 16, 5 << 16, true},
		{"holes only", 100 << 16, 256 << 10, true},
		{"below viewInMin: copied", 4096, viewInMin - 512, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := bs.views.Load()
			clear(buf.Bytes())
			cdb := make([]byte, 16)
			cdb[0] = 0x88
			binary.BigEndian.PutUint64(cdb[2:], uint64(c.off/512))
			binary.BigEndian.PutUint32(cdb[10:], uint32(c.n/512))
			r, err := s.Execute(ctx, &initiator.Command{CDB: cdb, Buffer: buf, Length: c.n})
			if err != nil || r.Status != 0 {
				t.Fatalf("READ(16): %v, status %#x", err, r.Status)
			}
			want := make([]byte, c.n)
			if _, err := bs.ReadAt(want, int64(c.off)); err != nil {
				t.Fatal(err)
			}
			if got := buf.Bytes()[:c.n]; !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("data-in differs from the backstore first at byte %d: %#x, want %#x", i, got[i], want[i])
			}
			if used := bs.views.Load() != before; used != c.wantViews {
				t.Errorf("sent from the backstore's memory: %v, want %v", used, c.wantViews)
			}
		})
	}
}
