package backstore

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// RAMChunkSize is the allocation unit of a RAM backstore in bytes. Chunks
// are allocated on first write; unwritten or unmapped chunks read as zeros.
const RAMChunkSize = 64 << 10

// RAMPageSize is the granularity, in bytes, at which a RAM backstore tracks
// which data was written and which was unmapped (AllocationStatus).
const RAMPageSize = 4 << 10

// ramChunk is one allocation unit's data. It holds nothing else: a chunk
// is a large object of its own span, so its data starts page-aligned (a
// 4 KiB block at a 4 KiB offset lies in one page), and what the walk reads
// about a chunk lies in the RAM's dense tables, not on a line of the
// chunk's own memory (an I/O at random touches only the lines it moves).
type ramChunk [RAMChunkSize]byte

// bytes is the chunk's memory, nil for a nil chunk. It does not load from
// the chunk (no nil check reads its first line).
func (c *ramChunk) bytes() []byte {
	if c == nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(c)), RAMChunkSize)
}

const ramLockStripes = 64

// RAM is a sparse in-memory backstore. A 1 GiB RAM backstore uses memory only
// for the 64 KiB chunks that were written. Data is lost on Close; it is
// "durable" in the sense of the process lifetime, so it needs no Syncer.
// Safe for concurrent use.
type RAM struct {
	mu     sync.RWMutex // guards the chunks and pages slice headers and size (resize)
	size   int64
	chunks []atomic.Pointer[ramChunk]
	// pages[i], guarded by chunk i's stripe lock: bit j set when page j
	// (RAMPageSize bytes) of chunk i holds data written since unmapped.
	pages  []uint16
	locks  [ramLockStripes]sync.RWMutex // per-chunk content locks, striped
	closed atomic.Bool
}

// NewRAM returns an empty RAM backstore of size bytes.
func NewRAM(size int64) *RAM {
	r := &RAM{}
	r.setSize(size)
	return r
}

func (r *RAM) setSize(size int64) {
	n := (size + RAMChunkSize - 1) / RAMChunkSize
	nc := make([]atomic.Pointer[ramChunk], n)
	np := make([]uint16, n)
	for i := range nc {
		if i < len(r.chunks) {
			nc[i].Store(r.chunks[i].Load())
			np[i] = r.pages[i]
		}
	}
	// A kept partial last chunk is replaced by a copy of its bytes before
	// the new end, so growth later reads zeros there while views of the
	// old chunk (View) keep the data they were given.
	if size < r.size && size%RAMChunkSize != 0 && n > 0 {
		if c := nc[n-1].Load(); c != nil {
			k := size % RAMChunkSize
			kept := (k + RAMPageSize - 1) / RAMPageSize
			var cc *ramChunk
			np[n-1] &= 1<<kept - 1
			if np[n-1] != 0 {
				// A chunk with no written page left is freed, as
				// Unmap frees it.
				cc = newRAMChunk()
				copy(cc[:k], c[:k])
			}
			nc[n-1].Store(cc)
		}
	}
	r.chunks, r.pages = nc, np
	r.size = size
}

// Size implements Backstore.
func (r *RAM) Size() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.size
}

// Close implements Backstore and frees the memory.
func (r *RAM) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed.Store(true)
	r.chunks, r.pages = nil, nil
	return nil
}

// Resize implements Resizer.
func (r *RAM) Resize(size int64) error {
	if size < 0 {
		return ErrOutOfRange
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	r.setSize(size)
	return nil
}

// NonBlocking implements NonBlocking: memory never waits.
func (r *RAM) NonBlocking() bool { return true }

// ReadAt implements io.ReaderAt.
func (r *RAM) ReadAt(p []byte, off int64) (int, error) {
	err := r.walk(off, int64(len(p)), false, func(_ int64, c []byte, co, m, done int64) {
		if c == nil {
			clear(p[done : done+m])
		} else {
			copy(p[done:done+m], c[co:])
		}
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// ramZeros is what View gives for chunks never written: never written to.
var ramZeros [RAMChunkSize]byte

// View implements Viewer: one slice per chunk the range touches (at most
// RAMChunkSize bytes each), of ramZeros for a chunk never written. A chunk
// freed by Unmap after View stays valid memory for the holder (Go's
// garbage collector keeps it). Each slice's capacity runs to the end of
// its chunk (or of ramZeros), so all views of one chunk share an end: a
// registration cache (rdma.RegionCache) registers the chunk once.
func (r *RAM) View(views [][]byte, off, length int64) ([][]byte, error) {
	err := r.walk(off, length, false, func(_ int64, c []byte, co, m, _ int64) {
		if c == nil {
			views = append(views, ramZeros[:m])
		} else {
			views = append(views, c[co:co+m])
		}
	})
	return views, err
}

// WriteView implements WriteViewer: one slice per chunk the range
// touches (at most RAMChunkSize bytes each); chunks never written are
// allocated (zeroed) and the range's pages marked written. As with View,
// each slice's capacity runs to the end of its chunk.
func (r *RAM) WriteView(views [][]byte, off, length int64) ([][]byte, error) {
	err := r.walk(off, length, true, func(ci int64, c []byte, co, m, _ int64) {
		if c == nil {
			c = r.allocChunk(ci)
		}
		views = append(views, c[co:co+m])
		r.markWritten(ci, co, m)
	})
	return views, err
}

// newRAMChunk allocates a zeroed chunk, its memory advised to be backed
// by transparent huge pages (adviseHugePages). Freed chunks are left to
// the garbage collector as before: views of them (View, WriteView) keep
// them alive.
func newRAMChunk() *ramChunk {
	c := new(ramChunk)
	adviseHugePages(uintptr(unsafe.Pointer(c)), RAMChunkSize)
	return c
}

// allocChunk allocates chunk ci (zeroed) and returns its memory. r.mu
// and the chunk's stripe lock (exclusive) must be held.
func (r *RAM) allocChunk(ci int64) []byte {
	c := newRAMChunk()
	r.chunks[ci].Store(c)
	return c.bytes()
}

// markWritten marks the pages of [co, co+m) of chunk ci as written. r.mu
// and the chunk's stripe lock (exclusive) must be held.
func (r *RAM) markWritten(ci, co, m int64) {
	for pg := co / RAMPageSize; pg <= (co+m-1)/RAMPageSize; pg++ {
		r.pages[ci] |= 1 << pg
	}
}

// WriteAt implements io.WriterAt.
func (r *RAM) WriteAt(p []byte, off int64) (int, error) {
	err := r.walk(off, int64(len(p)), true, func(ci int64, c []byte, co, m, done int64) {
		if c == nil {
			c = r.allocChunk(ci)
		}
		copy(c[co:co+m], p[done:])
		r.markWritten(ci, co, m)
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unmap implements Unmapper: the range is zeroed, the pages it wholly
// covers count as unmapped, and a chunk with no mapped page left is freed.
func (r *RAM) Unmap(off, length int64) error {
	return r.walk(off, length, true, func(ci int64, c []byte, co, m, _ int64) {
		if c == nil {
			return
		}
		clear(c[co : co+m])
		// Pages wholly inside the range are no longer written.
		for pg := (co + RAMPageSize - 1) / RAMPageSize; (pg+1)*RAMPageSize <= co+m; pg++ {
			r.pages[ci] &^= 1 << pg
		}
		if r.pages[ci] == 0 {
			r.chunks[ci].Store(nil)
		}
	})
}

// walk checks the device is open and [off, off+length) inside it, then
// calls fn for each chunk piece of the range: the chunk index, the chunk's
// memory (nil when never written), the piece's offset co and length m in the
// chunk, and how many bytes of the range came before it. fn runs under
// r.mu (shared) and the chunk's stripe lock (exclusive when excl).
func (r *RAM) walk(off, length int64, excl bool, fn func(ci int64, c []byte, co, m, done int64)) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed.Load() {
		return ErrClosed
	}
	if off < 0 || length < 0 || off > r.size || length > r.size-off {
		return ErrOutOfRange
	}
	for pos, end := off, off+length; pos < end; {
		ci, co := pos/RAMChunkSize, pos%RAMChunkSize
		m := min(end-pos, RAMChunkSize-co)
		l := &r.locks[ci%ramLockStripes]
		if excl {
			l.Lock()
		} else {
			l.RLock()
		}
		fn(ci, r.chunks[ci].Load().bytes(), co, m, pos-off)
		if excl {
			l.Unlock()
		} else {
			l.RUnlock()
		}
		pos += m
	}
	return nil
}

// AllocationStatus implements AllocationStatuser at RAMPageSize
// granularity: a page is mapped from its first write until it is wholly
// unmapped.
func (r *RAM) AllocationStatus(off, limit int64) (bool, int64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed.Load() {
		return false, 0, ErrClosed
	}
	if off < 0 || off >= r.size || limit <= 0 {
		return false, 0, ErrOutOfRange
	}
	end := min(r.size, off+limit)
	first := r.pageMapped(off / RAMPageSize)
	pos := (off/RAMPageSize + 1) * RAMPageSize
	for pos < end && r.pageMapped(pos/RAMPageSize) == first {
		pos += RAMPageSize
	}
	return first, min(pos, end) - off, nil
}

// pageMapped reports whether page pg holds written data. r.mu must be held.
func (r *RAM) pageMapped(pg int64) bool {
	ci := pg * RAMPageSize / RAMChunkSize
	l := &r.locks[ci%ramLockStripes]
	l.RLock()
	defer l.RUnlock()
	return r.chunks[ci].Load() != nil && r.pages[ci]&(1<<(pg%(RAMChunkSize/RAMPageSize))) != 0
}

// AllocatedBytes reports how many bytes of chunk memory are in use.
func (r *RAM) AllocatedBytes() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var n int64
	for i := range r.chunks {
		if r.chunks[i].Load() != nil {
			n += RAMChunkSize
		}
	}
	return n
}
