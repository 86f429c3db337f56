package scsi

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// TestMetamorphic applies one random sequence of medium commands to a RAM
// and a file logical unit and to a plain byte slice model, and checks every
// READ against the model (pebble-style metamorphic testing).
func TestMetamorphic(t *testing.T) {
	const size = 2 << 20
	const blocks = size / 512
	fb, err := backstore.OpenFile(filepath.Join(t.TempDir(), "m.img"), backstore.FileOptions{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	stores := []backstore.Backstore{backstore.NewRAM(size), fb}
	var fx []*fixture
	for _, b := range stores {
		fx = append(fx, newFixture(t, LUConfig{Backstore: b, ThinProvisioning: true, WriteCache: true}))
	}
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 1000; step++ {
		lba := uint64(rng.IntN(blocks))
		n := uint32(1 + rng.IntN(min(64, blocks-int(lba))))
		var cdb, out []byte
		apply := func() {}
		switch op := rng.IntN(6); op {
		case 0, 1: // WRITE(16), FUA sometimes
			out = make([]byte, int(n)*512)
			for i := range out {
				out[i] = byte(rng.Uint32())
			}
			flags := byte(0)
			if op == 1 {
				flags = 0x08
			}
			cdb = cdb16(0x8A, flags, lba, n)
			apply = func() { copy(model[lba*512:], out) }
		case 2: // UNMAP one range
			out = make([]byte, 24)
			copy(out, hx(`0016 0010 00000000`))
			for i := 0; i < 8; i++ {
				out[8+i] = byte(lba >> (56 - 8*i))
			}
			out[16], out[17], out[18], out[19] = 0, 0, byte(n>>8), byte(n)
			cdb = []byte{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}
			apply = func() { clear(model[lba*512 : (lba+uint64(n))*512]) }
		case 3: // WRITE SAME(16) with a random block
			blk := make([]byte, 512)
			if rng.IntN(2) == 0 {
				for i := range blk {
					blk[i] = byte(rng.Uint32())
				}
			}
			unmap := byte(0)
			if rng.IntN(2) == 0 {
				unmap = 0x08
			}
			out = blk
			cdb = cdb16(0x93, unmap, lba, n)
			apply = func() {
				for i := uint64(0); i < uint64(n); i++ {
					copy(model[(lba+i)*512:], blk)
				}
			}
		case 4: // COMPARE AND WRITE of one block against the model
			nw := make([]byte, 512)
			for i := range nw {
				nw[i] = byte(rng.Uint32())
			}
			out = append(append([]byte{}, model[lba*512:(lba+1)*512]...), nw...)
			cdb = make([]byte, 16)
			cdb[0], cdb[13] = 0x89, 1
			for i := 0; i < 8; i++ {
				cdb[2+i] = byte(lba >> (56 - 8*i))
			}
			apply = func() { copy(model[lba*512:], nw) }
		case 5: // SYNCHRONIZE CACHE(10)
			cdb = cdb10(0x35, 0, 0, 0)
		}
		for _, f := range fx {
			r := f.run(f.s, 0, cdb, out, 0)
			if r.Status != sense.StatusGood {
				t.Fatalf("step %d CDB % x: status %#x sense % x", step, cdb, r.Status, r.Sense)
			}
		}
		apply()
		// Read back a random range and compare.
		rl := uint64(rng.IntN(blocks))
		rn := uint32(1 + rng.IntN(min(128, blocks-int(rl))))
		for i, f := range fx {
			got := f.in(cdb16(0x88, 0, rl, rn), int(rn)*512)
			if !bytes.Equal(got, model[rl*512:(rl+uint64(rn))*512]) {
				t.Fatalf("step %d store %d: READ %d+%d differs from the model", step, i, rl, rn)
			}
		}
	}
}
