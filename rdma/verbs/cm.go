//go:build verbs && cgo

package verbs

// #include "verbs.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
)

func splitHostPort(addr string) (*C.char, *C.char, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("verbs: address %q: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, nil, fmt.Errorf("verbs: address %q: bad port", addr)
	}
	return C.CString(host), C.CString(port), nil
}

// Listen binds an RDMA/CM listener (rdma_bind_addr + rdma_listen, backlog
// 128 like ib_srpt). Connect requests that arrive on another device are
// rejected.
func (d *Device) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(host))
	defer C.free(unsafe.Pointer(port))
	var id *C.struct_rdma_cm_id
	if C.rdma_create_id(d.ch, &id, nil, C.RDMA_PS_TCP) != 0 {
		return nil, errors.New("verbs: rdma_create_id failed")
	}
	l := &listener{d: d, id: id, reqs: make(chan *connReq, 128), done: make(chan struct{})}
	d.setHandler(id, l.event)
	if rc := C.gs_bind_listen(id, host, port, 128); rc != 0 {
		d.setHandler(id, nil)
		C.rdma_destroy_id(id)
		return nil, fmt.Errorf("verbs: listen on %s: %w", addr, syscall.Errno(rc))
	}
	// The bound address, with the port RDMA/CM chose when addr asked for 0.
	l.addr = sockAddr(C.rdma_get_local_addr(id))
	d.mu.Lock()
	d.lns[l] = struct{}{}
	d.mu.Unlock()
	return l, nil
}

type listener struct {
	d    *Device
	id   *C.struct_rdma_cm_id
	addr net.Addr
	reqs chan *connReq
	once sync.Once
	done chan struct{}
}

func (l *listener) event(e cmEvent) {
	if e.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST {
		return
	}
	id := (*C.struct_rdma_cm_id)(e.id)
	r := &connReq{d: l.d, id: id, pd: e.pd, rr: e.rr, idep: e.idep}
	select {
	case l.reqs <- r:
	default:
		l.d.log.Warn("verbs: accept backlog full, rejecting connect request")
		C.gs_reject(id, nil, 0)
		C.rdma_destroy_id(id)
	}
}

func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, rdma.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.d.setHandler(l.id, nil)
		C.rdma_destroy_id(l.id)
		l.d.mu.Lock()
		delete(l.d.lns, l)
		l.d.mu.Unlock()
		for {
			select {
			case r := <-l.reqs:
				r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

type connReq struct {
	d        *Device
	id       *C.struct_rdma_cm_id
	pd       []byte
	rr, idep int
	decided  bool
}

func (r *connReq) PrivateData() []byte  { return r.pd }
func (r *connReq) LocalAddr() net.Addr  { return sockAddr(C.rdma_get_local_addr(r.id)) }
func (r *connReq) RemoteAddr() net.Addr { return sockAddr(C.rdma_get_peer_addr(r.id)) }

func (r *connReq) Reject(pd []byte) error {
	if r.decided {
		return errors.New("verbs: connect request already decided")
	}
	if len(pd) > r.d.MaxPrivateData() {
		return rdma.ErrPrivateDataTooLong
	}
	r.decided = true
	var p unsafe.Pointer
	if len(pd) > 0 {
		p = C.CBytes(pd)
		defer C.free(p)
	}
	rc := C.gs_reject(r.id, p, C.int(len(pd)))
	C.rdma_destroy_id(r.id)
	if rc != 0 {
		return fmt.Errorf("verbs: rdma_reject: %w", syscall.Errno(rc))
	}
	return nil
}

func (r *connReq) Accept(ctx context.Context, cfg rdma.QPConfig, pd []byte) (rdma.Conn, error) {
	if r.decided {
		return nil, errors.New("verbs: connect request already decided")
	}
	r.decided = true
	if len(pd) > r.d.MaxPrivateData() {
		r.decided = false
		return nil, rdma.ErrPrivateDataTooLong
	}
	if C.gs_id_verbs(r.id) != r.d.ctx {
		C.gs_reject(r.id, nil, 0)
		C.rdma_destroy_id(r.id)
		return nil, fmt.Errorf("verbs: connect request arrived on another RDMA device than %s", r.d.info.Name)
	}
	c, err := r.d.newConn(r.id, cfg)
	if err != nil {
		C.gs_reject(r.id, nil, 0)
		C.rdma_destroy_id(r.id)
		return nil, err
	}
	// RDMA/CM reports a connect request's depths from the receiver's side
	// (rdma_accept(3)): responder_resources is the peer's initiator depth
	// (the RDMA READs it may have outstanding against us, our IRD), and
	// initiator_depth is the peer's responder resources (our ORD's bound).
	c.caps.IRD = pick(cfg.IRD, 4, r.rr, r.d.lim.maxRdAtom)
	c.caps.ORD = pick(cfg.ORD, 4, r.idep, r.d.lim.maxRdAtom)
	var p unsafe.Pointer
	if len(pd) > 0 {
		p = C.CBytes(pd)
		defer C.free(p)
	}
	if rc := C.gs_accept(r.id, p, C.int(len(pd)), C.int(c.caps.IRD), C.int(c.caps.ORD)); rc != 0 {
		c.destroy()
		return nil, fmt.Errorf("verbs: rdma_accept: %w", syscall.Errno(rc))
	}
	if _, err := c.waitEstablished(ctx); err != nil {
		c.Close()
		c.destroy()
		return nil, err
	}
	return c, nil
}

// pick returns v, or def when v is not positive, capped by every positive
// limit.
func pick(v, def int, limits ...int) int {
	if v <= 0 {
		v = def
	}
	for _, l := range limits {
		if l > 0 && l < v {
			v = l
		}
	}
	return v
}

// Dial resolves addr through RDMA/CM, creates the QP and connects with
// privateData (rdma_connect, retry and RNR retry counts 7).
func (d *Device) Dial(ctx context.Context, addr string, cfg rdma.QPConfig, privateData []byte) (rdma.Conn, []byte, error) {
	if len(privateData) > d.MaxPrivateData() {
		return nil, nil, rdma.ErrPrivateDataTooLong
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	defer C.free(unsafe.Pointer(host))
	defer C.free(unsafe.Pointer(port))
	var id *C.struct_rdma_cm_id
	if C.rdma_create_id(d.ch, &id, nil, C.RDMA_PS_TCP) != 0 {
		return nil, nil, errors.New("verbs: rdma_create_id failed")
	}
	evs := make(chan cmEvent, 8)
	d.setHandler(id, func(e cmEvent) { evs <- e })
	fail := func(err error) (rdma.Conn, []byte, error) {
		d.setHandler(id, nil)
		C.rdma_destroy_id(id)
		return nil, nil, err
	}
	wait := func(want int, what string) error {
		select {
		case e := <-evs:
			if e.typ != want {
				return fmt.Errorf("verbs: %s %s: %s (status %d)", what, addr, cmEventName(e.typ), e.status)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if rc := C.gs_resolve_addr(id, host, port, 5000); rc != 0 {
		return fail(fmt.Errorf("verbs: resolve %s: %w", addr, syscall.Errno(rc)))
	}
	if err := wait(C.RDMA_CM_EVENT_ADDR_RESOLVED, "resolve address"); err != nil {
		return fail(err)
	}
	if C.gs_id_verbs(id) != d.ctx {
		return fail(fmt.Errorf("verbs: %s is reached through another RDMA device than %s", addr, d.info.Name))
	}
	if C.rdma_resolve_route(id, 5000) != 0 {
		return fail(fmt.Errorf("verbs: rdma_resolve_route %s failed", addr))
	}
	if err := wait(C.RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve route"); err != nil {
		return fail(err)
	}
	d.setHandler(id, nil)
	c, err := d.newConn(id, cfg)
	if err != nil {
		return fail(err)
	}
	c.caps.IRD = pick(cfg.IRD, 4, d.lim.maxRdAtom)
	c.caps.ORD = pick(cfg.ORD, 4, d.lim.maxRdAtom)
	var p unsafe.Pointer
	if len(privateData) > 0 {
		p = C.CBytes(privateData)
		defer C.free(p)
	}
	if rc := C.gs_connect(id, p, C.int(len(privateData)), C.int(c.caps.IRD), C.int(c.caps.ORD)); rc != 0 {
		c.destroy()
		return nil, nil, fmt.Errorf("verbs: rdma_connect %s: %w", addr, syscall.Errno(rc))
	}
	reply, err := c.waitEstablished(ctx)
	if err != nil {
		c.Close()
		c.destroy()
		return nil, nil, err
	}
	return c, reply, nil
}

func sockAddr(sa *C.struct_sockaddr) net.Addr {
	if sa == nil {
		return nil
	}
	switch sa.sa_family {
	case syscall.AF_INET:
		in := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&in.Port))
		return &net.TCPAddr{IP: net.IP(in.Addr[:]).To16(), Port: int(p[0])<<8 | int(p[1])}
	case syscall.AF_INET6:
		in := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&in.Port))
		ip := make(net.IP, 16)
		copy(ip, in.Addr[:])
		return &net.TCPAddr{IP: ip, Port: int(p[0])<<8 | int(p[1])}
	}
	return nil
}
