package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"
)

// lunFile is one LUN exposed as a regular file: reads and writes become
// READ(16)/WRITE(16), fsync becomes SYNCHRONIZE CACHE, and writes through a
// handle opened O_SYNC/O_DSYNC carry FUA.
type lunFile struct {
	fs.Inode
	s     *conn
	mp    *initiator.Multipath // several targets: the LUN's paths
	lun   uint64
	capy  initiator.Capacity
	maxIO int        // bytes per command (max_sect)
	rmw   sync.Mutex // serialises read-modify-write of partial blocks
}

type lunHandle struct{ fua bool }

var (
	_ fs.NodeOpener    = (*lunFile)(nil)
	_ fs.NodeReader    = (*lunFile)(nil)
	_ fs.NodeWriter    = (*lunFile)(nil)
	_ fs.NodeFsyncer   = (*lunFile)(nil)
	_ fs.NodeGetattrer = (*lunFile)(nil)
	_ fs.NodeSetattrer = (*lunFile)(nil)
	_ fs.NodeFlusher   = (*lunFile)(nil)
)

func (f *lunFile) size() int64 { return int64(f.capy.Bytes()) }

func (f *lunFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := &lunHandle{fua: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
	var ff uint32
	if flags&syscall.O_DIRECT != 0 {
		// O_DIRECT: bypass the page cache so each write reaches the target.
		ff |= fuse.FOPEN_DIRECT_IO
	}
	return h, ff, 0
}

func (f *lunFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(f.size())
	out.Blksize = f.capy.BlockSize
	out.Blocks = out.Size / 512
	out.Nlink = 1
	out.Uid, out.Gid = uint32(os.Getuid()), uint32(os.Getgid())
	return 0
}

func (f *lunFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.size() {
		return syscall.EINVAL // a LUN cannot be resized from here
	}
	return f.Getattr(ctx, fh, out)
}

func (f *lunFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (f *lunFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if f.mp != nil {
		return errno(mpSyncCache(ctx, f.mp, f.lun))
	}
	return errno(f.s.SynchronizeCache(ctx, f.lun))
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "srpctl attach:", err)
	if initiator.IsSense(err, sense.KeyDataProtect, 0x27, 0) {
		return syscall.EROFS
	}
	if initiator.IsSense(err, sense.KeyIllegalRequest, 0x21, 0) {
		return syscall.ENOSPC
	}
	return syscall.EIO
}

// ioRetries is how many times io re-issues a READ(16) or WRITE(16) the
// target aborted although nothing was wrong with it: a LUN reset (or ABORT
// TASK SET, CLEAR TASK SET) from another process or another I_T nexus
// aborts every command of the logical unit. Linux's SCSI midlayer retries
// these up to the disk's retry count (scsi_decide_disposition: TASK ABORTED
// goes to maybe_retry; a timed-out command aborted by its error handler is
// retried by scsi_eh_flush_done_q; sd's SD_MAX_RETRIES is 5).
const ioRetries = 5

// aborted reports whether err is a command the target aborted: TASK ABORTED
// status (TAS, a reset from another I_T nexus), or a command that got no
// response and was aborted with ABORT TASK (a reset from this I_T nexus,
// which another srpctl shares, ends it silently). A cancelled ctx (the
// kernel interrupted the request) is not retried.
func aborted(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var st *initiator.StatusError
	return errors.Is(err, initiator.ErrAborted) || errors.As(err, &st) && st.Status == sense.StatusTaskAborted
}

// io moves whole blocks [lba, lba+len(buf)/bs) in max_sect-sized commands.
func (f *lunFile) io(ctx context.Context, write bool, lba uint64, buf []byte, fua bool) error {
	bs := int(f.capy.BlockSize)
	for len(buf) > 0 {
		n := min(len(buf), f.maxIO)
		var err error
		for try := 0; ; try++ {
			if f.mp != nil {
				err = mpRW16(ctx, f.mp, write, f.lun, lba, buf[:n], bs, fua)
			} else if write {
				err = f.s.Write16(ctx, f.lun, lba, buf[:n], bs, fua)
			} else {
				err = f.s.Read16(ctx, f.lun, lba, buf[:n], bs, false)
			}
			if err == nil || try == ioRetries || !aborted(ctx, err) {
				break
			}
			fmt.Fprintf(os.Stderr, "srpctl attach: lun %d LBA %d: %v (re-issuing)\n", initiator.LUNNumber(f.lun), lba, err)
		}
		if err != nil {
			return err
		}
		buf = buf[n:]
		lba += uint64(n / bs)
	}
	return nil
}

func (f *lunFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.size() {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), f.size())
	bs := int64(f.capy.BlockSize)
	first, last := off/bs, (end+bs-1)/bs
	if off%bs == 0 && end%bs == 0 {
		if err := f.io(ctx, false, uint64(first), dest[:end-off], false); err != nil {
			return nil, errno(err)
		}
		return fuse.ReadResultData(dest[:end-off]), 0
	}
	buf := make([]byte, (last-first)*bs)
	if err := f.io(ctx, false, uint64(first), buf, false); err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(buf[off-first*bs : end-first*bs]), 0
}

func (f *lunFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	fua := false
	if h, ok := fh.(*lunHandle); ok {
		fua = h.fua
	}
	if off >= f.size() && len(data) > 0 {
		return 0, syscall.ENOSPC
	}
	end := min(off+int64(len(data)), f.size())
	bs := int64(f.capy.BlockSize)
	if off%bs == 0 && end%bs == 0 {
		if err := f.io(ctx, true, uint64(off/bs), data[:end-off], fua); err != nil {
			return 0, errno(err)
		}
		return uint32(end - off), 0
	}
	// Partial blocks: read, merge, write back under the RMW lock.
	f.rmw.Lock()
	defer f.rmw.Unlock()
	first, last := off/bs, (end+bs-1)/bs
	buf := make([]byte, (last-first)*bs)
	if err := f.io(ctx, false, uint64(first), buf, false); err != nil {
		return 0, errno(err)
	}
	copy(buf[off-first*bs:], data[:end-off])
	if err := f.io(ctx, true, uint64(first), buf, fua); err != nil {
		return 0, errno(err)
	}
	return uint32(end - off), 0
}

// lunDir is the mount's root: one file lun<N> per LUN.
type lunDir struct {
	fs.Inode
	files map[string]*lunFile
}

func (d *lunDir) OnAdd(ctx context.Context) {
	for name, f := range d.files {
		ch := d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
		d.AddChild(name, ch, false)
	}
}

var _ fs.NodeOnAdder = (*lunDir)(nil)

// oneLine is err's text on one line: fusermount's messages end in
// newlines, and go-fuse appends its exit status on another.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// checkMountPoint reports a mount point that cannot take the FUSE mount,
// before logging in: missing, not a directory, a stale FUSE mount left by
// a killed srpctl attach (stat fails with ENOTCONN), or not empty. A
// non-empty directory would have its files hidden (/proc, a data
// directory), or be another srpctl attach's mount: stacking a second one
// on it makes both fight over the mount point and hang at detach.
func checkMountPoint(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("mount point %s is a dead FUSE mount (left by a killed srpctl attach?): run umount %s (or fusermount -u %s) first", dir, dir, dir)
	case err != nil:
		return fmt.Errorf("mount point: %w", err)
	case !st.IsDir():
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty (it holds %s; is another srpctl attach using it?): use an empty directory", dir, names[0])
	}
	return nil
}

func newAttachCmd() *cobra.Command {
	// attach logs in as ib_srp does (SINGLE), replacing channels an
	// earlier attach of this host left behind; other srpctl commands join
	// its I_T nexus.
	tf := targetFlags{single: true}
	var allowOther, debug bool
	c := &cobra.Command{
		Use:   "attach TARGET [TARGET...] MOUNTPOINT",
		Short: "expose each LUN as MOUNTPOINT/lun<N> through FUSE (use with losetup); detaches on SIGINT/SIGTERM",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			targets := args[:len(args)-1]
			args = []string{targets[0], args[len(args)-1]}
			if err := checkMountPoint(args[1]); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Several targets: gateways of the same LUs, one multipath per LUN.
			conns, err := tf.dialPaths(ctx, targets, nil)
			if err != nil {
				return err
			}
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			s := conns[0]
			luns, err := s.ReportLUNs(ctx)
			if err != nil {
				return err
			}
			root := &lunDir{files: map[string]*lunFile{}}
			for _, l := range luns {
				capy, err := s.ReadCapacity16(ctx, l)
				if err != nil {
					fmt.Fprintf(os.Stderr, "srpctl attach: lun %d: %v (skipped)\n", initiator.LUNNumber(l), err)
					continue
				}
				maxIO := s.Options().MaxSect * 512 / int(capy.BlockSize) * int(capy.BlockSize)
				lf := &lunFile{s: s, lun: l, capy: capy, maxIO: maxIO}
				if len(conns) > 1 {
					if lf.mp, err = tf.multipath(ctx, conns, targets, l); err != nil {
						return fmt.Errorf("lun %d: %w", initiator.LUNNumber(l), err)
					}
					defer lf.mp.Close()
				}
				root.files[fmt.Sprintf("lun%d", initiator.LUNNumber(l))] = lf
			}
			if len(root.files) == 0 {
				return fmt.Errorf("target reports no usable LUNs")
			}
			sec := time.Second
			srv, err := fs.Mount(args[1], root, &fs.Options{
				AttrTimeout: &sec, EntryTimeout: &sec,
				MountOptions: fuse.MountOptions{
					FsName: "srp", Name: "srpctl", AllowOther: allowOther, DirectMount: true,
					MaxWrite: 1 << 20, Debug: debug,
					// Reads answer from memory (ReadResultData): splicing
					// would copy the same bytes through a pipe, which for a
					// 1 MiB read exceeds the default pipe-max-size and
					// logs a trySplice error before falling back.
					DisableSplice: true,
				},
			})
			if err != nil {
				return fmt.Errorf("mount %s: %w", args[1], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "attached %d LUN(s) at %s\n", len(root.files), args[1])
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			served := make(chan struct{})
			go func() { srv.Wait(); close(served) }()
			for {
				select {
				case <-served:
					return nil
				case sig := <-sigs:
					if err := srv.Unmount(); err != nil {
						fmt.Fprintf(os.Stderr, "srpctl attach: %v: unmount %s: %s (detach loop devices and retry)\n", sig, args[1], oneLine(err))
						continue
					}
					<-served
					fmt.Fprintf(cmd.OutOrStdout(), "detached %s\n", args[1])
					return nil
				}
			}
		},
	}
	addTargetFlags(c, &tf, false)
	c.Long += `

Stop with Ctrl-C (SIGINT) or SIGTERM after detaching loop devices
(losetup -d). If srpctl attach was killed instead, the mount point is left
behind ("Transport endpoint is not connected"): remove it with
umount MOUNTPOINT (or fusermount -u MOUNTPOINT) before attaching again.`
	c.Flags().BoolVar(&allowOther, "allow-other", false, "let other users open the LUN files (FUSE allow_other)")
	c.Flags().BoolVar(&debug, "fuse-debug", false, "log FUSE requests")
	return c
}
