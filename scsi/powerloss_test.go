package scsi

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// campaignCycles returns $GOSRP_CAMPAIGN_CYCLES, or def: the short CI run
// uses def, scripts/campaign/*.sh the documented full run.
func campaignCycles(t *testing.T, def int) int {
	if v := os.Getenv("GOSRP_CAMPAIGN_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("GOSRP_CAMPAIGN_CYCLES=%q: not a positive number", v)
		}
		return n
	}
	return def
}

// TestPowerLossCampaign cuts the power under a logical unit again and again
// and restarts it on what the medium kept. Each cycle runs random WRITE(16)
// (FUA or not), SYNCHRONIZE CACHE and READ(16) commands, then
// backstore.PowerLoss drops every write not made durable. SBC-3 §4.15
// promises, and the test checks block by block: with the write cache
// enabled (WCE=1) a block holds its last FUA write or the last write before
// a completed SYNCHRONIZE CACHE, or a later acknowledged write; with it
// disabled (WCE=0) it holds its last acknowledged write. The caching mode
// page must report the WCE the LU was configured with.
func TestPowerLossCampaign(t *testing.T) {
	cycles := campaignCycles(t, 20)
	for _, wce := range []bool{true, false} {
		t.Run("WCE="+strconv.FormatBool(wce), func(t *testing.T) {
			const blocks = 256
			medium := backstore.NewRAM(blocks * 512)
			durable := make([]uint64, blocks)    // version that must survive
			volatile := make([][]uint64, blocks) // acknowledged since, may be lost
			rng := rand.New(rand.NewPCG(uint64(cycles), 15))
			var version uint64
			var acked, dropped, lost, checked int
			for cycle := 0; cycle < cycles; cycle++ {
				pl := backstore.NewPowerLoss(medium)
				f := newFixture(t, LUConfig{Backstore: pl, WriteCache: wce})
				page := f.in([]byte{0x1A, 0x08, 0x08, 0, 0xFF, 0}, 0xFF)[4:] // MODE SENSE(6), DBD, caching page
				if got := page[2]&0x04 != 0; page[0]&0x3F != 0x08 || got != wce {
					t.Fatalf("cycle %d: caching page % x: WCE=%v, want %v", cycle, page[:3], got, wce)
				}
				for op := 0; op < 40; op++ {
					switch k := rng.IntN(10); {
					case k < 7: // WRITE(16), FUA one time in three
						lba := uint64(rng.IntN(blocks - 16))
						n := 1 + rng.IntN(16)
						fua := rng.IntN(3) == 0
						version++
						data := make([]byte, n*512)
						for i := 0; i < len(data); i += 8 {
							binary.BigEndian.PutUint64(data[i:], version)
						}
						flags := byte(0)
						if fua {
							flags = 0x08
						}
						f.good(cdb16(0x8A, flags, lba, uint32(n)), data)
						acked++
						for b := lba; b < lba+uint64(n); b++ {
							if fua || !wce {
								durable[b], volatile[b] = version, volatile[b][:0]
							} else {
								volatile[b] = append(volatile[b], version)
							}
						}
					case k < 9: // SYNCHRONIZE CACHE(10), whole medium
						f.good([]byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil)
						for b := range volatile {
							if l := len(volatile[b]); l > 0 {
								durable[b], volatile[b] = volatile[b][l-1], volatile[b][:0]
							}
						}
					default: // READ(16) sees the newest acknowledged version
						lba := uint64(rng.IntN(blocks))
						got := binary.BigEndian.Uint64(f.in(cdb16(0x88, 0, lba, 1), 512))
						want := durable[lba]
						if l := len(volatile[lba]); l > 0 {
							want = volatile[lba][l-1]
						}
						if got != want {
							t.Fatalf("cycle %d: LBA %d reads version %d before the cut, want %d", cycle, lba, got, want)
						}
					}
				}
				if err := pl.Cut(); err != nil {
					t.Fatal(err)
				}
				dropped += pl.Stats().Dropped
				blk := make([]byte, 512)
				for b := range blocks {
					if _, err := medium.ReadAt(blk, int64(b)*512); err != nil {
						t.Fatal(err)
					}
					got := binary.BigEndian.Uint64(blk)
					checked++
					if got != durable[b] && !slices.Contains(volatile[b], got) {
						lost++
						t.Errorf("cycle %d: LBA %d holds version %d after the power cut; durable %d, acknowledged since %v", cycle, b, got, durable[b], volatile[b])
					}
					durable[b], volatile[b] = got, volatile[b][:0]
				}
				f.s.Close()
			}
			t.Logf("power-loss campaign WCE=%v: %d cycles, %d acknowledged writes, %d volatile writes dropped by the cuts, %d blocks checked, %d promised blocks lost", wce, cycles, acked, dropped, checked, lost)
			if !wce && dropped != 0 {
				t.Fatalf("WCE=0: %d writes were still volatile at a cut; every write must be flushed before GOOD", dropped)
			}
		})
	}
}

// TestPowerLossConcurrent cuts the power under concurrent writers with the
// write cache on: eight writers, each on its own blocks, issue WRITE(16)
// (FUA one time in four) and now and then SYNCHRONIZE CACHE, all at once,
// so flushes overlap writes and each other (the LU coalesces them). A
// write acknowledged before a SYNCHRONIZE CACHE was issued, or with FUA,
// must survive the cut; a write acknowledged while a flush ran may or may
// not. Sequence numbers taken at acknowledgement and at issue order them.
func TestPowerLossConcurrent(t *testing.T) {
	cycles := campaignCycles(t, 10)
	const writers, per = 8, 32
	medium := backstore.NewRAM(writers * per * 512)
	var seq atomic.Uint64
	lost, dropped, acked := 0, 0, 0
	for cycle := 0; cycle < cycles; cycle++ {
		pl := backstore.NewPowerLoss(medium)
		f := newFixture(t, LUConfig{Backstore: pl, WriteCache: true})
		type ack struct {
			version, seq uint64
			fua          bool
		}
		acks := make([][]ack, writers*per) // per block, in order
		syncs := make([]uint64, writers)   // per writer: issue seq of its last completed flush
		var tags atomic.Uint64
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(cycle), uint64(w)))
				exec := func(cdb, out []byte) Result {
					cmd := &Command{Tag: tags.Add(1), LUN: EncodeLUN(0), CDB: cdb, DataOut: out}
					return f.s.Execute(testCtx(t), cmd)
				}
				for op := 0; op < 30; op++ {
					if rng.IntN(6) == 0 {
						issued := seq.Add(1)
						if r := exec([]byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil); r.Status != sense.StatusGood {
							t.Errorf("SYNCHRONIZE CACHE: status %#x", r.Status)
							return
						}
						syncs[w] = issued
						continue
					}
					b := w*per + rng.IntN(per)
					version := uint64(cycle)<<32 | uint64(w)<<16 | uint64(op+1)
					data := make([]byte, 512)
					for i := 0; i < 512; i += 8 {
						binary.BigEndian.PutUint64(data[i:], version)
					}
					fua := rng.IntN(4) == 0
					flags := byte(0)
					if fua {
						flags = 0x08
					}
					if r := exec(cdb16(0x8A, flags, uint64(b), 1), data); r.Status != sense.StatusGood {
						t.Errorf("WRITE(16): status %#x", r.Status)
						return
					}
					acks[b] = append(acks[b], ack{version, seq.Add(1), fua})
				}
			}()
		}
		wg.Wait()
		// The latest flush any writer completed covers every write
		// acknowledged before it was issued, whoever wrote it.
		var flushed uint64
		for _, s := range syncs {
			flushed = max(flushed, s)
		}
		if err := pl.Cut(); err != nil {
			t.Fatal(err)
		}
		dropped += pl.Stats().Dropped
		blk := make([]byte, 512)
		for b, as := range acks {
			acked += len(as)
			// The newest write the promises keep, and the versions allowed
			// (it or anything acknowledged later; the block's old contents
			// when nothing is promised).
			if _, err := medium.ReadAt(blk, int64(b)*512); err != nil {
				t.Fatal(err)
			}
			got := binary.BigEndian.Uint64(blk)
			keep := -1
			for i, a := range as {
				if a.fua || a.seq < flushed {
					keep = i
				}
			}
			if keep < 0 {
				continue // nothing promised this cycle
			}
			ok := false
			for _, a := range as[keep:] {
				ok = ok || a.version == got
			}
			if !ok {
				lost++
				t.Errorf("cycle %d: block %d holds version %x after the cut; promised %x (or later)", cycle, b, got, as[keep].version)
			}
		}
		f.s.Close()
	}
	t.Logf("concurrent power-loss campaign: %d cycles, %d acknowledged writes, %d volatile writes dropped by the cuts, %d promised blocks lost", cycles, acked, dropped, lost)
}
