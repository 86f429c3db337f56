package backstore

import (
	"errors"
	"sync"
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

// ReadAt implements io.ReaderAt.
func (f *Fault) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	err := f.ReadErr
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.Backstore.ReadAt(p, off)
}

// WriteAt implements io.WriterAt.
func (f *Fault) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	err := f.WriteErr
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.Backstore.WriteAt(p, off)
}

// Sync implements Syncer.
func (f *Fault) Sync() error {
	f.mu.Lock()
	err := f.SyncErr
	f.Syncs++
	f.mu.Unlock()
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
