package backstore

import (
	"errors"
	"sync"
	"syscall"
)

// Fault wraps a Backstore and injects errors, for tests of error mapping
// (in the manner of pebble's errorfs). Its zero hooks pass everything
// through. It forwards Syncer and Unmapper when the inner backstore has them.
type Fault struct {
	Backstore
	mu sync.Mutex
	// ReadErr, WriteErr, SyncErr, UnmapErr, when non-nil, are returned by the
	// next matching calls (all of them until cleared).
	ReadErr, WriteErr, SyncErr, UnmapErr error
	// BadOff and BadLen, when BadLen > 0, make the bytes [BadOff,
	// BadOff+BadLen) unreadable and unwritable, like bad sectors: a read
	// or write reaching them transfers the bytes before them, then fails
	// with syscall.EIO, as pread and pwrite report a medium error part way.
	BadOff, BadLen int64
	// Hang, when non-nil, blocks every ReadAt, WriteAt and Sync until it is
	// closed: a backstore that stops answering (a dead NFS server, a
	// device whose queue is stuck).
	Hang chan struct{}
	// Syncs counts Sync calls.
	Syncs int
}

// NewFault wraps b.
func NewFault(b Backstore) *Fault { return &Fault{Backstore: b} }

// Set runs f with the fault lock held, to change the hooks safely.
func (f *Fault) Set(fn func(f *Fault)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// hooks returns the number of bytes of an n-byte access at off
// that may go through before the bad range (n when it is not reached) and
// the error to return after them, after waiting out Hang.
func (f *Fault) hooks(err error, off int64, n int) (int, error) {
	f.mu.Lock()
	hang, badOff, badLen := f.Hang, f.BadOff, f.BadLen
	f.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if err != nil {
		return 0, err
	}
	if badLen > 0 && off < badOff+badLen && off+int64(n) > badOff {
		return int(max(badOff-off, 0)), syscall.EIO
	}
	return n, nil
}

// ReadAt implements io.ReaderAt.
func (f *Fault) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	err := f.ReadErr
	f.mu.Unlock()
	good, err := f.hooks(err, off, len(p))
	if err != nil {
		n, rerr := f.Backstore.ReadAt(p[:good], off)
		if rerr != nil {
			return n, rerr
		}
		return n, err
	}
	return f.Backstore.ReadAt(p, off)
}

// WriteAt implements io.WriterAt.
func (f *Fault) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	err := f.WriteErr
	f.mu.Unlock()
	good, err := f.hooks(err, off, len(p))
	if err != nil {
		n, werr := f.Backstore.WriteAt(p[:good], off)
		if werr != nil {
			return n, werr
		}
		return n, err
	}
	return f.Backstore.WriteAt(p, off)
}

// Sync implements Syncer.
func (f *Fault) Sync() error {
	f.mu.Lock()
	err, hang := f.SyncErr, f.Hang
	f.Syncs++
	f.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if err != nil {
		return err
	}
	if s, ok := f.Backstore.(Syncer); ok {
		return s.Sync()
	}
	return nil
}

// SyncCount returns the number of Sync calls so far.
func (f *Fault) SyncCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Syncs
}

// Unmap implements Unmapper.
func (f *Fault) Unmap(off, length int64) error {
	f.mu.Lock()
	err := f.UnmapErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if u, ok := f.Backstore.(Unmapper); ok {
		return u.Unmap(off, length)
	}
	return writeZeros(f.Backstore, off, length)
}

// Resize implements Resizer when the inner backstore does.
func (f *Fault) Resize(size int64) error {
	if r, ok := f.Backstore.(Resizer); ok {
		return r.Resize(size)
	}
	return errors.New("backstore: inner backstore cannot be resized")
}
