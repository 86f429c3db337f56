package backstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux fallocate(2) mode bits (include/uapi/linux/falloc.h).
const (
	fallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	fallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
)

// lseek(2) whence values for sparse files (include/uapi/linux/fs.h).
const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

// Block device ioctls (include/uapi/linux/fs.h).
const (
	blkGetSize64 = 0x80081272 // BLKGETSIZE64: u64 bytes
	blkSSZGet    = 0x1268     // BLKSSZGET: int logical block size
	blkPBSZGet   = 0x127B     // BLKPBSZGET: unsigned int physical block size
	blkZeroOut   = 0x127F     // BLKZEROOUT: u64[2] {start, len}
)

// File is a backstore on a regular file or a block device node, read and
// written with pread/pwrite; Sync is fdatasync. Safe for concurrent use.
type File struct {
	f     *os.File
	fd    int
	block bool // a block device node
	lbs   int  // native logical block size (block devices, BLKSSZGET), bytes
	pbs   int  // physical block size (block devices, BLKPBSZGET), bytes
	// canUnmap: a regular file, or a block device whose request queue
	// accepts discard or write zeroes (sysfs queue/discard_max_bytes,
	// queue/write_zeroes_max_bytes), or whose limits could not be read.
	canUnmap bool
	mu       sync.RWMutex
	size     int64
	noPunch  bool // PUNCH_HOLE was refused; Unmap zeroes the range instead
}

// FileOptions configure OpenFile.
type FileOptions struct {
	// Size, when > 0 and the path is a regular file, creates the file if
	// missing and sets its length to Size bytes (sparse).
	Size int64
	// ReadOnly opens the file O_RDONLY.
	ReadOnly bool
	// Direct opens with O_DIRECT (callers must then use aligned buffers).
	Direct bool
}

// OpenFile opens a regular file or a block device node as a backstore.
// Block devices are sized with BLKGETSIZE64; regular files by their length.
func OpenFile(path string, o FileOptions) (*File, error) {
	flags := os.O_RDWR
	if o.ReadOnly {
		flags = os.O_RDONLY
	}
	if o.Direct {
		flags |= syscall.O_DIRECT
	}
	if o.Size > 0 && !o.ReadOnly {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	b := &File{f: f, fd: int(f.Fd())}
	switch {
	case st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0:
		b.block = true
		var sz uint64
		if err := ioctl(b.fd, blkGetSize64, unsafe.Pointer(&sz)); err != nil {
			f.Close()
			return nil, fmt.Errorf("backstore: BLKGETSIZE64 %s: %w", path, err)
		}
		var lbs int32
		if err := ioctl(b.fd, blkSSZGet, unsafe.Pointer(&lbs)); err != nil {
			f.Close()
			return nil, fmt.Errorf("backstore: BLKSSZGET %s: %w", path, err)
		}
		b.lbs = int(lbs)
		var pbs uint32
		if err := ioctl(b.fd, blkPBSZGet, unsafe.Pointer(&pbs)); err == nil {
			b.pbs = int(pbs)
		}
		b.size = int64(sz)
		b.canUnmap = deviceCanUnmap(st)
	case st.Mode().IsRegular():
		b.canUnmap = true
		b.size = st.Size()
		if o.Size > 0 && st.Size() != o.Size && !o.ReadOnly {
			if err := f.Truncate(o.Size); err != nil {
				f.Close()
				return nil, err
			}
			b.size = o.Size
		}
	default:
		f.Close()
		return nil, fmt.Errorf("backstore: %s is neither a regular file nor a block device", path)
	}
	return b, nil
}

// deviceCanUnmap reads the request queue limits of the block device st
// from sysfs (/sys/dev/block/MAJ:MIN/queue, or the parent disk's queue for
// a partition): deallocation is possible when discard_max_bytes or
// write_zeroes_max_bytes is not zero. Without sysfs it answers true, and
// Unmap falls back to writing zeros if the device refuses.
func deviceCanUnmap(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	dev := uint64(sys.Rdev)
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev))
	known := false
	for _, q := range []string{dir + "/queue", dir + "/../queue"} {
		for _, lim := range []string{"discard_max_bytes", "write_zeroes_max_bytes"} {
			v, err := os.ReadFile(q + "/" + lim)
			if err != nil {
				continue
			}
			known = true
			if t := strings.TrimSpace(string(v)); t != "" && t != "0" {
				return true
			}
		}
		if known {
			return false
		}
	}
	return true
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// Size implements Backstore.
func (b *File) Size() int64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.size
}

// IsBlockDevice reports whether the backstore is a block device node.
func (b *File) IsBlockDevice() bool { return b.block }

// Close implements Backstore.
func (b *File) Close() error { return b.f.Close() }

// ReadAt implements io.ReaderAt with pread(2). A short read inside Size
// (a file shrunk behind our back) is completed with zeros.
func (b *File) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(off, len(p), b.Size()); err != nil {
		return 0, err
	}
	n, err := b.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		clear(p[n:])
		return len(p), nil
	}
	return n, unwrapPathError(err)
}

// WriteAt implements io.WriterAt with pwrite(2).
func (b *File) WriteAt(p []byte, off int64) (int, error) {
	if err := checkRange(off, len(p), b.Size()); err != nil {
		return 0, err
	}
	n, err := b.f.WriteAt(p, off)
	return n, unwrapPathError(err)
}

// Sync implements Syncer with fdatasync(2).
func (b *File) Sync() error {
	for {
		err := syscall.Fdatasync(b.fd)
		if err != syscall.EINTR {
			return unwrapPathError(err)
		}
	}
}

// Unmap implements Unmapper; afterwards the range reads back as zeros
// (the logical unit reports LBPRZ=1). Regular files:
// fallocate(PUNCH_HOLE|KEEP_SIZE). Block devices: fallocate(PUNCH_HOLE|
// KEEP_SIZE) on the device, which Linux (blkdev_fallocate) turns into
// WRITE ZEROES allowing deallocation — a plain BLKDISCARD would not promise
// zeros. Where that is refused, the range is zeroed instead (BLKZEROOUT on
// devices, zero writes on files). Parts of the range not aligned to the
// device's logical block size are written with zeros.
func (b *File) Unmap(off, length int64) error {
	if off < 0 || length < 0 || off > b.Size() || length > b.Size()-off {
		return ErrOutOfRange
	}
	if length == 0 {
		return nil
	}
	if b.block {
		return b.unmapDevice(off, length)
	}
	if done, err := b.punchHole(off, length); done || err != nil {
		return err
	}
	return writeZeros(b, off, length)
}

// punchHole deallocates length bytes at off with fallocate(PUNCH_HOLE|
// KEEP_SIZE). done is false (with a nil error) when the file system or
// device does not support it — remembered, so later calls skip the system
// call — and the caller must zero the range another way.
func (b *File) punchHole(off, length int64) (done bool, err error) {
	b.mu.RLock()
	np := b.noPunch
	b.mu.RUnlock()
	if np {
		return false, nil
	}
	err = syscall.Fallocate(b.fd, fallocPunchHole|fallocKeepSize, off, length)
	if err == nil {
		return true, nil
	}
	if err != syscall.EOPNOTSUPP && err != syscall.ENOSYS {
		return false, err
	}
	b.mu.Lock()
	b.noPunch = true
	b.mu.Unlock()
	return false, nil
}

// unmapDevice is Unmap for a block device.
func (b *File) unmapDevice(off, length int64) error {
	lbs := int64(max(b.lbs, 512))
	end := off + length
	start := (off + lbs - 1) / lbs * lbs
	stop := end / lbs * lbs
	if start >= stop {
		return writeZeros(b, off, length)
	}
	if start > off {
		if err := writeZeros(b, off, start-off); err != nil {
			return err
		}
	}
	if end > stop {
		if err := writeZeros(b, stop, end-stop); err != nil {
			return err
		}
	}
	if done, err := b.punchHole(start, stop-start); done || err != nil {
		return err
	}
	r := [2]uint64{uint64(start), uint64(stop - start)}
	return ioctl(b.fd, blkZeroOut, unsafe.Pointer(&r))
}

// UnmapSupported implements UnmapSupporter: true for regular files, and
// for block devices whose queue accepts discard or write zeroes.
func (b *File) UnmapSupported() bool { return b.canUnmap }

func writeZeros(w io.WriterAt, off, length int64) error {
	z := make([]byte, min(length, 1<<20))
	for length > 0 {
		m := min(length, int64(len(z)))
		if _, err := w.WriteAt(z[:m], off); err != nil {
			return err
		}
		off += m
		length -= m
	}
	return nil
}

// Resize implements Resizer for regular files (ftruncate). Block devices
// return an error; their size follows the device (see Refresh).
func (b *File) Resize(size int64) error {
	if b.block {
		return errors.New("backstore: cannot resize a block device")
	}
	if size < 0 {
		return ErrOutOfRange
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.f.Truncate(size); err != nil {
		return err
	}
	b.size = size
	return nil
}

// Refresh re-reads the size of the underlying file or device and returns it
// in bytes.
func (b *File) Refresh() (int64, error) {
	var sz int64
	if b.block {
		var u uint64
		if err := ioctl(b.fd, blkGetSize64, unsafe.Pointer(&u)); err != nil {
			return 0, err
		}
		sz = int64(u)
	} else {
		st, err := b.f.Stat()
		if err != nil {
			return 0, err
		}
		sz = st.Size()
	}
	b.mu.Lock()
	b.size = sz
	b.mu.Unlock()
	return sz, nil
}

// LogicalBlockSize implements BlockSizer; 0 for regular files.
func (b *File) LogicalBlockSize() int { return b.lbs }

// PhysicalBlockSize implements PhysicalBlockSizer (BLKPBSZGET); 0 for
// regular files or when the device does not say.
func (b *File) PhysicalBlockSize() int { return b.pbs }

// AllocationStatus implements AllocationStatuser with SEEK_DATA/SEEK_HOLE
// for regular files. Block devices report everything mapped.
func (b *File) AllocationStatus(off, limit int64) (bool, int64, error) {
	size := b.Size()
	if off < 0 || off >= size || limit <= 0 {
		return false, 0, ErrOutOfRange
	}
	end := min(size, off+limit)
	if b.block {
		return true, end - off, nil
	}
	data, err := syscall.Seek(b.fd, off, seekData)
	if err == syscall.ENXIO { // no data at or after off: a hole to EOF
		return false, end - off, nil
	}
	if err != nil {
		if err == syscall.EINVAL || err == syscall.EOPNOTSUPP {
			return true, end - off, nil
		}
		return false, 0, err
	}
	if data > off {
		return false, min(data, end) - off, nil
	}
	hole, err := syscall.Seek(b.fd, off, seekHole)
	if err != nil {
		return true, end - off, nil
	}
	return true, min(hole, end) - off, nil
}

// unwrapPathError strips *os.PathError/*os.SyscallError wrappers' text while
// keeping errors.Is on the errno working.
func unwrapPathError(err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
