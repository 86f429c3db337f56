// Package backstore holds the storage behind SCSI logical units: regular
// files, block devices and RAM. A backstore is a flat array of bytes; it knows
// nothing of SCSI. Optional abilities (flush, unmap, write same, resize,
// allocation status) are one-method interfaces found by type assertion, in
// the manner of SPDK's io_type_supported.
//
// Errors returned by backstores wrap the operating system's errno (for
// example syscall.ENOSPC, syscall.EIO) so the SCSI core can map them to
// sense data with errors.Is.
package backstore

import (
	"errors"
	"fmt"
	"io"
)

// Backstore is the minimal storage contract. Offsets and lengths are bytes.
// ReadAt and WriteAt follow io.ReaderAt/io.WriterAt and may be called
// concurrently from many goroutines. Writes are durable only after Sync
// (if the backstore implements Syncer) unless the backstore says otherwise.
type Backstore interface {
	io.ReaderAt
	io.WriterAt
	// Size is the current capacity in bytes.
	Size() int64
	// Close releases the backstore; no call may follow it.
	Close() error
}

// Syncer is implemented by backstores with a volatile cache. Sync makes every
// write that completed before the call durable (fdatasync for files and
// block devices). It backs FUA, SYNCHRONIZE CACHE and WCE=0 writes.
type Syncer interface {
	Sync() error
}

// Unmapper is implemented by thin-provisioned backstores. Unmap deallocates
// length bytes at off; later reads of that range return zeros
// (SBC-3 LBPRZ=1). For files and block devices: fallocate(PUNCH_HOLE|
// KEEP_SIZE), zeroing where the medium cannot deallocate.
type Unmapper interface {
	Unmap(off, length int64) error
}

// WriteSamer is implemented by backstores that can replicate one block
// faster than a write loop. WriteSame writes block count times starting at
// off (len(block) bytes each).
type WriteSamer interface {
	WriteSame(block []byte, off int64, count int64) error
}

// Resizer is implemented by backstores whose capacity can change. Resize
// sets the capacity to size bytes; growth reads back as zeros.
type Resizer interface {
	Resize(size int64) error
}

// AllocationStatuser reports whether storage is allocated, for GET LBA
// STATUS (SBC-3 §5.7). Status returns whether the byte at off is mapped and
// the length in bytes (at least 1, at most limit) of the run starting at off
// with that same state.
type AllocationStatuser interface {
	AllocationStatus(off, limit int64) (mapped bool, length int64, err error)
}

// BlockSizer is implemented by backstores with a native logical block size
// (block devices: BLKSSZGET), in bytes.
type BlockSizer interface {
	LogicalBlockSize() int
}

// PhysicalBlockSizer is implemented by backstores that know their physical
// block size (block devices: BLKPBSZGET), in bytes; 0 means unknown.
type PhysicalBlockSizer interface {
	PhysicalBlockSize() int
}

// UnmapSupporter is implemented by Unmappers whose ability to deallocate
// depends on the medium (block devices without discard or write zeroes
// support cannot). UnmapSupported reports whether Unmap can deallocate.
type UnmapSupporter interface {
	UnmapSupported() bool
}

// CompareAndWriter is implemented by backstores that compare and write
// atomically against every writer of the medium, including other hosts
// (Ceph RBD: rbd_compare_and_write). CompareAndWrite writes write at off if
// the bytes there equal cmp (len(cmp) == len(write)); otherwise it writes
// nothing and returns a *MiscompareError. It backs COMPARE AND WRITE
// (SBC-3 §5.2) where the core's own lock cannot reach the other writers.
type CompareAndWriter interface {
	CompareAndWrite(cmp, write []byte, off int64) error
}

// MiscompareError reports the first byte that differed in CompareAndWrite.
type MiscompareError struct {
	// Offset is the byte offset of the first difference from the start of
	// the compared range.
	Offset int64
}

func (e *MiscompareError) Error() string {
	return fmt.Sprintf("backstore: miscompare at byte %d", e.Offset)
}

// NonBlocking is implemented by backstores whose reads and writes never
// wait for a device or the network (memory). NonBlocking reports whether
// that holds; the SCSI core then runs READ and WRITE on the caller's
// goroutine instead of handing them to one of its own.
type NonBlocking interface {
	NonBlocking() bool
}

// Viewer is implemented by backstores whose data lives in the process's
// memory (RAM) and can be sent from where it lies: a fabric then transmits
// a READ's data-in straight from the backstore's memory instead of a copy
// of it (one memory copy less per byte read; LIO's ramdisk copies into the
// command's pages instead).
type Viewer interface {
	// View appends to views the slices of the backstore's memory that hold
	// the length bytes at byte offset off, in order (their lengths sum to
	// length), and returns the extended list. Ranges never written may be
	// given as slices of shared zeros. A slice's capacity may run past its
	// length to the end of the backstore's allocation that holds it (a RAM
	// chunk), memory the caller must not write either, so that a cache of
	// registrations of that memory keyed by where it ends serves every
	// view of it (rdma.RegionCache). The caller only reads the slices;
	// they stay valid memory while it holds them, but a later write or
	// unmap of the range changes what they hold (the caller orders that,
	// as the SCSI core's task set does). Errors as ReadAt's: ErrClosed,
	// ErrOutOfRange.
	View(views [][]byte, off, length int64) ([][]byte, error)
}

// WriteViewer is implemented by backstores whose data lives in the
// process's memory (RAM) and can be written where it lies: a fabric then
// places a WRITE's data-out straight into the backstore's memory as it
// arrives instead of into a buffer that is copied afterwards.
type WriteViewer interface {
	// WriteView appends to views the slices of the backstore's memory that
	// hold the length bytes at byte offset off, in order (their lengths
	// sum to length), and returns the extended list. A slice's capacity
	// may run past its length, as View's may; the caller writes no byte
	// there. The range counts as
	// written from this call on (AllocationStatus reports it mapped); the
	// caller fills every slice, and until it has, reads of the range may
	// return any mix of the old and the new bytes. The slices stay valid
	// memory while the caller holds them, but an Unmap of the range or
	// any Resize (a RAM backstore's shrink copies the chunk the new end
	// falls in) may detach them from the medium (the caller orders those,
	// as the SCSI core's write lock does). Errors as WriteAt's: ErrClosed,
	// ErrOutOfRange.
	WriteView(views [][]byte, off, length int64) ([][]byte, error)
}

// ErrClosed is returned by operations on a closed backstore.
var ErrClosed = errors.New("backstore: closed")

// ErrOutOfRange is returned for accesses beyond Size.
var ErrOutOfRange = errors.New("backstore: access beyond end")

// checkRange validates [off, off+n) against size.
func checkRange(off int64, n int, size int64) error {
	if off < 0 || n < 0 || off > size || int64(n) > size-off {
		return ErrOutOfRange
	}
	return nil
}
