package main

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
)

// benchJob is what a timed run does.
type benchJob struct {
	rw          string
	bs, bsz, qd int
	rwmix       int
	nslots      uint64
	fua         bool
}

// pick returns the LBA slot and the direction of a worker's next command:
// random or in turn from *seq, reads by --rw and --rwmixread.
func (j *benchJob) pick(rng *rand.Rand, seq *uint64) (slot uint64, read bool) {
	if strings.HasPrefix(j.rw, "rand") {
		slot = rng.Uint64N(j.nslots)
	} else {
		slot = *seq % j.nslots
		*seq++
	}
	read = j.rw == "read" || j.rw == "randread" || ((j.rw == "rw" || j.rw == "randrw") && rng.IntN(100) < j.rwmix)
	return slot, read
}

// benchFailures collects a timed run's failed commands: the first fatal
// error, which ends the run, and each distinct error text logged once (a
// failing target would otherwise log every command).
type benchFailures struct {
	cancel context.CancelFunc
	log    *slog.Logger
	mu     sync.Mutex
	logged map[string]bool
	fatal  error
}

func newBenchFailures(s *conn, cancel context.CancelFunc) *benchFailures {
	return &benchFailures{cancel: cancel, log: s.Options().Logger, logged: map[string]bool{}}
}

// note records a failed command; it reports whether the error is fatal
// (see benchFatal), which ends the run.
func (f *benchFailures) note(ctx context.Context, err error) bool {
	if benchFatal(err) {
		f.mu.Lock()
		if f.fatal == nil {
			f.fatal = err
		}
		f.mu.Unlock()
		f.cancel()
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	f.mu.Lock()
	first := !f.logged[err.Error()]
	f.logged[err.Error()] = true
	f.mu.Unlock()
	if first {
		f.log.Warn("bench I/O failed (further identical errors are only counted)", "err", err)
	}
	return false
}

func (f *benchFailures) fatalErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// benchFatal reports errors after which every further command would fail
// the same way: the LUN is gone (removed, or never there) or the session
// is.
func benchFatal(err error) bool {
	return errors.Is(err, initiator.ErrDevLoss) || errors.Is(err, initiator.ErrClosed) ||
		initiator.IsSense(err, sense.KeyIllegalRequest, 0x25, 0)
}

// asyncRun is the shared state of a timed run driven by Session.Submit.
type asyncRun struct {
	ctx   context.Context
	fails *benchFailures
	s     *conn
	job   benchJob
	start time.Time

	mu   sync.Mutex // guards all, ios and errs
	all  []time.Duration
	ios  int64
	errs int64
	wg   sync.WaitGroup
}

// asyncSlot is one I/O in flight: its command, registered buffers and
// counts. Its next command is submitted from the completion of the last,
// on the channel's completion goroutine; when a command cannot be
// submitted (no slot or credit, the session reconnecting) or failed, the
// slot carries on in a goroutine with Session.Run, which waits as it must,
// and returns to submitting after it.
type asyncSlot struct {
	r             *asyncRun
	rng           *rand.Rand
	seq           uint64
	cmd           initiator.Command
	res           initiator.Result
	cdb           [16]byte
	inBuf, outBuf *initiator.Buffer
	t0            time.Time
	ua            int // UNIT ATTENTION re-issues of the current command
	n, ne         int64
	lat           []time.Duration
	done          func(error)
}

// runBenchAsync runs a timed job with qd commands in flight, each slot
// submitting its next command when the last completes (as fio's
// asynchronous engines reap and submit): no goroutine waits per command.
func runBenchAsync(ctx context.Context, fails *benchFailures, s *conn, job benchJob) (benchResult, error) {
	r := &asyncRun{ctx: ctx, fails: fails, s: s, job: job, start: time.Now()}
	slots := make([]*asyncSlot, job.qd)
	for w := range slots {
		a := &asyncSlot{r: r, rng: rand.New(rand.NewPCG(uint64(w), uint64(r.start.UnixNano())))}
		a.seq = uint64(w) * (job.nslots / uint64(job.qd))
		a.cmd.LUN, a.cmd.CDB = s.lun, a.cdb[:]
		a.lat = make([]time.Duration, 0, 1<<14)
		a.done = a.completed
		var err error
		if a.inBuf, err = s.NewBuffer(job.bs, true); err == nil {
			a.outBuf, err = s.NewBuffer(job.bs, false)
		}
		if err != nil {
			a.release()
			for _, b := range slots[:w] {
				b.release()
			}
			return benchResult{}, err
		}
		out := a.outBuf.Bytes()
		for i := range out {
			out[i] = byte(i*7 + w)
		}
		slots[w] = a
	}
	for _, a := range slots {
		r.wg.Add(1)
		if a.next() != nil {
			go a.runBlocking()
		}
	}
	r.wg.Wait()
	for _, a := range slots {
		a.release()
	}
	return summarize(job.rw, job.bs, job.qd, r.start, r.ios, r.errs, r.all), fails.fatalErr()
}

func (a *asyncSlot) release() {
	if a.inBuf != nil {
		a.inBuf.Release()
	}
	if a.outBuf != nil {
		a.outBuf.Release()
	}
}

// prepare sets up the slot's next command.
func (a *asyncSlot) prepare() {
	j := &a.r.job
	slot, read := j.pick(a.rng, &a.seq)
	if read {
		a.cmd.Buffer = a.inBuf
	} else {
		a.cmd.Buffer = a.outBuf
	}
	a.cmd.Length = j.bs
	initiator.PutRW16(a.cdb[:], !read, slot*uint64(j.bs/j.bsz), uint32(j.bs/j.bsz), j.fua && !read)
	a.ua = 0
	a.t0 = time.Now()
}

// next prepares and submits the slot's next command; an error leaves it
// prepared for runBlocking.
func (a *asyncSlot) next() error {
	a.prepare()
	return a.r.s.Submit(&a.cmd, &a.res, a.done)
}

// completed is the slot's Submit callback.
func (a *asyncSlot) completed(err error) {
	d := time.Since(a.t0)
	if errors.Is(err, initiator.ErrChannelDown) {
		// The channel went down before the response: re-issue the command
		// once the session has a channel again, as Execute does (Run waits
		// for the reconnect, or fails as fast_io_fail or dev_loss say).
		go a.runBlocking()
		return
	}
	if err == nil {
		err = a.res.Err()
		// Re-issue a command that met a UNIT ATTENTION (after a reconnect,
		// a reset), as Session.Run and the SCSI midlayer under fio do.
		var se *initiator.SenseError
		if errors.As(err, &se) && se.Key == sense.KeyUnitAttention && !se.Deferred && a.ua < 3 {
			a.ua++
			if a.r.s.Submit(&a.cmd, &a.res, a.done) != nil {
				go a.runBlocking()
			}
			return
		}
	}
	if !a.record(err, d) {
		a.finish()
		return
	}
	if err != nil {
		// Pause, as after a failed command in a blocking run.
		go func() {
			time.Sleep(time.Millisecond)
			if a.next() != nil {
				a.runBlocking()
			}
		}()
		return
	}
	if a.next() != nil {
		go a.runBlocking()
	}
}

// runBlocking runs the slot's prepared command with Session.Run and the
// following ones until one can be submitted again.
func (a *asyncSlot) runBlocking() {
	for {
		_, err := a.r.s.Run(context.Background(), &a.cmd)
		if !a.record(err, time.Since(a.t0)) {
			a.finish()
			return
		}
		if err != nil {
			time.Sleep(time.Millisecond)
		}
		if a.next() == nil {
			return
		}
	}
}

// record counts a command's outcome; it reports whether the slot goes on.
func (a *asyncSlot) record(err error, d time.Duration) bool {
	r := a.r
	if err == nil {
		a.n++
		a.lat = append(a.lat, d)
		return r.ctx.Err() == nil
	}
	a.ne++
	if r.fails.note(r.ctx, err) {
		return false
	}
	return r.ctx.Err() == nil
}

// finish adds the slot's counts to the run's.
func (a *asyncSlot) finish() {
	r := a.r
	r.mu.Lock()
	r.all = append(r.all, a.lat...)
	r.ios += a.n
	r.errs += a.ne
	r.mu.Unlock()
	r.wg.Done()
}
