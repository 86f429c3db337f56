package reliability

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/internal/faultproxy"
	"github.com/gosrp/gosrp/srp/initiator"
)

// Verified slots: each worker owns slots of slotBlocks blocks and writes
// them again and again; every block carries its LBA and the generation
// that wrote it.
const (
	netWorkers   = 4
	slotBlocks   = 8
	slotsPerWork = 64
)

// netScenario is one network fault: apply starts it, clear ends it.
type netScenario struct {
	name  string
	hold  time.Duration // how long the fault lasts
	apply func(p *faultproxy.Proxy)
}

// TestNetFaults (campaign 3): verified writes go through a fault-injecting
// TCP proxy between initiator and target while, one after the other, the
// link is delayed (50 ms ± 20 ms), the initiator's direction stalls (zero
// window), every connection is reset mid-I/O, and the link goes down. Every
// write ends acknowledged or with an error; once the fault is over I/O
// resumes; every block then holds the generation of its last acknowledged
// write or of a later attempted one — never an older one (a lost
// acknowledged write) and never garbage; and the target frees every
// channel but the live one. The short run (test suite) holds each fault 2
// s; RELIABILITY_LONG=1 (scripts/campaign/netfault.sh) holds the delay 30
// s, the stall 60 s and the link down 5, 30 and 120 s.
func TestNetFaults(t *testing.T) {
	long := envInt(t, "RELIABILITY_LONG", 0) > 0
	hold := func(short, full time.Duration) time.Duration {
		if long {
			return full
		}
		return short
	}
	scenarios := []netScenario{
		{"delay 50ms±20ms", hold(2*time.Second, 30*time.Second), func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Faults{Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond})
		}},
		{"initiator stops reading", hold(2*time.Second, 60*time.Second), func(p *faultproxy.Proxy) { p.Set(faultproxy.Faults{StallToClient: true}) }},
		{"TCP reset mid-I/O", 0, func(p *faultproxy.Proxy) { p.Reset() }},
		{"link down", hold(2*time.Second, 5*time.Second), func(p *faultproxy.Proxy) { p.Set(faultproxy.Faults{Down: true}) }},
	}
	if long {
		scenarios = append(scenarios,
			netScenario{"link down", 30 * time.Second, func(p *faultproxy.Proxy) { p.Set(faultproxy.Faults{Down: true}) }},
			netScenario{"link down", 120 * time.Second, func(p *faultproxy.Proxy) { p.Set(faultproxy.Faults{Down: true}) }})
	}
	runs := envInt(t, "RELIABILITY_RUNS", 1)
	for _, sc := range scenarios {
		t.Run(fmt.Sprintf("%s %v", sc.name, sc.hold), func(t *testing.T) {
			for run := 0; run < runs; run++ {
				netFault(t, sc)
			}
		})
	}
}

// slot is one verified slot's history.
type slot struct {
	acked     uint64 // generation of the last acknowledged write
	attempted uint64 // highest generation sent
}

func fillSlot(b []byte, lba, gen uint64) {
	for k := 0; k < len(b)/blockSize; k++ {
		blk := b[k*blockSize : (k+1)*blockSize]
		binary.BigEndian.PutUint64(blk, lba+uint64(k))
		binary.BigEndian.PutUint64(blk[8:], gen)
		rng := rand.NewPCG(lba+uint64(k), gen)
		for i := 16; i < len(blk); i += 8 {
			binary.BigEndian.PutUint64(blk[i:], rng.Uint64())
		}
	}
}

func netFault(t *testing.T, sc netScenario) {
	tg := startTarget(t, backstore.NewRAM(netWorkers*slotsPerWork*slotBlocks*blockSize))
	p, err := faultproxy.Listen("127.0.0.1:0", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// ib_srp's timeouts, scaled for a test: commands time out after 5 s,
	// I/O fails 10 s after a channel loss, the session gives up after 10 min.
	s := dial(t, ctx, p.Addr(), initiator.Options{CommandTimeout: 5 * time.Second, TMFTimeout: 2 * time.Second,
		ReconnectDelay: 500 * time.Millisecond, FastIOFailTmo: 10 * time.Second, DevLossTmo: 10 * time.Minute})
	lun := initiator.LUN(0)
	_ = s.TestUnitReady(ctx, lun)

	slots := make([][]slot, netWorkers)
	var mu sync.Mutex
	var errs []error
	var writes, lastOK int64
	var lastOKAt time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range netWorkers {
		slots[w] = make([]slot, slotsPerWork)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, slotBlocks*blockSize)
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(slotsPerWork)
				sl := &slots[w][k]
				lba := uint64((w*slotsPerWork + k) * slotBlocks)
				gen := sl.attempted + 1
				sl.attempted = gen
				fillSlot(buf, lba, gen)
				err := s.Write16(ctx, lun, lba, buf, blockSize, false)
				mu.Lock()
				if err == nil {
					sl.acked = gen
					writes++
					lastOK++
					lastOKAt = time.Now()
				} else {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	// Steady state, the fault, then until writes succeed again.
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	before := writes
	mu.Unlock()
	if before == 0 {
		t.Fatal("no write acknowledged before the fault")
	}
	sc.apply(p)
	time.Sleep(sc.hold)
	p.Set(faultproxy.Faults{})
	cleared := time.Now()
	mu.Lock()
	lastOK = 0
	mu.Unlock()
	var recovered time.Duration
	for {
		mu.Lock()
		ok, at := lastOK, lastOKAt
		mu.Unlock()
		if ok >= 4 && at.After(cleared) {
			recovered = max(at.Sub(cleared), 0)
			break
		}
		if time.Since(cleared) > 3*time.Minute {
			t.Fatalf("%s: no write acknowledged within 3 min after the fault ended", sc.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	// Read every slot back.
	verified, lost := 0, 0
	buf := make([]byte, slotBlocks*blockSize)
	want := make([]byte, slotBlocks*blockSize)
	for w := range netWorkers {
		for k, sl := range slots[w] {
			lba := uint64((w*slotsPerWork + k) * slotBlocks)
			if err := s.Read16(ctx, lun, lba, buf, blockSize, false); err != nil {
				t.Fatalf("read back LBA %d: %v", lba, err)
			}
			gen := binary.BigEndian.Uint64(buf[8:])
			if sl.attempted == 0 {
				continue
			}
			fillSlot(want, lba, gen)
			switch {
			case gen < sl.acked || gen > sl.attempted:
				lost++
				t.Errorf("%s: LBA %d holds generation %d; last acknowledged %d, last attempted %d", sc.name, lba, gen, sl.acked, sl.attempted)
			case string(buf) != string(want):
				lost++
				t.Errorf("%s: LBA %d: generation %d with wrong contents (torn or corrupt)", sc.name, lba, gen)
			default:
				verified += len(buf)
			}
		}
	}
	kinds := map[string]int{}
	for _, err := range errs {
		kinds[shortErr(err)]++
	}
	t.Logf("%s for %v: %d writes acknowledged, %d failed %v, %d bytes verified, %d slots wrong, recovered %v after the fault ended; proxy %+v",
		sc.name, sc.hold, writes, len(errs), kinds, verified, lost, recovered.Round(time.Millisecond), p.Stats())
	s.Close()
	tg.waitIdle(t, 0)
}

// shortErr names an error's kind for the summary.
func shortErr(err error) string {
	for _, e := range []error{initiator.ErrAborted, initiator.ErrFastIOFail, initiator.ErrChannelDown, initiator.ErrDevLoss} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}
