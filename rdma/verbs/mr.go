//go:build verbs && cgo

package verbs

// #include "verbs.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
)

// Register registers buf (ibv_reg_mr) and pins it until Deregister.
func (d *Device) Register(buf []byte, access rdma.Access) (rdma.MemoryRegion, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", rdma.ErrInvalidWR)
	}
	flags := C.int(0)
	if access&rdma.AccessLocalWrite != 0 {
		flags |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if access&rdma.AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_LOCAL_WRITE
	}
	if access&rdma.AccessRemoteRead != 0 {
		flags |= C.IBV_ACCESS_REMOTE_READ
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	m := &mr{d: d, buf: buf, access: access}
	m.pin.Pin(&buf[0])
	m.mr = C.gs_reg_mr(d.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), flags)
	if m.mr == nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("verbs: ibv_reg_mr of %d bytes failed (check `ulimit -l`)", len(buf))
	}
	m.lk = uint32(m.mr.lkey)
	m.live.Store(true)
	d.mrs[m] = struct{}{}
	return m, nil
}

type mr struct {
	d      *Device
	buf    []byte
	access rdma.Access
	pin    runtime.Pinner
	mr     *C.struct_ibv_mr // nil after Deregister; guarded by d.mu
	// lk is the local key, read on the data path without d.mu while
	// live says the region is registered.
	lk   uint32
	live atomic.Bool
	// cached is the region cache's entry of a region it registered
	// (Device.CachedRegion), nil for others.
	cached *cachedRegion
}

func (m *mr) Bytes() []byte       { return m.buf }
func (m *mr) Addr() uint64        { return uint64(uintptr(unsafe.Pointer(&m.buf[0]))) }
func (m *mr) Access() rdma.Access { return m.access }
func (m *mr) LKey() uint32 {
	k, _ := m.lkey()
	return k
}

// lkey returns the local key, or false once deregistered.
func (m *mr) lkey() (uint32, bool) {
	if !m.live.Load() {
		return 0, false
	}
	return m.lk, true
}
func (m *mr) RKey() uint32 {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.mr == nil {
		return 0
	}
	return uint32(m.mr.rkey)
}

func (m *mr) Deregister() error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	return m.deregLocked()
}

func (m *mr) deregLocked() error {
	if m.mr == nil {
		return rdma.ErrDeregistered
	}
	m.live.Store(false)
	rc := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	m.pin.Unpin()
	delete(m.d.mrs, m)
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_dereg_mr: %w", syscall.Errno(rc))
	}
	return nil
}

func (c *conn) sge(s rdma.SGE) (C.struct_ibv_sge, error) { return c.d.sge(s) }

// sge converts s into an ibv_sge of a region registered on d.
func (d *Device) sge(s rdma.SGE) (C.struct_ibv_sge, error) {
	m, ok := s.MR.(*mr)
	if !ok || m.d != d {
		return C.struct_ibv_sge{}, fmt.Errorf("%w: SGE memory region not registered on %s", rdma.ErrInvalidWR, d.info.Name)
	}
	if s.Bytes() == nil {
		return C.struct_ibv_sge{}, fmt.Errorf("%w: SGE [%d,+%d) outside its %d-byte region", rdma.ErrInvalidWR, s.Offset, s.Length, len(m.buf))
	}
	lkey, ok := m.lkey()
	if !ok {
		return C.struct_ibv_sge{}, fmt.Errorf("%w: %w", rdma.ErrInvalidWR, rdma.ErrDeregistered)
	}
	return C.struct_ibv_sge{addr: C.uint64_t(m.Addr() + uint64(s.Offset)), length: C.uint32_t(s.Length), lkey: C.uint32_t(lkey)}, nil
}

// recvSGE converts a receive work request's buffer.
func (d *Device) recvSGE(w rdma.RecvWR) (C.struct_ibv_sge, error) {
	if m, ok := w.Local.MR.(*mr); ok && m.access&rdma.AccessLocalWrite == 0 {
		return C.struct_ibv_sge{}, fmt.Errorf("%w: receive buffer without local write access", rdma.ErrInvalidWR)
	}
	return d.sge(w.Local)
}
