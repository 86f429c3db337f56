//go:build verbs && cgo

package verbs

import (
	"container/list"
	"errors"
	"sync"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
)

// regionCacheBytes bounds the memory, in bytes, the region cache keeps
// registered (and so pinned: it counts against RLIMIT_MEMLOCK): 1 GiB, a
// RAM LUN's hot set on most targets. The least recently used regions not
// in use are deregistered while it holds more; regions in use count too
// but are never evicted, so the cache exceeds the bound only while more
// than it is in use.
const regionCacheBytes = 1 << 30

// regionCache is a Device's rdma.RegionCache. Regions are keyed by the
// end of the memory they cover (a slice's address plus its capacity): the
// views of one RAM backstore chunk all end where the chunk ends, so one
// registration serves them all, widened to a lower start when a view
// begins before it.
type regionCache struct {
	mu    sync.Mutex
	byEnd map[uintptr]*cachedRegion
	lru   list.List // of *cachedRegion, most recently used first; in-use ones too
	bytes int64     // registered bytes of the cached (not stale) regions
	max   int64     // bytes kept beyond those in use; 0: regionCacheBytes
}

type cachedRegion struct {
	mr         *mr
	start, end uintptr
	refs       int
	stale      bool // replaced or evicted: deregistered at its last release
	elem       *list.Element
}

// CachedRegion implements rdma.RegionCache.
func (d *Device) CachedRegion(buf []byte) (rdma.MemoryRegion, int, error) {
	if len(buf) == 0 {
		return nil, 0, rdma.ErrInvalidWR
	}
	start := uintptr(unsafe.Pointer(&buf[0]))
	end := start + uintptr(cap(buf))
	rc := &d.regions
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.byEnd == nil {
		rc.byEnd = map[uintptr]*cachedRegion{}
	}
	if e := rc.byEnd[end]; e != nil {
		if e.start <= start {
			if _, ok := e.mr.lkey(); ok {
				e.refs++
				rc.lru.MoveToFront(e.elem)
				return e.mr, int(start - e.start), nil
			}
		}
		// A view that starts lower, or a region the device deregistered
		// (Close): a new registration replaces it.
		rc.dropLocked(e)
	}
	// Local write: the region may be an RDMA READ's sink (a WRITE's
	// data-out placed into a RAM backstore). No remote rights.
	m, err := d.Register(buf[:cap(buf)], rdma.AccessLocalWrite)
	if err != nil && !errors.Is(err, rdma.ErrClosed) && rc.dropUnusedLocked() {
		// The pinned memory the cache keeps counts against the same
		// locked-memory limit (and adapter region count) as every other
		// registration: give it back rather than fail this one, and the
		// buffers and rings the device registers next.
		m, err = d.Register(buf[:cap(buf)], rdma.AccessLocalWrite)
	}
	if err != nil {
		return nil, 0, err
	}
	e := &cachedRegion{mr: m.(*mr), start: start, end: end, refs: 1}
	e.mr.cached = e
	e.elem = rc.lru.PushFront(e)
	rc.byEnd[end] = e
	rc.bytes += int64(end - start)
	rc.evictLocked()
	return e.mr, 0, nil
}

// ReleaseRegion implements rdma.RegionCache.
func (d *Device) ReleaseRegion(r rdma.MemoryRegion) {
	m, ok := r.(*mr)
	if !ok || m.cached == nil {
		return
	}
	rc := &d.regions
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := m.cached
	if e.refs--; e.refs == 0 && e.stale {
		e.mr.Deregister()
	}
}

// dropLocked takes e out of the cache; it is deregistered now if unused,
// else at its last release. rc.mu is held.
func (rc *regionCache) dropLocked(e *cachedRegion) {
	delete(rc.byEnd, e.end)
	rc.lru.Remove(e.elem)
	rc.bytes -= int64(e.end - e.start)
	e.stale = true
	if e.refs == 0 {
		e.mr.Deregister()
	}
}

// evictLocked drops the least recently used unused regions while the
// cache holds more than its limit. rc.mu is held.
func (rc *regionCache) evictLocked() {
	limit := rc.max
	if limit == 0 {
		limit = regionCacheBytes
	}
	for el := rc.lru.Back(); el != nil && rc.bytes > limit; {
		prev := el.Prev()
		if e := el.Value.(*cachedRegion); e.refs == 0 {
			rc.dropLocked(e)
		}
		el = prev
	}
}

// dropUnusedLocked drops every region not in use and reports whether
// there was one. rc.mu is held.
func (rc *regionCache) dropUnusedLocked() bool {
	dropped := false
	for el := rc.lru.Back(); el != nil; {
		prev := el.Prev()
		if e := el.Value.(*cachedRegion); e.refs == 0 {
			rc.dropLocked(e)
			dropped = true
		}
		el = prev
	}
	return dropped
}

// closeLocked forgets every region when the device closes (Close then
// deregisters them all), so the memory they cover is no longer kept
// referenced; a region still in use finds itself deregistered at its
// release. rc.mu is held.
func (rc *regionCache) closeLocked() {
	for el := rc.lru.Front(); el != nil; el = el.Next() {
		el.Value.(*cachedRegion).stale = true
	}
	rc.byEnd = nil
	rc.lru.Init()
	rc.bytes = 0
}
