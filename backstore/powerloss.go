package backstore

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// ErrPowerCut is returned, wrapping syscall.EIO, by every call on a
// PowerLoss backstore after Cut: the simulated machine is off.
var ErrPowerCut = fmt.Errorf("backstore: power cut: %w", syscall.EIO)

// PowerLoss wraps a Backstore with a simulated volatile write cache that a
// power cut empties: every write (and unmap) that completed since the last
// Sync is undone by Cut, leaving the inner backstore exactly as durable
// storage would hold it. It implements Syncer, so a logical unit on it has
// a write cache (the caching page's WCE is changeable): with WCE=1 only
// FUA writes and writes before a completed SYNCHRONIZE CACHE must survive
// Cut; with WCE=0 every acknowledged write must (SBC-3 §4.15).
//
// Writes are serialized (each records the bytes it overwrites in an undo
// log, then writes through), which is what makes the undo exact; the layer
// is for fault campaigns and tests, not for speed. A Sync makes durable
// every write that completed before it was called; writes completing while
// it runs stay volatile.
type PowerLoss struct {
	inner Backstore
	mu    sync.Mutex
	undo  []undoRecord // writes since the last Sync, oldest first
	cut   bool
	stats PowerLossStats
}

// PowerLossStats counts what a PowerLoss saw, for campaign figures.
type PowerLossStats struct {
	Writes  int   // WriteAt and Unmap calls that completed
	Syncs   int   // Sync calls that completed
	Dropped int   // writes Cut undid
	Bytes   int64 // bytes Cut restored
}

type undoRecord struct {
	off int64
	old []byte
}

// NewPowerLoss wraps b. b's own durability is taken as the durable
// medium: the layer never calls b's Sync.
func NewPowerLoss(b Backstore) *PowerLoss { return &PowerLoss{inner: b} }

// Inner returns the wrapped backstore: after Cut it holds what survived.
func (p *PowerLoss) Inner() Backstore { return p.inner }

// Size implements Backstore.
func (p *PowerLoss) Size() int64 { return p.inner.Size() }

// Close implements Backstore; it does not close the inner backstore,
// which outlives the power cut.
func (p *PowerLoss) Close() error { return nil }

// ReadAt implements io.ReaderAt.
func (p *PowerLoss) ReadAt(b []byte, off int64) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return 0, ErrPowerCut
	}
	return p.inner.ReadAt(b, off)
}

// WriteAt implements io.WriterAt.
func (p *PowerLoss) WriteAt(b []byte, off int64) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return 0, ErrPowerCut
	}
	if err := p.record(off, int64(len(b))); err != nil {
		return 0, err
	}
	n, err := p.inner.WriteAt(b, off)
	p.stats.Writes++
	return n, err
}

// Unmap implements Unmapper (zeroing when the inner backstore cannot
// deallocate), undone by Cut like a write.
func (p *PowerLoss) Unmap(off, length int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return ErrPowerCut
	}
	if err := p.record(off, length); err != nil {
		return err
	}
	p.stats.Writes++
	if u, ok := p.inner.(Unmapper); ok {
		return u.Unmap(off, length)
	}
	return writeZeros(p.inner, off, length)
}

// record saves the bytes [off, off+n) hold now; p.mu is held.
func (p *PowerLoss) record(off, n int64) error {
	if err := checkRange(off, int(n), p.inner.Size()); err != nil {
		return err
	}
	old := make([]byte, n)
	if _, err := p.inner.ReadAt(old, off); err != nil {
		return err
	}
	p.undo = append(p.undo, undoRecord{off: off, old: old})
	return nil
}

// Sync implements Syncer: every write completed before the call becomes
// durable.
func (p *PowerLoss) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return ErrPowerCut
	}
	p.undo = p.undo[:0]
	p.stats.Syncs++
	return nil
}

// Cut simulates a power cut: every write not yet made durable is undone,
// newest first, and every later call fails with ErrPowerCut. It returns
// the first error restoring the inner backstore.
func (p *PowerLoss) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	var errs []error
	for i := len(p.undo) - 1; i >= 0; i-- {
		r := p.undo[i]
		if _, err := p.inner.WriteAt(r.old, r.off); err != nil {
			errs = append(errs, err)
		}
		p.stats.Dropped++
		p.stats.Bytes += int64(len(r.old))
	}
	p.undo = nil
	return errors.Join(errs...)
}

// Stats returns the counters so far.
func (p *PowerLoss) Stats() PowerLossStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}
