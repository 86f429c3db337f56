//go:build verbs && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
)

// Built reports whether this binary includes the verbs provider.
const Built = true

// Devices lists the RDMA devices librdmacm knows, with their ports.
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list := C.rdma_get_devices(&n)
	if list == nil {
		return nil, errors.New("verbs: rdma_get_devices found no RDMA device")
	}
	defer C.rdma_free_devices(list)
	ctxs := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(ctxs))
	for _, ctx := range ctxs {
		info, _, err := queryDevice(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// DeviceFor names the RDMA device through which RDMA/CM reaches addr
// ("host:port"; rdma_resolve_addr with no source address), so that a Dial
// to addr can use a Device opened on it. timeout bounds the resolution.
func DeviceFor(addr string, timeout time.Duration) (string, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(host))
	defer C.free(unsafe.Pointer(port))
	ms := max(int(timeout/time.Millisecond), 1)
	var name [64]C.char
	if rc := C.gs_device_for(host, port, C.int(ms), &name[0], C.int(len(name))); rc != 0 {
		return "", fmt.Errorf("verbs: no RDMA device reaches %s: %w", addr, syscall.Errno(rc))
	}
	return C.GoString(&name[0]), nil
}

type limits struct {
	maxQPWR, maxSGE, maxRdAtom, maxCQE int
	maxSRQWR                           int // 0: no shared receive queues
}

func queryDevice(ctx *C.struct_ibv_context) (DeviceInfo, limits, error) {
	var guid C.uint64_t
	var ports, qpwr, sge, rd, cqe, srqwr C.int
	if rc := C.gs_query_device(ctx, &guid, &ports, &qpwr, &sge, &rd, &cqe, &srqwr); rc != 0 {
		return DeviceInfo{}, limits{}, fmt.Errorf("verbs: ibv_query_device: %w", syscall.Errno(rc))
	}
	info := DeviceInfo{
		Name: C.GoString(C.gs_dev_name(ctx)),
		// node_guid is big-endian (__be64) in ibv_device_attr.
		NodeGUID:  beToHost64(uint64(guid)),
		Transport: "InfiniBand",
	}
	if C.gs_dev_transport(ctx) == C.IBV_TRANSPORT_IWARP {
		info.Transport = "iWARP"
	}
	for p := 1; p <= int(ports); p++ {
		var link, state C.int
		if rc := C.gs_query_port(ctx, C.int(p), &link, &state); rc != 0 {
			return DeviceInfo{}, limits{}, fmt.Errorf("verbs: ibv_query_port %s/%d: %w", info.Name, p, syscall.Errno(rc))
		}
		pi := PortInfo{Port: p, LinkLayer: "InfiniBand", Active: state == C.IBV_PORT_ACTIVE}
		if link == C.IBV_LINK_LAYER_ETHERNET {
			pi.LinkLayer = "Ethernet"
		}
		var gid [16]byte
		if C.gs_query_gid(ctx, C.int(p), (*C.uint8_t)(unsafe.Pointer(&gid[0]))) == 0 {
			pi.GID0 = gid
		}
		info.Ports = append(info.Ports, pi)
	}
	return info, limits{int(qpwr), int(sge), int(rd), int(cqe), int(srqwr)}, nil
}

func beToHost64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = v
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// Device is a protection domain on one RDMA device plus an RDMA/CM event
// channel. It implements rdma.Device.
type Device struct {
	cfg  Config
	log  *slog.Logger
	info DeviceInfo
	lim  limits

	devList **C.struct_ibv_context // from rdma_get_devices; freed at Close
	ctx     *C.struct_ibv_context
	pd      *C.struct_ibv_pd
	ch      *C.struct_rdma_event_channel
	chFile  *os.File // dup of the event channel fd, for readiness only

	mu       sync.Mutex
	closed   bool
	handlers map[unsafe.Pointer]func(cmEvent)
	conns    map[*conn]struct{}
	lns      map[*listener]struct{}
	mrs      map[*mr]struct{}
	srqs     map[*srq]struct{}
	loopDone chan struct{}
	regions  regionCache
}

type cmEvent struct {
	id, listenID unsafe.Pointer
	typ          int
	status       int
	pd           []byte
	rr, idep     int
}

// Open opens the device named in cfg, allocates a protection domain and
// starts the RDMA/CM event loop.
func Open(cfg Config) (*Device, error) {
	if cfg.Port == 0 {
		cfg.Port = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var n C.int
	list := C.rdma_get_devices(&n)
	if list == nil || n == 0 {
		return nil, errors.New("verbs: no RDMA device found (is rdma-core installed and a device or rxe/siw link configured?)")
	}
	d := &Device{cfg: cfg, log: log, devList: list, handlers: map[unsafe.Pointer]func(cmEvent){},
		conns: map[*conn]struct{}{}, lns: map[*listener]struct{}{}, mrs: map[*mr]struct{}{},
		srqs: map[*srq]struct{}{}, loopDone: make(chan struct{})}
	var names []string
	for _, ctx := range unsafe.Slice(list, int(n)) {
		name := C.GoString(C.gs_dev_name(ctx))
		names = append(names, name)
		if d.ctx == nil && (cfg.DeviceName == "" || cfg.DeviceName == name) {
			d.ctx = ctx
		}
	}
	if d.ctx == nil {
		C.rdma_free_devices(list)
		return nil, fmt.Errorf("verbs: no RDMA device named %q (have %v)", cfg.DeviceName, names)
	}
	var err error
	if d.info, d.lim, err = queryDevice(d.ctx); err != nil {
		C.rdma_free_devices(list)
		return nil, err
	}
	if cfg.Port > len(d.info.Ports) {
		C.rdma_free_devices(list)
		return nil, fmt.Errorf("verbs: device %s has no port %d", d.info.Name, cfg.Port)
	}
	if d.pd = C.ibv_alloc_pd(d.ctx); d.pd == nil {
		C.rdma_free_devices(list)
		return nil, fmt.Errorf("verbs: ibv_alloc_pd on %s failed", d.info.Name)
	}
	if d.ch = C.rdma_create_event_channel(); d.ch == nil {
		C.ibv_dealloc_pd(d.pd)
		C.rdma_free_devices(list)
		return nil, errors.New("verbs: rdma_create_event_channel failed")
	}
	if d.chFile, err = pollFile(C.gs_cm_fd(d.ch), "rdma_cm"); err != nil {
		C.rdma_destroy_event_channel(d.ch)
		C.ibv_dealloc_pd(d.pd)
		C.rdma_free_devices(list)
		return nil, err
	}
	go d.eventLoop()
	return d, nil
}

// pollFile makes fd non-blocking and returns a dup of it that Go's poller can
// wait on (the original stays owned by the library that made it).
func pollFile(fd C.int, name string) (*os.File, error) {
	if rc := C.gs_nonblock(fd); rc != 0 {
		return nil, fmt.Errorf("verbs: %s fd: %w", name, syscall.Errno(rc))
	}
	nfd, err := syscall.Dup(int(fd))
	if err != nil {
		return nil, fmt.Errorf("verbs: dup %s fd: %w", name, err)
	}
	syscall.CloseOnExec(nfd)
	return os.NewFile(uintptr(nfd), name), nil
}

// waitReadable calls try until it reports done, sleeping on f's readiness in
// between. try returns (done, err); EAGAIN from C maps to done=false.
func waitReadable(f *os.File, try func() (bool, error)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	err = rc.Read(func(uintptr) bool {
		done, e := try()
		if e != nil {
			inner = e
			return true
		}
		return done
	})
	if inner != nil {
		return inner
	}
	return err
}

func (d *Device) eventLoop() {
	defer close(d.loopDone)
	for {
		var ev C.gs_event
		err := waitReadable(d.chFile, func() (bool, error) {
			rc := C.gs_cm_event(d.ch, &ev)
			if rc == C.EAGAIN {
				return false, nil
			}
			if rc != 0 {
				return true, syscall.Errno(rc)
			}
			return true, nil
		})
		if err != nil {
			return // channel closed (Device.Close) or broken
		}
		e := cmEvent{id: ev.id, listenID: ev.listen_id, typ: int(ev.event), status: int(ev.status),
			pd: C.GoBytes(unsafe.Pointer(&ev.pd[0]), ev.pd_len), rr: int(ev.responder_resources), idep: int(ev.initiator_depth)}
		key := e.id
		if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
			key = e.listenID
		}
		d.mu.Lock()
		h := d.handlers[key]
		d.mu.Unlock()
		if h != nil {
			h(e)
		} else {
			d.log.Debug("verbs: RDMA/CM event for unknown id", "event", cmEventName(e.typ))
		}
	}
}

func cmEventName(t int) string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t)))
}

func (d *Device) setHandler(id *C.struct_rdma_cm_id, h func(cmEvent)) {
	d.mu.Lock()
	if h == nil {
		delete(d.handlers, unsafe.Pointer(id))
	} else {
		d.handlers[unsafe.Pointer(id)] = h
	}
	d.mu.Unlock()
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// Name is the ibv device name.
func (d *Device) Name() string { return d.info.Name }

// MaxPrivateData is the RDMA/CM connect private data limit: 56 bytes on
// InfiniBand and RoCE (IB CM REQ private data less the RDMA/CM header),
// 512 less the MPA v2 IRD/ORD word on iWARP.
func (d *Device) MaxPrivateData() int {
	if d.info.Transport == "iWARP" {
		return 508
	}
	return 56
}

// Close closes listeners and connections, deregisters memory still
// registered and frees the protection domain.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	// Closed outside d.mu: closing takes them off the device.
	lns, conns := slices.Collect(maps.Keys(d.lns)), slices.Collect(maps.Keys(d.conns))
	d.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
		c.destroy()
	}
	d.mu.Lock()
	srqs := slices.Collect(maps.Keys(d.srqs))
	d.mu.Unlock()
	for _, s := range srqs {
		s.Close()
	}
	// Stop the event loop before freeing the channel it reads.
	d.chFile.Close()
	<-d.loopDone
	C.rdma_destroy_event_channel(d.ch)
	d.regions.mu.Lock()
	d.regions.closeLocked()
	d.regions.mu.Unlock()
	d.mu.Lock()
	for m := range d.mrs {
		m.deregLocked()
	}
	d.mu.Unlock()
	C.ibv_dealloc_pd(d.pd)
	C.rdma_free_devices(d.devList)
	return nil
}

var (
	_ rdma.Device      = (*Device)(nil)
	_ rdma.RegionCache = (*Device)(nil)
	_ rdma.Doorbeller  = (*conn)(nil)
	_ rdma.CQHook      = (*conn)(nil)
)
