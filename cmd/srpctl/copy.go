package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
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
	f.StringVar(&cf.bs, "bs", "1m", "bytes per command, k/m suffixes (rounded down to whole blocks, at most max_sect*512)")
	f.IntVar(&cf.qd, "qd", 8, "commands in flight")
	f.BoolVar(&cf.quiet, "quiet", false, "no progress bar")
	c.MarkFlagRequired(fileFlag)
}

func (cf *copyFlags) bar(total int64, what string) *progressbar.ProgressBar {
	if cf.quiet {
		return progressbar.DefaultBytesSilent(total, what)
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionShowCount(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
		progressbar.OptionFullWidth())
}

// chunks runs fn over [0,total) in bs-sized pieces with qd workers; the
// first error stops the rest.
func chunks(ctx context.Context, total int64, bs, qd int, fn func(ctx context.Context, off int64, n int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
feed:
	for off := int64(0); off < total; off += int64(bs) {
		select {
		case offs <- off:
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

func (cf *copyFlags) geometry(ctx context.Context, s *conn) (initiator.Capacity, int, error) {
	capy, err := s.ReadCapacity16(ctx, s.lun)
	if err != nil {
		return capy, 0, err
	}
	want, err := parseSize(cf.bs)
	if err != nil {
		return capy, 0, err
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
				bar.Finish()
				if err != nil {
					return err
				}
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
		Short: "copy a file to logical blocks of a LUN (WRITE(16)), then SYNCHRONIZE CACHE; a partial last block is zero-padded",
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(cf.file)
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			if !st.Mode().IsRegular() {
				// Its length (st.Size) is what gets copied: 0 for a
				// device or a pipe, which would write nothing and succeed.
				return fmt.Errorf("--if %s: not a regular file", cf.file)
			}
			return cf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				capy, bs, err := cf.geometry(ctx, s)
				if err != nil {
					return err
				}
				bsz := int64(capy.BlockSize)
				total := st.Size()
				if cf.count >= 0 {
					total = min(total, cf.count*bsz)
				}
				if room := int64(capy.Blocks()-cf.lba) * bsz; total > room {
					return fmt.Errorf("%s: %d bytes do not fit in the %d bytes from LBA %d", cf.file, total, room, cf.lba)
				}
				bar := cf.bar(total, "write")
				pool := sync.Pool{New: func() any { b := make([]byte, bs); return &b }}
				err = chunks(ctx, total, bs, cf.qd, func(ctx context.Context, off int64, n int) error {
					bp := pool.Get().(*[]byte)
					defer pool.Put(bp)
					padded := (int64(n) + bsz - 1) / bsz * bsz
					buf := (*bp)[:padded]
					if _, err := f.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
						return err
					}
					clear(buf[n:])
					if err := s.Write16(ctx, s.lun, cf.lba+uint64(off/bsz), buf, int(bsz), cf.fua); err != nil {
						return fmt.Errorf("WRITE(16) at LBA %d: %w", cf.lba+uint64(off/bsz), err)
					}
					bar.Add(n)
					return nil
				})
				bar.Finish()
				if err != nil {
					return err
				}
				if cf.noSync {
					return nil
				}
				return s.SynchronizeCache(ctx, s.lun)
			})
		},
	}
	addCopyFlags(c, &cf, "if", "input file")
	c.Flags().BoolVar(&cf.fua, "fua", false, "set FUA on every WRITE(16)")
	c.Flags().BoolVar(&cf.noSync, "no-sync", false, "skip the final SYNCHRONIZE CACHE")
	return c
}
