package target

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// cacheDev is the loopback device as an rdma.RegionCache and not an
// rdma.LocalRegioner, as the verbs device is. Like the verbs cache it
// keys a registration of buf[:cap(buf)] by where that memory ends, and
// serves later slices ending there at their offset in it. held counts the
// uses not yet released; fail makes every call fail.
type cacheDev struct {
	*trackDev
	raw *loopback.Device

	mu    sync.Mutex
	byEnd map[uintptr]cacheEntry
	held  int
	calls int
	fail  bool
	// maxLen is the longest slice CachedRegion was asked for.
	maxLen int
}

type cacheEntry struct {
	mr    rdma.MemoryRegion
	start uintptr
}

var errNoRegistration = errors.New("test: no registration")

func (d *cacheDev) CachedRegion(buf []byte) (rdma.MemoryRegion, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	d.maxLen = max(d.maxLen, len(buf))
	if d.fail {
		return nil, 0, errNoRegistration
	}
	start := uintptr(unsafe.Pointer(&buf[0]))
	end := start + uintptr(cap(buf))
	if e, ok := d.byEnd[end]; ok && e.start <= start {
		d.held++
		return e.mr, int(start - e.start), nil
	}
	mr, err := d.raw.Register(buf[:cap(buf)], rdma.AccessLocalWrite)
	if err != nil {
		return nil, 0, err
	}
	d.byEnd[end] = cacheEntry{mr, start}
	d.held++
	return mr, 0, nil
}

func (d *cacheDev) ReleaseRegion(rdma.MemoryRegion) {
	d.mu.Lock()
	d.held--
	d.mu.Unlock()
}

func (d *cacheDev) counts() (calls, held int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls, d.held
}

// newCacheEnv is newViewEnv on a device whose memory must be registered:
// the real SCSI core, a 64 MiB RAM logical unit.
func newCacheEnv(t *testing.T, fail bool) (*env, *cacheDev) {
	t.Helper()
	e, cd, _ := newCacheEnvLU(t, fail)
	return e, cd
}

// newCacheEnvLU is newCacheEnv that also returns the logical unit.
func newCacheEnvLU(t *testing.T, fail bool) (*env, *cacheDev, *scsi.LogicalUnit) {
	t.Helper()
	return newCacheEnvCfg(t, fail, nil)
}

// newCacheEnvCfg is newCacheEnvLU with the port's configuration changed by
// mod.
func newCacheEnvCfg(t *testing.T, fail bool, mod func(*Config)) (*env, *cacheDev, *scsi.LogicalUnit) {
	t.Helper()
	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(64 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	var cd *cacheDev
	e := newEnvDev(t, mod, scsiCore{st}, func(td *trackDev, raw *loopback.Device) rdma.Device {
		cd = &cacheDev{trackDev: td, raw: raw, byEnd: map[uintptr]cacheEntry{}, fail: fail}
		return cd
	})
	return e, cd, lu
}

// readsThroughRegions writes a pattern over the first 2 MiB of the
// logical unit (WRITEs of 32 KiB or more: placed into the RAM chunks
// through the cache's regions, or fetched into a buffer and copied there
// when the cache fails), and a 40 KiB WRITE from inside a chunk over it,
// then reads ranges of it back: whole 64 KiB chunks and a
// span of several (views that start at a chunk's beginning), ranges that
// start inside a chunk (the same registration at an offset, or a first
// one that a later read from the chunk's start widens), reads below
// viewRegionMin (copied), and a never-written range (zeros). Every byte
// read must be the pattern's, and once the responses are in, every region
// taken must have been given back.
func readsThroughRegions(t *testing.T, fail bool) {
	e, cd := newCacheEnv(t, fail)
	i := e.login(defaultLogin())
	defer func() { _ = i.conn.Close() }()
	i.tur(2) // power-on unit attention
	const total = 2 << 20
	want := make([]byte, total+(64<<10))
	fill(want[:total], 41)
	tag := uint64(100)
	for off := 0; off < total; off += 512 << 10 {
		b, d := i.buf(0, 512<<10)
		copy(b, want[off:])
		tag++
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x2a, uint32(off/512), 1024), DataOut: direct(d)})
		checkGood(t, i.rspIU(), tag)
	}
	const chunk = backstore.RAMChunkSize
	{
		off := 30*chunk + 3*4096
		fill(want[off:off+40<<10], 99)
		b, d := i.buf(0, 40<<10)
		copy(b, want[off:])
		tag++
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x2a, uint32(off/512), 80), DataOut: direct(d)})
		checkGood(t, i.rspIU(), tag)
	}
	reads := []struct{ off, n int }{
		{0, chunk},                          // one chunk from its start
		{chunk, 1 << 20},                    // 16 chunks
		{5 * 4096, chunk},                   // chunks 0 and 1: an offset in chunk 0's region
		{17*chunk + 3*4096 + 512, 96 << 10}, // from inside chunk 17
		{17 * chunk, chunk},                 // chunk 17 from its start: a wider region
		{20*chunk + 512, chunk},             // across chunks 20 and 21
		{(127 << 10), 2048},                 // below viewInMin: copied
		{(60 << 10), 8 << 10},               // below viewRegionMin: copied
		{(90 << 10), 48 << 10},              // ib_srp's 12 pages: from the backstore
		{total, chunk},                      // never written: zeros
		{29 * chunk, 3 * chunk},             // around the 40 KiB WRITE
	}
	for _, r := range reads {
		b, d := i.buf(1<<20, r.n)
		clear(b)
		for k := range b {
			b[k] = 0xee
		}
		tag++
		i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x28, uint32(r.off/512), uint16(r.n/512)), DataIn: direct(d)})
		checkGood(t, i.rspIU(), tag)
		if !bytes.Equal(b, want[r.off:r.off+r.n]) {
			t.Fatalf("READ of [%d,+%d): data differs from what was written", r.off, r.n)
		}
	}
	calls, held := cd.counts()
	if calls < len(reads)-2 {
		t.Errorf("%d CachedRegion calls for %d reads of viewRegionMin or more", calls, len(reads)-2)
	}
	// The command is freed after its response is posted; give the channel
	// a moment.
	for deadline := time.Now().Add(2 * time.Second); held != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, held = cd.counts()
	}
	if held != 0 {
		t.Errorf("%d cached regions never released", held)
	}
}

// Data-in on a device without local regions goes out of the RAM logical
// unit's memory through the device's region cache, at the offsets it
// gives, and data-out goes into it the same way.
func TestDataInFromCachedRegions(t *testing.T) { readsThroughRegions(t, false) }

// When the cache cannot register (locked-memory limit), the data-in is
// copied into the command's buffer, and the data-out fetched into one and
// copied into the logical unit: the same bytes arrive.
func TestDataInCopiedWhenNoRegion(t *testing.T) { readsThroughRegions(t, true) }

// A WRITE that arrives while a resize (or an UNMAP, or a COMPARE AND
// WRITE) awaits the logical unit's write lock gets its data-out views in
// a buffer the core allocates for it alone, not in the RAM chunks. That
// buffer must not go to the region cache: registered there, it would stay
// pinned and referenced after the command, one registration per such
// WRITE, crowding the chunks out. It is fetched through a buffer of the
// channel instead, and the data still arrives.
func TestDataOutCoreBufferNotCached(t *testing.T) {
	e, cd, lu := newCacheEnvLU(t, false)
	i := e.login(defaultLogin())
	defer func() { _ = i.conn.Close() }()
	i.tur(2)
	// WRITE A's RDMA READ stalls: its placement holds the resize back,
	// and the resize, waiting, sends later WRITEs to buffers.
	if err := cd.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMARead, Delay: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	_, da := i.buf(0, 128<<10)
	i.sendIU(&srp.Cmd{Tag: 10, CDB: cdb10(0x2a, 0, 256), DataOut: direct(da)})
	time.Sleep(100 * time.Millisecond)
	resized := make(chan error, 1)
	go func() { resized <- lu.Resize(64 << 20) }()
	time.Sleep(100 * time.Millisecond)
	b, db := i.buf(256<<10, 128<<10)
	fill(b, 77)
	want := bytes.Clone(b)
	i.sendIU(&srp.Cmd{Tag: 11, CDB: cdb10(0x2a, 4096, 256), DataOut: direct(db)})
	for range 2 {
		r := i.rspIU()
		checkGood(t, r, r.Tag)
	}
	if err := <-resized; err != nil {
		t.Fatal(err)
	}
	cd.mu.Lock()
	maxLen := cd.maxLen
	cd.mu.Unlock()
	if maxLen > backstore.RAMChunkSize {
		t.Errorf("CachedRegion given a %d-byte slice: the core's own data-out buffer went to the region cache", maxLen)
	}
	back, d := i.buf(1<<20, 128<<10)
	clear(back)
	i.sendIU(&srp.Cmd{Tag: 12, CDB: cdb10(0x28, 4096, 256), DataIn: direct(d)})
	checkGood(t, i.rspIU(), 12)
	if !bytes.Equal(back, want) {
		t.Fatal("the WRITE's data did not arrive")
	}
}

// waitHeld waits for every cached region taken to be given back.
func waitHeld(t *testing.T, cd *cacheDev) {
	t.Helper()
	_, held := cd.counts()
	for deadline := time.Now().Add(3 * time.Second); held != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, held = cd.counts()
	}
	if held != 0 {
		t.Errorf("%d cached regions never released", held)
	}
}

// A WRITE placing its data-out through cached regions whose RDMA READs
// stall (some posted, some queued behind ORD) gives its regions back
// however it ends: the channel closed or logged out under it, or the
// task aborted. When the cache fails and the data-out is fetched into a
// buffer instead (bounceOut), the buffer's data memory is given back as
// well.
func TestCachedRegionsReleasedWhenFetchEnds(t *testing.T) {
	for _, fail := range []bool{false, true} {
		for _, how := range []string{"close", "logout", "abort"} {
			t.Run(fmt.Sprintf("%s/fail=%v", how, fail), func(t *testing.T) {
				e, cd := newCacheEnv(t, fail)
				i := e.login(defaultLogin())
				defer func() { _ = i.conn.Close() }()
				i.tur(2)
				if err := cd.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMARead, Delay: 300 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				var ds []srp.DirectBuf
				for k := range 32 {
					_, d := i.buf(k*8192, 4096)
					ds = append(ds, d)
				}
				i.sendIU(&srp.Cmd{Tag: 10, CDB: cdb10(0x2a, 0, 256), DataOut: srp.DataBuf{Format: srp.DescIndirect, Desc: ds, Table: i.tableAt(3<<20, ds), Len: 128 << 10}})
				time.Sleep(100 * time.Millisecond)
				if calls, held := cd.counts(); calls == 0 || held == 0 && !fail {
					t.Fatalf("the WRITE holds no cached region (%d calls, %d held)", calls, held)
				}
				switch how {
				case "close":
					_ = i.conn.Close()
					waitReleased(t, e)
				case "logout":
					removeSessions(e)
					waitReleased(t, e)
				case "abort":
					i.sendIU(&srp.TaskMgmt{Tag: 100, Func: srp.TMFAbortTask, TaskTag: 10})
					if r := i.rspIU(); r.Tag != 100 {
						t.Fatalf("ABORT TASK: response for tag %d", r.Tag)
					}
				}
				waitHeld(t, cd)
				waitDataMemory(t, e, func(n int64) bool { return n == 0 }, "no data memory held once the WRITE ended")
			})
		}
	}
}

// READs whose data-in goes out of cached regions give them back when the
// channel goes away with their RDMA WRITEs stalled, posted or still
// queued behind a full send queue (responses never posted).
func TestCachedRegionsReleasedWhenDataInDropped(t *testing.T) {
	for _, how := range []string{"close", "logout"} {
		t.Run(how, func(t *testing.T) {
			e, cd := newCacheEnv(t, false)
			i := e.login(defaultLogin())
			defer func() { _ = i.conn.Close() }()
			i.tur(2)
			if err := cd.raw.InjectFault(loopback.Fault{Op: rdma.OpRDMAWrite, Delay: 300 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			for k := range 12 {
				_, d := i.buf(0, 1<<20)
				i.sendIU(&srp.Cmd{Tag: uint64(10 + k), CDB: cdb10(0x28, uint32(k*2048), 2048), DataIn: direct(d)})
			}
			time.Sleep(100 * time.Millisecond)
			if calls, held := cd.counts(); calls == 0 || held == 0 {
				t.Fatalf("the READs hold no cached region (%d calls, %d held)", calls, held)
			}
			if how == "close" {
				_ = i.conn.Close()
			} else {
				removeSessions(e)
			}
			waitReleased(t, e)
			waitHeld(t, cd)
		})
	}
}

// A WRITE placed into the backstore over a device whose memory must be
// registered takes a buffer's worth of max_data_memory (its size class)
// before anything moves, so that when the registration then fails the
// bounce buffer is already paid for (takeBuf, no second charge that other
// commands could have made impossible meanwhile). With the budget at
// exactly one buffer of max_data_len, a WRITE of max_data_len goes
// through the buffer, its data lands, and the budget is whole again after.
func TestBounceBufferPaidUpFront(t *testing.T) {
	// 96 KiB of data-out, in a buffer class of 128 KiB: the whole budget.
	e, _, _ := newCacheEnvCfg(t, true, func(c *Config) { c.MaxDataLen, c.MaxDataMemory = 96<<10, 128<<10 })
	i := e.login(defaultLogin())
	defer func() { _ = i.conn.Close() }()
	i.tur(2)
	b, d := i.buf(0, 96<<10)
	fill(b, 7)
	want := append([]byte(nil), b...)
	i.sendIU(&srp.Cmd{Tag: 50, CDB: cdb10(0x2a, 0, 192), DataOut: direct(d)})
	checkGood(t, i.rspIU(), 50)
	waitDataMemory(t, e, func(n int64) bool { return n == 0 }, "no data memory held once the WRITE ended")
	rb, rd := i.buf(1<<20, 96<<10)
	clear(rb)
	i.sendIU(&srp.Cmd{Tag: 51, CDB: cdb10(0x28, 0, 192), DataIn: direct(rd)})
	checkGood(t, i.rspIU(), 51)
	if !bytes.Equal(rb, want) {
		t.Fatal("WRITE through the bounce buffer: data read back differs")
	}
	waitDataMemory(t, e, func(n int64) bool { return n == 0 }, "no data memory held once the READ ended")
}
