package reliability

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

// resources is what a process holds: goroutines, open file descriptors,
// resident memory.
type resources struct {
	goroutines, fds int
	rss             int64 // bytes
}

func measure(t *testing.T) resources {
	t.Helper()
	debug.FreeOSMemory() // a GC, and the freed heap back to the system: RSS means what is in use
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return resources{goroutines: runtime.NumGoroutine(), fds: len(fds), rss: pages * int64(os.Getpagesize())}
}

// rssSlack is how far above its baseline RSS may stay: the Go runtime
// keeps some of the heap it grew to, and the race detector's shadow memory
// does not shrink.
const rssSlack = 64 << 20

// backToBaseline waits up to 20 s for goroutines and descriptors to return
// to base (a few goroutines of slack for the runtime and the test) and RSS
// to within rssSlack of it plus data, the bytes the backstores filled since
// (without the race detector), and fails the test otherwise.
func backToBaseline(t *testing.T, what string, base resources, data int64) resources {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := measure(t)
		if now.goroutines <= base.goroutines+2 && now.fds <= base.fds && (raceEnabled || now.rss <= base.rss+data+rssSlack) {
			t.Logf("%s: goroutines %d → %d, fds %d → %d, RSS %d → %d MiB", what, base.goroutines, now.goroutines, base.fds, now.fds, base.rss>>20, now.rss>>20)
			return now
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%s: goroutines %d (baseline %d), fds %d (baseline %d), RSS %d MiB (baseline %d) after 20 s\n%s",
				what, now.goroutines, base.goroutines, now.fds, base.fds, now.rss>>20, base.rss>>20, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLoginCycles (campaign 4): login, one WRITE and READ, logout, again
// and again; then many channels at once. Goroutines and file descriptors
// of initiator and target together return to their baseline, and the
// target holds no channel. Short run: 50 cycles and 32 channels;
// RELIABILITY_LOGINS and RELIABILITY_CHANNELS set the documented 1000 and
// 256.
func TestLoginCycles(t *testing.T) {
	cycles := envInt(t, "RELIABILITY_LOGINS", 50)
	chans := envInt(t, "RELIABILITY_CHANNELS", 32)
	tg := startTargetCfg(t, func(c *target.Config) { c.MaxTotalChannels = max(chans, 64) }, backstore.NewRAM(16<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dev := iwarp.NewDevice(iwarp.Config{Logger: testLogger()})
	defer dev.Close()
	o := initiator.Options{IDExt: guid, IOCGUID: guid, Dest: tg.addr, ChCount: 1, ReconnectDelay: -1, Logger: testLogger()}
	w := bytes.Repeat([]byte("login cycle "), 4096/12+1)[:4096]
	r := make([]byte, 4096)
	base := measure(t)
	start := time.Now()
	for i := range cycles {
		o.InitiatorGUID = uint64(0x100 + i%7) // a few I_T nexuses, each logged in again and again
		s, err := initiator.Dial(ctx, dev, o)
		if err != nil {
			t.Fatalf("cycle %d: login: %v", i, err)
		}
		_ = s.TestUnitReady(ctx, 0)
		if err := s.Write16(ctx, 0, uint64(i%64*8), w, blockSize, false); err != nil {
			t.Fatalf("cycle %d: WRITE(16): %v", i, err)
		}
		if err := s.Read16(ctx, 0, uint64(i%64*8), r, blockSize, false); err != nil || !bytes.Equal(r, w) {
			t.Fatalf("cycle %d: READ(16): %v", i, err)
		}
		s.Close()
	}
	tg.waitIdle(t, 0)
	t.Logf("%d login/logout cycles in %v", cycles, time.Since(start).Round(time.Millisecond))
	base = backToBaseline(t, "after the login cycles", base, 0)

	sessions := make([]*initiator.Session, chans)
	var wg sync.WaitGroup
	errs := make([]error, chans)
	for i := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := o
			o.InitiatorGUID = uint64(0x10000 + i)
			s, err := initiator.Dial(ctx, dev, o)
			if err != nil {
				errs[i] = err
				return
			}
			sessions[i] = s
			_ = s.TestUnitReady(ctx, 0)
			errs[i] = s.Write16(ctx, 0, uint64(i*8), w, blockSize, false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("channel %d of %d: %v", i, chans, err)
		}
	}
	if n := len(tg.port.Sessions()); n != chans {
		t.Fatalf("%d channels open at once, the target lists %d", chans, n)
	}
	peak := measure(t)
	for _, s := range sessions {
		s.Close()
	}
	tg.waitIdle(t, 0)
	t.Logf("%d channels at once: goroutines %d, fds %d, RSS %d MiB at the peak", chans, peak.goroutines, peak.fds, peak.rss>>20)
	backToBaseline(t, "after the simultaneous channels", base, 0)
}

// TestDataMemoryBudget (campaign 4): 8 initiators with RELIABILITY_QD
// (default 16; the documented run 128) READs of 1 MiB in flight each ask
// for 4 (QD 16) to 16 (QD 128) times the port's data buffer budget
// (MaxDataMemory); the budget
// holds at every sample, the excess gets TASK SET FULL, and every READ
// that succeeds returns the right data.
func TestDataMemoryBudget(t *testing.T) {
	const inis, size = 8, 1 << 20
	qd := envInt(t, "RELIABILITY_QD", 16)
	budget := max(inis*qd*size/16, 32<<20) // at least two buffers of the default max_data_len
	d := envDuration(t, "RELIABILITY_BUDGET_TIME", 5*time.Second)
	ram := backstore.NewRAM(64 << 20)
	pat := make([]byte, 64<<20)
	for i := 0; i < len(pat); i += 8 {
		binary.BigEndian.PutUint64(pat[i:], uint64(i))
	}
	if _, err := ram.WriteAt(pat, 0); err != nil {
		t.Fatal(err)
	}
	tg := startTargetCfg(t, func(c *target.Config) { c.MaxDataMemory = budget }, ram)
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if m := tg.port.DataMemory(); m > peak.Load() {
				peak.Store(m)
			}
		}
	}()
	var good, full, other atomic.Int64
	deadline := time.Now().Add(d)
	for i := range inis {
		s := dial(t, ctx, tg.addr, initiator.Options{InitiatorGUID: uint64(0x2000 + i), QueueSize: qd + 2, MaxSect: size / 512})
		_ = s.TestUnitReady(ctx, 0)
		for q := range qd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, size)
				rng := rand.New(rand.NewPCG(uint64(i), uint64(q)))
				for time.Now().Before(deadline) {
					lba := uint64(rng.IntN(64)) * size / blockSize
					err := s.Read16(ctx, 0, lba, buf, blockSize, false)
					var se *initiator.StatusError
					switch {
					case err == nil:
						if !bytes.Equal(buf, pat[lba*blockSize:lba*blockSize+size]) {
							t.Errorf("READ(16) at LBA %d: wrong data", lba)
							return
						}
						good.Add(1)
					case errors.As(err, &se) && se.Status == sense.StatusTaskSetFull:
						full.Add(1)
						time.Sleep(time.Millisecond)
					default:
						other.Add(1)
						t.Errorf("READ(16): %v", err)
						return
					}
				}
			}()
		}
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	t.Logf("%d initiators x QD %d x 1 MiB READs for %v: %d good (%d MiB), %d TASK SET FULL, %d other errors; data memory peak %.1f of the %d MiB budget",
		inis, qd, d, good.Load(), good.Load(), full.Load(), other.Load(), float64(peak.Load())/(1<<20), budget>>20)
	if peak.Load() > int64(budget) {
		t.Fatalf("data memory peaked at %d bytes, over the %d-byte budget", peak.Load(), budget)
	}
	if good.Load() == 0 {
		t.Fatal("no READ succeeded")
	}
}

// TestMixedSoak (campaign 4): 8 initiators run random WRITEs and READs of 4
// KiB to 256 KiB on verified slots (each block carries its LBA and
// generation) for RELIABILITY_SOAK (default 10 s; the documented run 30
// min); every READ and a final read of every slot must match the last
// acknowledged generation, and the target ends with no channel.
func TestMixedSoak(t *testing.T) {
	d := envDuration(t, "RELIABILITY_SOAK", 10*time.Second)
	const inis, slotsPer, maxBlocks = 8, 32, 512
	ram := backstore.NewRAM(inis * slotsPer * maxBlocks * blockSize)
	tg := startTarget(t, ram)
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	base := measure(t)
	var ops, bytesDone atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := range inis {
		s := dial(t, ctx, tg.addr, initiator.Options{InitiatorGUID: uint64(0x3000 + i), ChCount: 2})
		_ = s.TestUnitReady(ctx, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			gens := make([]uint64, slotsPer)
			lens := make([]int, slotsPer)
			rng := rand.New(rand.NewPCG(uint64(i), 30))
			buf := make([]byte, maxBlocks*blockSize)
			want := make([]byte, maxBlocks*blockSize)
			for time.Now().Before(deadline) {
				k := rng.IntN(slotsPer)
				lba := uint64((i*slotsPer + k) * maxBlocks)
				if gens[k] == 0 || rng.IntN(2) == 0 {
					n := (1 + rng.IntN(maxBlocks/8)) * 8
					gens[k]++
					fillSlot(buf[:n*blockSize], lba, gens[k])
					if err := s.Write16(ctx, 0, lba, buf[:n*blockSize], blockSize, rng.IntN(8) == 0); err != nil {
						t.Errorf("initiator %d: WRITE(16) at LBA %d: %v", i, lba, err)
						return
					}
					lens[k] = n
					bytesDone.Add(int64(n * blockSize))
				} else {
					n := lens[k]
					if err := s.Read16(ctx, 0, lba, buf[:n*blockSize], blockSize, false); err != nil {
						t.Errorf("initiator %d: READ(16) at LBA %d: %v", i, lba, err)
						return
					}
					fillSlot(want[:n*blockSize], lba, gens[k])
					if !bytes.Equal(buf[:n*blockSize], want[:n*blockSize]) {
						t.Errorf("initiator %d: LBA %d does not hold generation %d", i, lba, gens[k])
						return
					}
					bytesDone.Add(int64(n * blockSize))
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	tg.waitIdle(t, 0)
	t.Logf("mixed soak %v: 8 initiators, %d verified commands, %d MiB moved; the RAM LUN holds %d MiB", d, ops.Load(), bytesDone.Load()>>20, ram.AllocatedBytes()>>20)
	backToBaseline(t, "after the soak", base, ram.AllocatedBytes())
}
