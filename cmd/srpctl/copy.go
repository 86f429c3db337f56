package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// copyFlags are the dd-like flags of read and write.
type copyFlags struct {
	targetFlags
	file   string
	lba    uint64
	count  int64  // blocks; -1 = to the end of the LUN / file
	bs     string // bytes per command
	qd     int
	fua    bool
	quiet  bool
	noSync bool
}

func addCopyFlags(c *cobra.Command, cf *copyFlags, fileFlag, fileHelp string) {
	addTargetFlags(c, &cf.targetFlags, true)
	f := c.Flags()
	f.StringVar(&cf.file, fileFlag, "", fileHelp)
	f.Uint64Var(&cf.lba, "lba", 0, "first logical block")
	f.Int64Var(&cf.count, "count", -1, "number of logical blocks (default: all)")
	f.StringVar(&cf.bs, "bs", "1m", "bytes per command, rounded down to whole blocks, at most max_sect*512: "+adminapi.SizeSyntax)
	f.IntVar(&cf.qd, "qd", 8, "commands in flight")
	f.BoolVar(&cf.quiet, "quiet", false, "no progress bar")
	c.MarkFlagRequired(fileFlag)
}

// bar returns the progress bar of a copy of total bytes. It draws on
// stderr only when stderr is a terminal: redrawing one line with \r
// makes a log file or a pipe unreadable, so anywhere else (and with
// --quiet) it is silent.
func (cf *copyFlags) bar(total int64, what string) *progressbar.ProgressBar {
	return newBar(os.Stderr, cf.quiet || !term.IsTerminal(int(os.Stderr.Fd())), total, what)
}

func newBar(w io.Writer, silent bool, total int64, what string) *progressbar.ProgressBar {
	if silent {
		return progressbar.DefaultBytesSilent(total, what)
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionShowCount(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		progressbar.OptionFullWidth())
}

// chunks runs fn over [0,total) in bs-sized pieces, in offset order, with
// qd workers. The first error stops issuing new pieces; pieces already in
// flight run to their end (cancelling them would turn their outcome,
// perhaps a success, into an abort), and that first error is returned.
func chunks(ctx context.Context, total int64, bs, qd int, fn func(ctx context.Context, off int64, n int) error) error {
	stop := make(chan struct{})
	offs := make(chan int64)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < max(qd, 1); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := range offs {
				n := int(min(int64(bs), total-off))
				if err := fn(ctx, off, n); err != nil {
					once.Do(func() { first = err; close(stop) })
					return
				}
			}
		}()
	}
feed:
	for off := int64(0); off < total; off += int64(bs) {
		select {
		case offs <- off:
		case <-stop:
			break feed
		case <-ctx.Done():
			break feed
		}
	}
	close(offs)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// ackTracker follows which pieces of a write the target acknowledged, so
// that progress and errors speak only of the acknowledged prefix: with
// several commands in flight, a piece acknowledged beyond a failed one
// does not make the data before it good. Safe for concurrent use.
type ackTracker struct {
	mu      sync.Mutex
	bar     *progressbar.ProgressBar // shows the prefix
	pending map[int64]int64          // acknowledged beyond the prefix: offset → bytes
	prefix  int64                    // bytes [0, prefix) are all acknowledged
	failOff int64                    // lowest failed offset, -1 while none failed
	failErr error                    // its error
}

func newAckTracker(bar *progressbar.ProgressBar) *ackTracker {
	return &ackTracker{bar: bar, pending: map[int64]int64{}, failOff: -1}
}

// ack records that the n bytes at off were acknowledged.
func (a *ackTracker) ack(off int64, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending[off] = int64(n)
	for {
		m, ok := a.pending[a.prefix]
		if !ok {
			break
		}
		delete(a.pending, a.prefix)
		a.prefix += m
	}
	a.bar.Set64(a.prefix)
}

// fail records that the piece at off failed with err.
func (a *ackTracker) fail(off int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failOff < 0 || off < a.failOff {
		a.failOff, a.failErr = off, err
	}
}

// acked returns the acknowledged prefix in bytes and the bytes
// acknowledged beyond it.
func (a *ackTracker) acked() (prefix, beyond int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.pending {
		beyond += n
	}
	return a.prefix, beyond
}

// writeError is a failed srpctl write: the lowest LBA that was not
// acknowledged, why, and what was acknowledged.
type writeError struct {
	LBA      uint64 // lowest failed LBA
	Err      error  // the failure of the WRITE(16) at LBA
	Acked    int64  // bytes acknowledged before LBA (from --lba on)
	FirstLBA uint64 // --lba
	Beyond   int64  // bytes acknowledged after LBA; the LUN holds them too
	Synced   bool   // a SYNCHRONIZE CACHE after the failure made Acked durable
	SyncErr  error  // why it did not (nil when it was not tried: --no-sync)
}

func (e *writeError) Error() string {
	msg := fmt.Sprintf("WRITE(16) at LBA %d failed: %v; %d bytes acknowledged before it", e.LBA, e.Err, e.Acked)
	if e.Acked > 0 {
		msg += fmt.Sprintf(" (LBA %d to %d)", e.FirstLBA, e.LBA-1)
	}
	if e.Beyond > 0 {
		msg += fmt.Sprintf(", %d more bytes acknowledged after it", e.Beyond)
	}
	switch {
	case e.Synced:
		msg += ", flushed by SYNCHRONIZE CACHE"
	case e.SyncErr != nil:
		msg += fmt.Sprintf("; SYNCHRONIZE CACHE failed too (%v): with the write cache on they may not be durable", e.SyncErr)
	}
	return msg
}

func (e *writeError) Unwrap() error { return e.Err }

// errStreamEnd is what a piece of a write past the end of its input
// returns: the write ends there, successfully.
var errStreamEnd = errors.New("end of input")

// seqReaderAt serves ReadAt on a stream (stdin, a pipe) in offset order:
// each call waits until the stream has reached its offset. chunks hands out
// offsets in order, so the call for the lowest outstanding offset always
// proceeds. After the end of the stream every call returns io.EOF.
type seqReaderAt struct {
	mu   sync.Mutex
	cond *sync.Cond
	r    io.Reader
	pos  int64
	eof  bool
}

func newSeqReaderAt(r io.Reader) *seqReaderAt {
	s := &seqReaderAt{r: r}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *seqReaderAt) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pos != off && !s.eof {
		s.cond.Wait()
	}
	if s.eof {
		return 0, io.EOF
	}
	n, err := io.ReadFull(s.r, p)
	s.pos += int64(n)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		s.eof, err = true, io.EOF
	}
	s.cond.Broadcast()
	return n, err
}

// more reports whether the stream holds data beyond what was read.
func (s *seqReaderAt) more() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eof {
		return false
	}
	n, _ := s.r.Read(make([]byte, 1))
	return n > 0
}

// writeLUN writes total bytes (pieces of bs bytes, qd in flight) with
// write, which sends the piece at byte offset off (LBA first + off/bsz)
// and returns once the target acknowledged it, or errStreamEnd when the
// input ended before off (the write then ends there, successfully). The bar follows the
// acknowledged prefix and is left there on failure; the error is a
// *writeError naming the lowest failed LBA. sync, when non-nil, is
// called after the last piece, and after a failure to make the
// acknowledged prefix durable.
func writeLUN(ctx context.Context, total int64, bs, qd int, bsz int64, first uint64, bar *progressbar.ProgressBar,
	write func(ctx context.Context, off int64, n int) error, sync func(ctx context.Context) error) error {
	tr := newAckTracker(bar)
	err := chunks(ctx, total, bs, qd, func(ctx context.Context, off int64, n int) error {
		if err := write(ctx, off, n); err != nil {
			if !errors.Is(err, errStreamEnd) {
				tr.fail(off, err)
			}
			return err
		}
		tr.ack(off, n)
		return nil
	})
	if errors.Is(err, errStreamEnd) && tr.failOff < 0 {
		err, total = nil, tr.prefix
	}
	if err == nil {
		bar.Finish()
		if sync == nil {
			return nil
		}
		if err := sync(ctx); err != nil {
			return fmt.Errorf("SYNCHRONIZE CACHE failed: %w: all %d bytes were acknowledged, but with the write cache on they may not be durable", err, total)
		}
		return nil
	}
	bar.Exit()
	prefix, beyond := tr.acked()
	we := &writeError{Err: err, Acked: prefix, FirstLBA: first, Beyond: beyond}
	we.LBA = first + uint64(prefix/bsz)
	if tr.failOff >= 0 {
		we.LBA, we.Err = first+uint64(tr.failOff/bsz), tr.failErr
	}
	if sync != nil && (prefix > 0 || beyond > 0) && ctx.Err() == nil {
		we.SyncErr = sync(ctx)
		we.Synced = we.SyncErr == nil
	}
	return we
}

func (cf *copyFlags) geometry(ctx context.Context, s *conn) (initiator.Capacity, int, error) {
	capy, err := s.ReadCapacity16(ctx, s.lun)
	if err != nil {
		return capy, 0, err
	}
	want, err := adminapi.ParseSize(cf.bs)
	if err != nil {
		return capy, 0, fmt.Errorf("--bs: %w", err)
	}
	bsz := int(capy.BlockSize)
	maxBytes := s.Options().MaxSect * 512
	bs := int(want) / bsz * bsz
	if bs > maxBytes {
		bs = maxBytes / bsz * bsz
	}
	if bs <= 0 {
		return capy, 0, fmt.Errorf("--bs %s: below the %d-byte block size", cf.bs, bsz)
	}
	if cf.lba > capy.LastLBA {
		return capy, 0, fmt.Errorf("--lba %d beyond the last LBA %d", cf.lba, capy.LastLBA)
	}
	if cf.count < -1 {
		return capy, 0, fmt.Errorf("--count %d: a number of blocks is 0 or more", cf.count)
	}
	return capy, bs, nil
}

func newReadCmd() *cobra.Command {
	var cf copyFlags
	c := &cobra.Command{
		Use:   "read TARGET --of FILE",
		Short: "copy logical blocks from a LUN to a file (READ(16)); --of - writes to stdout",
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				capy, bs, err := cf.geometry(ctx, s)
				if err != nil {
					return err
				}
				bsz := int64(capy.BlockSize)
				blocks := int64(capy.Blocks() - cf.lba)
				if cf.count > blocks {
					// Copying fewer blocks than asked for would be a
					// silently short result.
					return fmt.Errorf("--count %d: the LUN has %d blocks from LBA %d to its end", cf.count, blocks, cf.lba)
				}
				if cf.count >= 0 {
					blocks = cf.count
				}
				total := blocks * bsz
				var out io.WriterAt
				qd := cf.qd
				if cf.file == "-" {
					out, qd = &seqWriter{w: os.Stdout}, 1
				} else {
					f, err := os.OpenFile(cf.file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
					if err != nil {
						return err
					}
					defer f.Close()
					out = f
					// A pipe or character device (/dev/null, a tty)
					// takes the blocks in order and has nothing to sync.
					if fi, err := f.Stat(); err != nil {
						return err
					} else if m := fi.Mode(); !m.IsRegular() && (m&os.ModeDevice == 0 || m&os.ModeCharDevice != 0) {
						out, qd = &seqWriter{w: f}, 1
					}
				}
				bar := cf.bar(total, "read")
				pool := sync.Pool{New: func() any { b := make([]byte, bs); return &b }}
				err = chunks(ctx, total, bs, qd, func(ctx context.Context, off int64, n int) error {
					bp := pool.Get().(*[]byte)
					defer pool.Put(bp)
					buf := (*bp)[:n]
					if err := s.Read16(ctx, s.lun, cf.lba+uint64(off/bsz), buf, int(bsz), cf.fua); err != nil {
						return fmt.Errorf("READ(16) at LBA %d: %w", cf.lba+uint64(off/bsz), err)
					}
					if _, err := out.WriteAt(buf, off); err != nil {
						return err
					}
					bar.Add(n)
					return nil
				})
				if err != nil {
					bar.Exit() // where the reads stopped, not drawn to 100 %
					return err
				}
				bar.Finish()
				if f, ok := out.(*os.File); ok {
					return f.Sync()
				}
				return nil
			})
		},
	}
	addCopyFlags(c, &cf, "of", "output file (- for stdout)")
	c.Flags().BoolVar(&cf.fua, "fua", false, "set FUA on every READ(16)")
	return c
}

// seqWriter adapts a stream to WriterAt for one in-order writer.
type seqWriter struct {
	w   io.Writer
	off int64
}

func (s *seqWriter) WriteAt(b []byte, off int64) (int, error) {
	if off != s.off {
		return 0, errors.New("out-of-order write to a stream")
	}
	n, err := s.w.Write(b)
	s.off += int64(n)
	return n, err
}

func newWriteCmd() *cobra.Command {
	var cf copyFlags
	c := &cobra.Command{
		Use:   "write TARGET --if FILE",
		Short: "copy a file, block device or stdin (--if -) to logical blocks of a LUN (WRITE(16)), then SYNCHRONIZE CACHE; a partial last block is zero-padded",
		RunE: func(cmd *cobra.Command, args []string) error {
			// src is read at offsets; size is its length, -1 for a stream
			// (stdin, a pipe), which is read in order to its end.
			var src io.ReaderAt
			size := int64(-1)
			var stream *seqReaderAt
			if cf.file == "-" {
				stream = newSeqReaderAt(os.Stdin)
				src = stream
			} else {
				f, err := os.Open(cf.file)
				if err != nil {
					return err
				}
				defer f.Close()
				st, err := f.Stat()
				if err != nil {
					return err
				}
				switch m := st.Mode(); {
				case m.IsRegular():
					src, size = f, st.Size()
				case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
					// A block device: its length is where a seek to the end lands.
					if size, err = f.Seek(0, io.SeekEnd); err != nil {
						return fmt.Errorf("--if %s: size of the block device: %w", cf.file, err)
					}
					src = f
				case m&os.ModeNamedPipe != 0 || m&os.ModeCharDevice != 0 || m&os.ModeSocket != 0:
					stream = newSeqReaderAt(f)
					src = stream
				default:
					return fmt.Errorf("--if %s: not a file, block device or stream", cf.file)
				}
			}
			return cf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				capy, bs, err := cf.geometry(ctx, s)
				if err != nil {
					return err
				}
				bsz := int64(capy.BlockSize)
				room := int64(capy.Blocks()-cf.lba) * bsz
				total := size
				if stream != nil {
					total = room
				}
				if cf.count >= 0 {
					total = min(total, cf.count*bsz)
				}
				if total > room {
					return fmt.Errorf("%s: %d bytes do not fit in the %d bytes from LBA %d", cf.file, total, room, cf.lba)
				}
				pool := sync.Pool{New: func() any { b := make([]byte, bs); return &b }}
				write := func(ctx context.Context, off int64, n int) error {
					bp := pool.Get().(*[]byte)
					defer pool.Put(bp)
					buf := (*bp)[:n]
					m, err := src.ReadAt(buf, off)
					if err != nil && !errors.Is(err, io.EOF) {
						return err
					}
					if m == 0 && stream != nil {
						return errStreamEnd
					}
					padded := (int64(m) + bsz - 1) / bsz * bsz
					buf = (*bp)[:padded]
					clear(buf[m:])
					return s.Write16(ctx, s.lun, cf.lba+uint64(off/bsz), buf, int(bsz), cf.fua)
				}
				var syncCache func(ctx context.Context) error
				if !cf.noSync {
					syncCache = func(ctx context.Context) error { return s.SynchronizeCache(ctx, s.lun) }
				}
				barTotal := total
				if stream != nil && cf.count < 0 {
					barTotal = -1
				}
				if err := writeLUN(ctx, total, bs, cf.qd, bsz, cf.lba, cf.bar(barTotal, "write"), write, syncCache); err != nil {
					return err
				}
				if stream != nil && stream.pos == 0 && total > 0 {
					return fmt.Errorf("--if %s: the input is empty; nothing was written", cf.file)
				}
				if stream != nil && cf.count < 0 && stream.more() {
					return fmt.Errorf("%s: the input holds more than the %d bytes from LBA %d to the end of the LUN (those were written)", cf.file, room, cf.lba)
				}
				return nil
			})
		},
	}
	addCopyFlags(c, &cf, "if", "input: a file, a block device, or - for stdin")
	c.Flags().BoolVar(&cf.fua, "fua", false, "set FUA on every WRITE(16)")
	c.Flags().BoolVar(&cf.noSync, "no-sync", false, "skip the final SYNCHRONIZE CACHE")
	return c
}
