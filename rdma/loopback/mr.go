package loopback

import (
	"errors"

	"github.com/gosrp/gosrp/rdma"
)

const (
	iovaBase = 0x10000000 // fake IOVA of the first region
	pageSize = 4096
)

// memoryRegion implements rdma.MemoryRegion. The key and address fields are
// immutable; deregistered and invalidated are guarded by dev.mu.
type memoryRegion struct {
	dev        *Device
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	access     rdma.Access

	deregistered bool
	invalidated  bool // the RKey was invalidated by a SEND with Invalidate
}

var _ rdma.MemoryRegion = (*memoryRegion)(nil)

// Register registers buf (which may be empty) with the given rights. It
// fails for unknown access bits, AccessRemoteWrite without AccessLocalWrite
// (as ibv_reg_mr does), and with rdma.ErrClosed on a closed device. The keys
// are unique within the device: LKey is n<<8|0x4c and RKey n<<8|0x52 for the
// n-th region, so no LKey ever equals an RKey.
func (d *Device) Register(buf []byte, access rdma.Access) (rdma.MemoryRegion, error) {
	const all = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead | rdma.AccessPlaceAhead
	if access&^all != 0 {
		return nil, errors.New("loopback: register: unknown access bits")
	}
	if access&rdma.AccessRemoteWrite != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, errors.New("loopback: register: remote write requires local write")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	if d.nextMR >= 1<<24-1 {
		return nil, errors.New("loopback: register: out of memory keys")
	}
	d.nextMR++
	n := d.nextMR
	mr := &memoryRegion{
		dev:    d,
		buf:    buf,
		addr:   d.nextIOVA,
		lkey:   n<<8 | 0x4c,
		rkey:   n<<8 | 0x52,
		access: access,
	}
	// Leave at least one unmapped page between regions.
	d.nextIOVA += (uint64(len(buf))+pageSize-1)/pageSize*pageSize + pageSize
	d.rkeys[mr.rkey] = mr
	return mr, nil
}

func (m *memoryRegion) Bytes() []byte       { return m.buf }
func (m *memoryRegion) Addr() uint64        { return m.addr }
func (m *memoryRegion) LKey() uint32        { return m.lkey }
func (m *memoryRegion) RKey() uint32        { return m.rkey }
func (m *memoryRegion) Access() rdma.Access { return m.access }

// Deregister invalidates both keys. The second call returns
// rdma.ErrDeregistered.
func (m *memoryRegion) Deregister() error {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	if m.deregistered {
		return rdma.ErrDeregistered
	}
	m.deregistered = true
	delete(m.dev.rkeys, m.rkey)
	return nil
}

// usable reports whether the region may still be used as a local SGE.
func (m *memoryRegion) usable() bool {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	return !m.deregistered
}

// remoteCheck is the reason a remote access was refused.
type remoteCheck uint8

const (
	remoteOK remoteCheck = iota
	remoteBadKey
	remoteBounds
	remoteRights
)

// Codes from RFC 5040 §7.2 (Terminate: Layer RDMAP, Remote Protection Error).
var remoteCheckDetail = [...]struct {
	code   uint8
	detail string
}{
	remoteBadKey: {0x00, "invalid STag"},
	remoteBounds: {0x01, "base or bounds violation"},
	remoteRights: {0x02, "access rights violation"},
}

// lookupRemote finds the region a peer names with (addr, rkey) and checks that
// [addr, addr+n) lies inside it and that it grants want. On success it
// returns the region's bytes for that range. n must be > 0.
func (d *Device) lookupRemote(addr uint64, rkey uint32, n int, want rdma.Access) ([]byte, remoteCheck) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.rkeys[rkey]
	if m == nil || m.deregistered || m.invalidated {
		return nil, remoteBadKey
	}
	if m.access&want != want {
		return nil, remoteRights
	}
	if addr < m.addr {
		return nil, remoteBounds
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, remoteBounds
	}
	return m.buf[off : off+uint64(n)], remoteOK
}

// invalidate marks the region holding rkey invalidated; false when no valid
// region has that key.
func (d *Device) invalidate(rkey uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.rkeys[rkey]
	if m == nil || m.deregistered || m.invalidated {
		return false
	}
	m.invalidated = true
	return true
}
