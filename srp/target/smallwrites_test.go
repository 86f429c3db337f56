package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestSmallWritesUnderTaskManagement checks that small WRITEs land where,
// and only where, they were sent while aborts and logical unit resets race
// them, over pure-Go iWARP on 127.0.0.1 between srp/initiator and a Port
// with the SCSI core. Each of swWorkers workers
// owns a 64 KiB window of a thin provisioned RAM logical unit that
// straddles one of the RAM backstore's 64 KiB chunk boundaries, and runs
// one command at a time in it: WRITE(16)s of 4 to 28 KiB at random offsets
// from one registered Buffer it refills for every write (a few with a
// timeout short enough that the initiator sends ABORT TASK), READ(16)s of
// the whole window into another, UNMAPs and one-block COMPARE AND WRITEs.
// Every read is checked block by block against the worker's model of its
// window (swWorker.cands).
//
//   - rdma-read: 2 channels without immediate data: every write is fetched
//     by RDMA READ straight into the logical unit's memory.
//   - immediate: the same with immediate data (writes up to 8 KiB travel in
//     the SRP_CMD, larger ones by RDMA READ).
//   - lun-reset: 1 channel without immediate data, LOGICAL UNIT RESETs
//     racing the writes and reads (on one channel Session.LUNReset knows
//     which commands the reset ended; with more it cannot, see its doc).
//     This caught an initiator that ended as aborted a WRITE queued after
//     the reset's TMF: the target ran it after the reset and fetched the
//     bytes the worker had meanwhile put in its Buffer for its next write,
//     so blocks outside that write's range read back its data. With UNMAP
//     and COMPARE AND WRITE it also caught a core that entered a command
//     it does not run inline into the task set on a goroutine of its own
//     (session.Submit): a reset handled meanwhile missed it, and it ran
//     after the reset the initiator had reported it aborted by.
//
// Each subtest runs about 2 s (0.5 s with -short). Its seed is logged;
// SRPT_SMALLWRITES_SEED=n replays the workers' choices (not the
// interleaving).
func TestSmallWritesUnderTaskManagement(t *testing.T) {
	for _, c := range []swCase{
		{name: "rdma-read", channels: 2, noImm: true, others: true},
		{name: "immediate", channels: 2, others: true},
		{name: "lun-reset", channels: 1, noImm: true, resets: true, others: true},
	} {
		t.Run(c.name, func(t *testing.T) { runSmallWrites(t, c) })
	}
}

// swCase is one subtest's configuration.
type swCase struct {
	name     string
	channels int  // RDMA channels
	noImm    bool // no immediate data: every write by RDMA READ
	resets   bool // LOGICAL UNIT RESETs every 20 to 100 ms (one channel only)
	others   bool // UNMAPs and COMPARE AND WRITEs besides the WRITEs and READs
}

// Geometry: worker w's window is swWindowBlocks 512-byte blocks centred on
// the end of the RAM backstore's chunk w.
const (
	swWorkers      = 6
	swChunkBlocks  = backstore.RAMChunkSize / 512
	swWindowBlocks = 128 // 64 KiB
	swMaxWrite     = 56  // blocks
	swOpTimeout    = 10 * time.Second
)

// swWriteBlocks are the write lengths in blocks: 4, 4.5, 8, 12, 16, 20 and
// 28 KiB.
var swWriteBlocks = [...]int{8, 9, 16, 24, 32, 40, 56}

// swRun is one subtest's state.
type swRun struct {
	t        *testing.T
	c        swCase
	ctx      context.Context
	s        *initiator.Session
	start    time.Time
	deadline time.Time        // no new operation starts after it
	failed   atomic.Bool      // a check failed: everyone stops
	versions atomic.Uint64    // the last version handed out
	mu       sync.Mutex       // guards ops, the end and outcome of every swOp, and events
	ops      map[uint64]*swOp // the command that wrote each version
	events   []swEvent        // resets
	stats    swStats
}

// swOp is one command of a worker, kept for failure reports.
type swOp struct {
	worker     int
	name       string // WRITE, READ, UNMAP, COMPARE AND WRITE
	version    uint64 // the version it writes (0: none)
	lba        uint64
	blocks     int
	start, end time.Duration // since the run started
	outcome    string        // "" while in progress
}

// String describes op; with swRun.mu held.
func (op *swOp) String() string {
	v := ""
	if op.version != 0 {
		v = fmt.Sprintf(" v%d", op.version)
	}
	if op.outcome == "" {
		return fmt.Sprintf("worker %d %s%s LBA %d+%d from %v: in progress", op.worker, op.name, v, op.lba, op.blocks, op.start)
	}
	return fmt.Sprintf("worker %d %s%s LBA %d+%d, %v to %v: %s", op.worker, op.name, v, op.lba, op.blocks, op.start, op.end, op.outcome)
}

// swEvent is a reset the resetter did.
type swEvent struct {
	at   time.Duration // since the run started
	what string
}

// swStats counts what a run did, for its log line and sanity checks.
type swStats struct {
	writes, writesFailed, writesUA, writesAborted atomic.Int64
	reads, readsFailed, torn                      atomic.Int64
	unmaps, unmapsFailed                          atomic.Int64
	caws, cawsFailed, cawsUA                      atomic.Int64
	resets                                        atomic.Int64
}

func runSmallWrites(t *testing.T, c swCase) {
	dur := 2 * time.Second
	if testing.Short() {
		dur = 500 * time.Millisecond
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SRPT_SMALLWRITES_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SRPT_SMALLWRITES_SEED: %v", err)
		}
	}
	t.Logf("seed %d", seed)
	ctx, s := iwarpStackWith(t, iwarpOpts{bs: backstore.NewRAM((swWorkers + 1) * backstore.RAMChunkSize), thin: true,
		channels: c.channels, noImm: c.noImm, reconnect: 20 * time.Millisecond, log: testLogger(t)})
	capa, err := s.ReadCapacity16(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !capa.LBPME || !capa.LBPRZ {
		t.Fatalf("READ CAPACITY(16): %+v; the model needs LBPRZ (unmapped blocks read zeros)", capa)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &swRun{t: t, c: c, ctx: ctx, s: s, start: time.Now(), ops: map[uint64]*swOp{}}
	r.deadline = r.start.Add(dur)

	var wg sync.WaitGroup
	for n := range swWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(n, rand.New(rand.NewPCG(seed, uint64(n))))
		}()
	}
	if c.resets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.resetter(rand.New(rand.NewPCG(seed, swWorkers)))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	const grace = 30 * time.Second
	select {
	case <-done:
	case <-time.After(dur + grace):
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		r.failed.Store(true) // the workers report nothing more
		cancel()
		t.Fatalf("hang: the workers are not done %v after the run's end; goroutines:\n%s", grace, buf)
	}
	st := &r.stats
	t.Logf("writes %d GOOD, %d failed (%d aborted), %d UNIT ATTENTION; reads %d checked, %d failed, %d torn blocks; "+
		"UNMAPs %d (%d failed); COMPARE AND WRITEs %d GOOD (%d failed, %d UNIT ATTENTION); resets %d",
		st.writes.Load(), st.writesFailed.Load(), st.writesAborted.Load(), st.writesUA.Load(),
		st.reads.Load(), st.readsFailed.Load(), st.torn.Load(), st.unmaps.Load(), st.unmapsFailed.Load(),
		st.caws.Load(), st.cawsFailed.Load(), st.cawsUA.Load(), st.resets.Load())
	if r.failed.Load() {
		return
	}
	if st.writes.Load() == 0 || c.others && st.caws.Load() == 0 {
		t.Error("no WRITE or no COMPARE AND WRITE completed GOOD")
	}
	if c.resets && st.resets.Load() == 0 {
		t.Error("no LOGICAL UNIT RESET completed")
	}
}

// since is the time since the run started, to the microsecond.
func (r *swRun) since() time.Duration { return time.Since(r.start).Round(time.Microsecond) }

// resetter resets the logical unit every 20 to 100 ms.
func (r *swRun) resetter(rng *rand.Rand) {
	for time.Now().Before(r.deadline) && !r.failed.Load() {
		select {
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		case <-r.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, swOpTimeout)
		start := r.since()
		err := r.s.LUNReset(ctx, 0)
		cancel()
		if err == nil {
			r.stats.resets.Add(1)
		}
		r.event(start, fmt.Sprintf("LOGICAL UNIT RESET until %v: %s", r.since(), outcome(err)))
	}
}

// outcome is err's text, or GOOD.
func outcome(err error) string {
	if err != nil {
		return err.Error()
	}
	return "GOOD"
}

func (r *swRun) event(at time.Duration, what string) {
	r.mu.Lock()
	r.events = append(r.events, swEvent{at: at, what: what})
	r.mu.Unlock()
}

// describe names version v and the command that wrote it.
func (r *swRun) describe(v uint64) string {
	if v == 0 {
		return "v0 (zeros)"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if op := r.ops[v]; op != nil {
		return fmt.Sprintf("v%d (%v)", v, op)
	}
	return fmt.Sprintf("v%d (never written)", v)
}

// swWorker is one worker: its window, its model and its buffers.
type swWorker struct {
	r    *swRun
	n    int
	rng  *rand.Rand
	base uint64 // the window's first LBA
	// cands is the model: cands[i] lists the versions block i of the window
	// may hold (version 0: zeros, never written or unmapped). A command
	// that completed GOOD leaves exactly its version; one that got UNIT
	// ATTENTION did not run and changes nothing; one that failed
	// otherwise (aborted, reset, channel lost) may have run, in part, so
	// its version joins the candidates and the block may hold any bytewise
	// mix of them (an RDMA READ cut short). A read that finds a block whole
	// at one candidate narrows it to that one: once a command has ended,
	// nothing of it may reach the logical unit any more.
	cands [][]uint64
	wbuf  *initiator.Buffer // data-out of every WRITE
	rbuf  *initiator.Buffer // data-in of every READ
	cdb   [16]byte
	blks  [][]byte // scratch: candidate blocks
	hist  []*swOp  // the last swHistory commands
}

// swHistory is how many of its last commands a worker reports on a
// failure.
const swHistory = 32

func (r *swRun) worker(n int, rng *rand.Rand) {
	w := &swWorker{r: r, n: n, rng: rng, base: uint64((n+1)*swChunkBlocks - swWindowBlocks/2),
		cands: make([][]uint64, swWindowBlocks)}
	for i := range w.cands {
		w.cands[i] = []uint64{0}
	}
	var err error
	if w.wbuf, err = r.s.NewBuffer(swMaxWrite*512, false); err == nil {
		w.rbuf, err = r.s.NewBuffer(swWindowBlocks*512, true)
	}
	if err != nil {
		r.t.Error(err)
		r.failed.Store(true)
		return
	}
	for time.Now().Before(r.deadline) && !r.failed.Load() {
		switch op := rng.IntN(100); {
		case op < 70:
			w.write()
		case op < 80 || !r.c.others:
			w.check("read")
		case op < 85:
			w.unmap()
		default:
			w.compareAndWrite()
		}
	}
	// The last check, after the resets: retry until a read completes.
	for try := 0; !r.failed.Load() && !w.check("final read"); try++ {
		if try == 100 || r.ctx.Err() != nil {
			r.t.Errorf("worker %d: no final read completed", n)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// begin records the start of a command (and the version it writes).
func (w *swWorker) begin(name string, version, lba uint64, blocks int) *swOp {
	op := &swOp{worker: w.n, name: name, version: version, lba: lba, blocks: blocks, start: w.r.since()}
	if version != 0 {
		w.r.mu.Lock()
		w.r.ops[version] = op
		w.r.mu.Unlock()
	}
	if len(w.hist) == swHistory {
		copy(w.hist, w.hist[1:])
		w.hist = w.hist[:swHistory-1]
	}
	w.hist = append(w.hist, op)
	return op
}

// end records how a command ended.
func (w *swWorker) end(op *swOp, err error) {
	end := w.r.since()
	w.r.mu.Lock()
	op.end, op.outcome = end, outcome(err)
	w.r.mu.Unlock()
}

// fail reports the run's first failure, with the worker's last commands
// that touched lba and the resets since the oldest of them.
func (w *swWorker) fail(lba uint64, format string, args ...any) {
	r := w.r
	if !r.failed.CompareAndSwap(false, true) {
		return
	}
	r.t.Errorf("worker %d: "+format, append([]any{w.n}, args...)...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("worker %d's last commands that touched LBA %d:", w.n, lba)
	for _, op := range w.hist {
		if op.lba <= lba && lba < op.lba+uint64(op.blocks) {
			r.t.Logf("  %v", op)
		}
	}
	for _, e := range r.events {
		if e.at >= w.hist[0].start {
			r.t.Logf("%v: %s", e.at, e.what)
		}
	}
}

// write writes a new version to a random range of 4 to 28 KiB. It goes
// with NoRetry: a write re-issued after a channel loss may have run on the
// lost channel before it gets a UNIT ATTENTION on the new one.
func (w *swWorker) write() {
	r := w.r
	n := swWriteBlocks[w.rng.IntN(len(swWriteBlocks))]
	off := w.rng.IntN(swWindowBlocks - n + 1)
	lba := w.base + uint64(off)
	v := r.versions.Add(1)
	b := w.wbuf.Bytes()
	for k := range n {
		putBlock(b[k*512:(k+1)*512], v, lba+uint64(k))
	}
	timeout := swOpTimeout
	if w.rng.IntN(20) == 0 {
		timeout = time.Duration(w.rng.IntN(300)) * time.Microsecond
	}
	initiator.PutRW16(w.cdb[:], true, lba, uint32(n), false)
	op := w.begin("WRITE", v, lba, n)
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	res, err := r.s.Execute(ctx, &initiator.Command{CDB: w.cdb[:], Buffer: w.wbuf, Length: n * 512, NoRetry: true})
	cancel()
	if err == nil {
		err = res.Err()
	}
	w.end(op, err)
	switch {
	case err == nil:
		r.stats.writes.Add(1)
		for k := range n {
			w.cands[off+k] = append(w.cands[off+k][:0], v)
		}
	case isUnitAttention(err):
		r.stats.writesUA.Add(1)
	default:
		r.stats.writesFailed.Add(1)
		if errors.Is(err, initiator.ErrAborted) {
			r.stats.writesAborted.Add(1)
		}
		for k := range n {
			w.cands[off+k] = append(w.cands[off+k], v)
		}
	}
}

func isUnitAttention(err error) bool {
	var se *initiator.SenseError
	return errors.As(err, &se) && se.Key == sense.KeyUnitAttention && !se.Deferred
}

// unmap deallocates 1 to 40 blocks (Session.Unmap re-issues after a
// channel loss or a UNIT ATTENTION, so any failure may have run).
func (w *swWorker) unmap() {
	r := w.r
	n := 1 + w.rng.IntN(40)
	off := w.rng.IntN(swWindowBlocks - n + 1)
	op := w.begin("UNMAP", 0, w.base+uint64(off), n)
	ctx, cancel := context.WithTimeout(r.ctx, swOpTimeout)
	err := r.s.Unmap(ctx, 0, []initiator.Extent{{LBA: w.base + uint64(off), Blocks: uint32(n)}})
	cancel()
	w.end(op, err)
	r.stats.unmaps.Add(1)
	if err != nil {
		r.stats.unmapsFailed.Add(1)
	}
	for k := range n {
		if err == nil {
			w.cands[off+k] = append(w.cands[off+k][:0], 0)
		} else {
			w.cands[off+k] = append(w.cands[off+k], 0)
		}
	}
}

// compareAndWrite replaces a block whose version the model knows by a new
// one with COMPARE AND WRITE, which must not miscompare. Session's
// CompareAndWrite is never re-issued after a channel loss, and re-issued
// after a UNIT ATTENTION only (the attempt did not run).
func (w *swWorker) compareAndWrite() {
	r := w.r
	off := w.rng.IntN(swWindowBlocks)
	if len(w.cands[off]) != 1 && (!w.check("read before COMPARE AND WRITE") || len(w.cands[off]) != 1) {
		return
	}
	lba := w.base + uint64(off)
	old := w.cands[off][0]
	v := r.versions.Add(1)
	verify, write := make([]byte, 512), make([]byte, 512)
	putBlock(verify, old, lba)
	putBlock(write, v, lba)
	op := w.begin("COMPARE AND WRITE", v, lba, 1)
	ctx, cancel := context.WithTimeout(r.ctx, swOpTimeout)
	err := r.s.CompareAndWrite(ctx, 0, lba, 1, verify, write)
	cancel()
	w.end(op, err)
	var se *initiator.SenseError
	switch {
	case err == nil:
		r.stats.caws.Add(1)
		w.cands[off] = append(w.cands[off][:0], v)
	case isUnitAttention(err):
		r.stats.cawsUA.Add(1)
	case errors.As(err, &se) && se.Key == sense.KeyMiscompare:
		got := make([]byte, 512)
		ctx, cancel := context.WithTimeout(r.ctx, swOpTimeout)
		rerr := r.s.Read16(ctx, 0, lba, got, 512, false)
		cancel()
		w.fail(lba, "COMPARE AND WRITE of v%d at LBA %d miscompared (%v), though the block certainly holds %s; it reads %s (%s)",
			v, lba, err, r.describe(old), r.describeBlock(got, lba), outcome(rerr))
	default:
		r.stats.cawsFailed.Add(1)
		w.cands[off] = append(w.cands[off], v)
	}
}

// check reads the window and compares it with the model. It returns
// false when the read did not complete GOOD (the model is unchanged).
func (w *swWorker) check(what string) bool {
	r := w.r
	initiator.PutRW16(w.cdb[:], false, w.base, swWindowBlocks, false)
	op := w.begin("READ", 0, w.base, swWindowBlocks)
	ctx, cancel := context.WithTimeout(r.ctx, swOpTimeout)
	res, err := r.s.Execute(ctx, &initiator.Command{CDB: w.cdb[:], Buffer: w.rbuf, Length: swWindowBlocks * 512})
	cancel()
	if err == nil {
		err = res.Err()
	}
	w.end(op, err)
	if err != nil {
		r.stats.readsFailed.Add(1)
		return false
	}
	r.stats.reads.Add(1)
	got := w.rbuf.Bytes()
	for i, cands := range w.cands {
		b, lba := got[i*512:(i+1)*512], w.base+uint64(i)
		switch k := w.match(b, lba, cands); {
		case k >= 0:
			w.cands[i] = append(cands[:0], cands[k])
		case k == swTorn:
			r.stats.torn.Add(1)
		default:
			var cs []string
			for _, v := range cands {
				cs = append(cs, r.describe(v))
			}
			w.fail(lba, "%s at %v: LBA %d (window block %d) holds %s; the model allows %s",
				what, op.start, lba, i, r.describeBlock(b, lba), strings.Join(cs, " or "))
			return true
		}
	}
	return true
}

// match's answers besides a candidate's index.
const (
	swTorn    = -1 // every byte is that byte of some candidate
	swNoMatch = -2
)

// match returns the index of the candidate version block b (at lba)
// holds, swTorn, or swNoMatch.
func (w *swWorker) match(b []byte, lba uint64, cands []uint64) int {
	for len(w.blks) < len(cands) {
		w.blks = append(w.blks, make([]byte, 512))
	}
	for k, v := range cands {
		putBlock(w.blks[k], v, lba)
		if bytes.Equal(b, w.blks[k]) {
			return k
		}
	}
	if len(cands) < 2 {
		return swNoMatch
	}
next:
	for j := range b {
		for k := range cands {
			if b[j] == w.blks[k][j] {
				continue next
			}
		}
		return swNoMatch
	}
	return swTorn
}

// Block contents. Version v >= 1 of the block at lba is 32 units of 16
// bytes; unit k carries a = v and b = lba<<5 | k through two Feistel
// rounds, w1 = b ^ mix(a) and w0 = a ^ mix(w1), so every byte depends on v,
// lba and k and each unit decodes back to them. Version 0 is zeros.
const swUnit = 16

func putBlock(b []byte, v, lba uint64) {
	if v == 0 {
		clear(b[:512])
		return
	}
	for k := range 512 / swUnit {
		w1 := (lba<<5 | uint64(k)) ^ mix64(v)
		binary.LittleEndian.PutUint64(b[k*swUnit:], v^mix64(w1))
		binary.LittleEndian.PutUint64(b[k*swUnit+8:], w1)
	}
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// swUnitContent is what one unit of a block read holds.
type swUnitContent struct {
	v     uint64 // version; 0 with known: zeros
	lba   uint64 // the block it was written for
	shift int    // units from where it was written
	known bool   // false: no version's
}

// decodeUnit decodes unit k of a block; last is the last version handed
// out.
func decodeUnit(b []byte, k int, last uint64) swUnitContent {
	u := b[k*swUnit : (k+1)*swUnit]
	w0, w1 := binary.LittleEndian.Uint64(u), binary.LittleEndian.Uint64(u[8:])
	if w0 == 0 && w1 == 0 {
		return swUnitContent{known: true}
	}
	v := w0 ^ mix64(w1)
	if v == 0 || v > last {
		return swUnitContent{}
	}
	x := w1 ^ mix64(v)
	return swUnitContent{v: v, lba: x >> 5, shift: k - int(x&31), known: true}
}

// describeBlock says what block b, read at lba, holds: one version, or
// byte ranges of whatever each holds.
func (r *swRun) describeBlock(b []byte, lba uint64) string {
	last := r.versions.Load()
	type part struct {
		from, to int // bytes
		c        swUnitContent
	}
	var parts []part
	for k := range 512 / swUnit {
		c := decodeUnit(b, k, last)
		if n := len(parts); n > 0 && parts[n-1].c == c {
			parts[n-1].to = (k + 1) * swUnit
			continue
		}
		parts = append(parts, part{k * swUnit, (k + 1) * swUnit, c})
	}
	var out []string
	for _, p := range parts {
		var s string
		switch c := p.c; {
		case !c.known:
			s = "no version's bytes"
		case c.v == 0:
			s = "zeros"
		default:
			s = r.describe(c.v)
			if c.lba != lba {
				s += fmt.Sprintf(" written for LBA %d", c.lba)
			}
			if c.shift != 0 {
				s += fmt.Sprintf(" at its bytes %d-%d", p.from-c.shift*swUnit, p.to-1-c.shift*swUnit)
			}
		}
		if len(parts) == 1 {
			return s
		}
		out = append(out, fmt.Sprintf("bytes %d-%d: %s", p.from, p.to-1, s))
	}
	return "[" + strings.Join(out, "; ") + "]"
}
