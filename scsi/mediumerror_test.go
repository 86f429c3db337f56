package scsi

import (
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// TestMediumErrorInformation: a backstore EIO part way through a READ or a
// WRITE gives MEDIUM ERROR (03/11/00 UNRECOVERED READ ERROR, 03/0C/00 WRITE
// ERROR) whose INFORMATION field is the first LBA in error (SBC-3 §4.18.1:
// the LBA of the first unrecovered block), not the command's first LBA;
// blocks away from the bad range keep working.
func TestMediumErrorInformation(t *testing.T) {
	for _, bsz := range []uint32{512, 4096} {
		fb := backstore.NewFault(backstore.NewRAM(1 << 20))
		f := newFixture(t, LUConfig{Backstore: fb, BlockSize: bsz})
		const badLBA = 37
		fb.Set(func(x *backstore.Fault) { x.BadOff, x.BadLen = badLBA*int64(bsz), int64(bsz) })
		for _, start := range []uint64{badLBA, badLBA - 5, badLBA - 1} {
			n := uint32(badLBA - start + 8)
			r := f.run(f.s, 0, cdb16(0x88, 0, start, n), nil, int(n*bsz))
			s := wantSense(t, r, sense.KeyMediumError, 0x11, 0x00)
			if !s.InfoValid || s.Info != badLBA {
				t.Fatalf("block size %d: READ(16) of %d blocks at LBA %d: INFORMATION valid=%v %d, want LBA %d", bsz, n, start, s.InfoValid, s.Info, badLBA)
			}
			r = f.run(f.s, 0, cdb16(0x8A, 0, start, n), make([]byte, n*bsz), 0)
			s = wantSense(t, r, sense.KeyMediumError, 0x0C, 0x00)
			if !s.InfoValid || s.Info != badLBA {
				t.Fatalf("block size %d: WRITE(16) of %d blocks at LBA %d: INFORMATION valid=%v %d, want LBA %d", bsz, n, start, s.InfoValid, s.Info, badLBA)
			}
		}
		f.in(cdb16(0x88, 0, badLBA+1, 4), 4*int(bsz))
		f.good(cdb16(0x8A, 0, 0, badLBA), make([]byte, badLBA*bsz))
	}
}
