package scsi

import (
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/backstore"
)

// TestStressRaces runs I/O from several nexuses while the capacity
// changes, the LUN is removed and re-added, and ABORT TASK, ABORT TASK
// SET, CLEAR TASK SET, LOGICAL UNIT RESET, I_T NEXUS RESET and the QUERY
// functions race the commands they target.
// Every Execute and TaskManagement must return (bounded by the test
// context) with a valid status; run with -race.
func TestStressRaces(t *testing.T) {
	t.Run("RAM", func(t *testing.T) { stressRaces(t, backstore.NewRAM(1<<20)) })
	t.Run("File", func(t *testing.T) {
		f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "lu"), backstore.FileOptions{Size: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		stressRaces(t, f)
	})
}

func stressRaces(t *testing.T, bs backstore.Backstore) {
	ctx := testCtx(t)
	lu, err := NewLogicalUnit(LUConfig{Backstore: bs, ThinProvisioning: true, MaxTransferBytes: 64 << 10, WriteCache: true})
	if err != nil {
		t.Fatal(err)
	}
	tg := NewTarget(TargetConfig{})
	if err := tg.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	const workers, iters = 4, 300
	var wg sync.WaitGroup
	var tagMu sync.Mutex
	inflight := map[Session][]uint64{}
	sessions := make([]Session, workers)
	for w := range sessions {
		n := Nexus{InitiatorPortID: fmt32(uint64(w + 1)), TargetPortID: nexusA.TargetPortID, RelativeTargetPort: 1}
		sessions[w] = tg.NewSession(n)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := sessions[w]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < iters && ctx.Err() == nil; i++ {
				tag := uint64(w)<<32 | uint64(i)
				lba := rng.Uint64N(2200)
				n := uint32(rng.IntN(16))
				var cmd *Command
				switch rng.IntN(7) {
				case 0:
					cmd = &Command{CDB: cdb16(0x88, 0, lba, n), DataIn: make([]byte, int(n)*512)}
				case 1:
					cmd = &Command{CDB: cdb16(0x8A, 0x08, lba, n), DataOut: make([]byte, int(n)*512)}
				case 2:
					cmd = &Command{CDB: cdb16(0x93, 0x09, lba, n+1)}
				case 3:
					cmd = &Command{CDB: cdb16(0x8F, 0, lba, n)}
				case 4:
					c := cdb16(0x89, 0, lba, 0)
					c[13] = byte(n)
					cmd = &Command{CDB: c, DataOut: make([]byte, 2*int(n)*512)}
				case 5:
					cmd = &Command{CDB: cdb16(0x9E, 0x12, lba, 64), DataIn: make([]byte, 64)}
				default:
					cmd = &Command{CDB: cdbRC16(32), DataIn: make([]byte, 32)}
				}
				cmd.Tag, cmd.LUN, cmd.Attr = tag, EncodeLUN(0), TaskAttr(rng.IntN(3))
				tagMu.Lock()
				inflight[s] = append(inflight[s], tag)
				tagMu.Unlock()
				r := s.Execute(ctx, cmd)
				checkResultValid(t, cmd.CDB, r)
				if r.DataInLen > len(cmd.DataIn) {
					t.Errorf("data-in %d > buffer %d", r.DataInLen, len(cmd.DataIn))
				}
			}
		}(w)
	}
	// Disturbers.
	var dwg sync.WaitGroup
	stop := make(chan struct{})
	dwg.Add(2)
	go func() {
		defer dwg.Done()
		rng := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch rng.IntN(3) {
			case 0:
				if err := lu.Resize(int64(512 * (1024 + rng.IntN(2048)))); err != nil {
					t.Error(err)
					return
				}
			case 1:
				if err := tg.RemoveLUN(0); err == nil {
					if err := tg.AddLUN(0, lu); err != nil {
						t.Error(err)
						return
					}
				}
			default:
				if err := lu.Resize(1 << 20); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() {
		defer dwg.Done()
		rng := rand.New(rand.NewPCG(5, 5))
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := sessions[rng.IntN(workers)]
			tagMu.Lock()
			tags := inflight[s]
			var tag uint64
			if len(tags) > 0 {
				tag = tags[len(tags)-1]
			}
			tagMu.Unlock()
			fns := []TMF{TMFAbortTask, TMFAbortTask, TMFAbortTask, TMFAbortTaskSet, TMFClearTaskSet, TMFLUNReset,
				TMFITNexusReset, TMFQueryTask, TMFQueryTaskSet, TMFQueryAsyncEvent}
			fn := fns[rng.IntN(len(fns))]
			resp := s.TaskManagement(ctx, fn, EncodeLUN(0), tag)
			valid := false
			switch fn {
			case TMFITNexusReset:
				valid = resp == TMFComplete
			case TMFQueryTask, TMFQueryTaskSet, TMFQueryAsyncEvent:
				valid = resp == TMFComplete || resp == TMFSucceeded || resp == TMFIncorrectLUN
			default:
				valid = resp == TMFComplete || resp == TMFFailed || resp == TMFIncorrectLUN
			}
			if !valid {
				t.Errorf("TMF %v: response %v", fn, resp)
			}
		}
	}()
	wg.Wait()
	close(stop)
	dwg.Wait()
	if ctx.Err() != nil {
		t.Fatal("commands did not finish before the deadline")
	}
	// A session closed with commands running on another nexus.
	for _, s := range sessions {
		s.Close()
	}
	s := tg.NewSession(nexusA)
	defer s.Close()
	r := s.Execute(ctx, &Command{Tag: 1, LUN: EncodeLUN(0), CDB: cdbTUR()})
	checkResultValid(t, cdbTUR(), r)
}
