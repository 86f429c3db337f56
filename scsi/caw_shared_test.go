package scsi

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// sharedMedium is one medium behind several gateways' logical units, with a
// compare-and-write atomic on the medium itself (as librbd's is on the OSDs).
type sharedMedium struct {
	*backstore.RAM
	mu    sync.Mutex // the medium's own atomicity; the LUs' locks do not reach across gateways
	calls int
}

func (m *sharedMedium) CompareAndWrite(cmp, write []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	cur := make([]byte, len(cmp))
	if _, err := m.ReadAt(cur, off); err != nil {
		return err
	}
	for i := range cmp {
		if cmp[i] != cur[i] {
			return &backstore.MiscompareError{Offset: int64(i)}
		}
	}
	_, err := m.WriteAt(write, off)
	return err
}

// TestCompareAndWriteSharedMedium increments a counter in block 0 through
// two logical units (two gateways) on one medium: every increment survives
// only because COMPARE AND WRITE goes to the medium's atomic operation.
func TestCompareAndWriteSharedMedium(t *testing.T) {
	m := &sharedMedium{RAM: backstore.NewRAM(1 << 20)}
	var fs []*fixture
	for range 2 {
		fs = append(fs, newFixture(t, LUConfig{Backstore: m}))
	}
	const per = 60
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for g, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			tag := uint64(g+1) << 32
			for i := 0; i < per; i++ {
				for {
					tag++
					cur := make([]byte, 512)
					if r := f.s.Execute(ctx, &Command{Tag: tag, CDB: cdb16(0x88, 0, 0, 1), DataIn: cur}); r.Status != sense.StatusGood {
						errs <- "read failed"
						return
					}
					nw := make([]byte, 512)
					v := be32(cur) + 1
					nw[0], nw[1], nw[2], nw[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
					caw := make([]byte, 16)
					caw[0], caw[13] = 0x89, 1
					tag++
					r := f.s.Execute(ctx, &Command{Tag: tag, CDB: caw, DataOut: append(cur, nw...)})
					if r.Status == sense.StatusGood {
						break
					}
					if s, _ := sense.Parse(r.Sense); s.Key != sense.KeyMiscompare || s.Info > 3 {
						errs <- "unexpected sense"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if got := be32(fs[1].in(cdb16(0x88, 0, 0, 1), 512)); got != 2*per {
		t.Fatalf("counter %d, want %d", got, 2*per)
	}
	if m.calls < 2*per {
		t.Fatalf("%d medium compare-and-writes, want at least %d", m.calls, 2*per)
	}
	// A miscompare's INFORMATION is the medium's offset of the first difference.
	cur := fs[0].in(cdb16(0x88, 0, 0, 1), 512)
	bad := bytes.Clone(cur)
	bad[200] ^= 1
	caw := make([]byte, 16)
	caw[0], caw[13] = 0x89, 1
	s := wantSense(t, fs[0].run(fs[0].s, 0, caw, append(bad, cur...), 0), sense.KeyMiscompare, 0x1D, 0x00)
	if !s.InfoValid || s.Info != 200 {
		t.Fatalf("INFORMATION %v %d, want 200", s.InfoValid, s.Info)
	}
}
