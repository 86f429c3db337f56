//go:build verbs && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <netdb.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// gs_wr is a flat send work request: no pointers, so Go memory may hold it.
typedef struct {
	uint64_t id;
	uint32_t op;     // 0 send, 1 send with invalidate, 2 RDMA write, 3 RDMA read
	uint32_t flags;  // ibv_send_flags
	uint64_t raddr;
	uint32_t rkey;
	uint32_t inv;
	uint32_t nsge;
	uint32_t sge_off;
} gs_wr;

// gs_wc is a flat completion.
typedef struct {
	uint64_t id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t flags;
	uint32_t inv;
	uint32_t vendor_err;
} gs_wc;

#define GS_PD_MAX 256

// gs_event is a copied RDMA/CM event (the event itself is acked at once).
typedef struct {
	void *id;
	void *listen_id;
	int event;
	int status;
	uint8_t pd[GS_PD_MAX];
	int pd_len;
	int responder_resources;
	int initiator_depth;
} gs_event;

static int gs_post_send(struct ibv_qp *qp, gs_wr *w, int n, struct ibv_sge *sges, int *posted) {
	struct ibv_send_wr wrs[64];
	struct ibv_send_wr *bad = NULL;
	int i, rc;
	if (n <= 0 || n > 64) return EINVAL;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		wrs[i].wr_id = w[i].id;
		wrs[i].num_sge = w[i].nsge;
		wrs[i].sg_list = w[i].nsge ? &sges[w[i].sge_off] : NULL;
		wrs[i].send_flags = w[i].flags;
		switch (w[i].op) {
		case 0: wrs[i].opcode = IBV_WR_SEND; break;
		case 1: wrs[i].opcode = IBV_WR_SEND_WITH_INV; wrs[i].invalidate_rkey = w[i].inv; break;
		case 2: wrs[i].opcode = IBV_WR_RDMA_WRITE; break;
		default: wrs[i].opcode = IBV_WR_RDMA_READ; break;
		}
		if (w[i].op >= 2) {
			wrs[i].wr.rdma.remote_addr = w[i].raddr;
			wrs[i].wr.rdma.rkey = w[i].rkey;
		}
		wrs[i].next = (i + 1 < n) ? &wrs[i + 1] : NULL;
	}
	rc = ibv_post_send(qp, wrs, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wrs) : 0);
	return rc;
}

// gs_post_recv posts n one-SGE receives to qp, or to srq when qp is NULL.
static int gs_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t *ids, struct ibv_sge *sges, int n, int *posted) {
	struct ibv_recv_wr wrs[64];
	struct ibv_recv_wr *bad = NULL;
	int i, rc;
	if (n <= 0 || n > 64) return EINVAL;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		wrs[i].wr_id = ids[i];
		wrs[i].sg_list = &sges[i];
		wrs[i].num_sge = 1;
		wrs[i].next = (i + 1 < n) ? &wrs[i + 1] : NULL;
	}
	rc = qp ? ibv_post_recv(qp, wrs, &bad) : ibv_post_srq_recv(srq, wrs, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wrs) : 0);
	return rc;
}

static int gs_poll(struct ibv_cq *cq, gs_wc *out, int n) {
	struct ibv_wc wc[64];
	int i, got;
	if (n > 64) n = 64;
	got = ibv_poll_cq(cq, n, wc);
	for (i = 0; i < got; i++) {
		out[i].id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].flags = wc[i].wc_flags;
		out[i].inv = wc[i].invalidated_rkey;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

static int gs_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// gs_cq_event takes one completion channel event without blocking:
// 0 = got one (acked), EAGAIN = none, else errno.
static int gs_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq; void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx) != 0) return errno;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static int gs_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return errno;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return errno;
	return 0;
}

// gs_cm_event takes one RDMA/CM event without blocking, copies it and acks it.
static int gs_cm_event(struct rdma_event_channel *ch, gs_event *out) {
	struct rdma_cm_event *ev;
	int n;
	if (rdma_get_cm_event(ch, &ev) != 0) return errno;
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->event = ev->event;
	out->status = ev->status;
	out->pd_len = 0;
	out->responder_resources = 0;
	out->initiator_depth = 0;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
	    ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		n = ev->param.conn.private_data_len;
		if (n > GS_PD_MAX) n = GS_PD_MAX;
		if (ev->param.conn.private_data && n > 0) memcpy(out->pd, ev->param.conn.private_data, n);
		else n = 0;
		out->pd_len = n;
		out->responder_resources = ev->param.conn.responder_resources;
		out->initiator_depth = ev->param.conn.initiator_depth;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int gs_addr(const char *host, const char *port, int passive, struct sockaddr_storage *ss) {
	struct addrinfo hints, *res;
	int rc;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rc != 0) return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static int gs_bind_listen(struct rdma_cm_id *id, const char *host, const char *port, int backlog) {
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (gs_addr(host, port, 1, &ss) != 0) return EINVAL;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss) != 0) return errno;
	if (rdma_listen(id, backlog) != 0) return errno;
	return 0;
}

static int gs_resolve_addr(struct rdma_cm_id *id, const char *host, const char *port, int timeout_ms) {
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (gs_addr(host, port, 0, &ss) != 0) return EINVAL;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, timeout_ms) != 0) return errno;
	return 0;
}

// gs_create_qp creates the RC QP of id; with srq its receives come from
// that shared receive queue and recv is ignored.
static int gs_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq,
                        int send, int recv, int sge, int *osend, int *orecv, int *osge, int *oinline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = send;
	a.cap.max_send_sge = sge;
	if (srq) {
		a.srq = srq;
	} else {
		a.cap.max_recv_wr = recv;
		a.cap.max_recv_sge = 1;
	}
	a.sq_sig_all = 0;
	if (rdma_create_qp(id, pd, &a) != 0) return errno;
	*osend = a.cap.max_send_wr;
	*orecv = a.cap.max_recv_wr;
	*osge = a.cap.max_send_sge;
	*oinline = a.cap.max_inline_data;
	return 0;
}

static int gs_accept(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int idep) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = pd;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = idep;
	p.rnr_retry_count = 7;
	if (rdma_accept(id, &p) != 0) return errno;
	return 0;
}

static int gs_connect(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int idep) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = pd;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = idep;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (rdma_connect(id, &p) != 0) return errno;
	return 0;
}

static int gs_reject(struct rdma_cm_id *id, void *pd, int pdlen) {
	if (rdma_reject(id, pd, pdlen) != 0) return errno;
	return 0;
}

static struct ibv_context *gs_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static int gs_port_num(struct rdma_cm_id *id) { return id->port_num; }

static int gs_query_port(struct ibv_context *ctx, int port, int *link, int *state) {
	struct ibv_port_attr a;
	if (ibv_query_port(ctx, port, &a) != 0) return errno;
	*link = a.link_layer;
	*state = a.state;
	return 0;
}

static const char *gs_dev_name(struct ibv_context *ctx) { return ibv_get_device_name(ctx->device); }
static int gs_dev_transport(struct ibv_context *ctx) { return ctx->device->transport_type; }

static int gs_query_device(struct ibv_context *ctx, uint64_t *guid, int *phys_ports, int *max_qp_wr, int *max_sge, int *max_rd_atom, int *max_cqe, int *max_srq_wr) {
	struct ibv_device_attr a;
	if (ibv_query_device(ctx, &a) != 0) return errno;
	*max_srq_wr = a.max_srq ? a.max_srq_wr : 0;
	*guid = a.node_guid;
	*phys_ports = a.phys_port_cnt;
	*max_qp_wr = a.max_qp_wr;
	*max_sge = a.max_sge;
	*max_rd_atom = a.max_qp_rd_atom;
	*max_cqe = a.max_cqe;
	return 0;
}

static int gs_query_gid(struct ibv_context *ctx, int port, uint8_t *out) {
	union ibv_gid g;
	if (ibv_query_gid(ctx, port, 0, &g) != 0) return errno;
	memcpy(out, g.raw, 16);
	return 0;
}

static struct ibv_srq *gs_create_srq(struct ibv_pd *pd, int max_wr) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = 1;
	return ibv_create_srq(pd, &a);
}

static struct ibv_mr *gs_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}
static int gs_comp_fd(struct ibv_comp_channel *ch) { return ch->fd; }
static int gs_cm_fd(struct rdma_event_channel *ch) { return ch->fd; }
static int gs_query_rd(struct ibv_qp *qp, int *ord, int *ird) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &ia) != 0) return errno;
	*ord = a.max_rd_atomic;
	*ird = a.max_dest_rd_atomic;
	return 0;
}
static struct ibv_qp *gs_id_qp(struct rdma_cm_id *id) { return id->qp; }

// gs_device_for resolves host:port on a private event channel and copies
// the name of the device RDMA/CM bound the id to.
static int gs_device_for(const char *host, const char *port, int timeout_ms, char *name, int len) {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	int rc;
	ch = rdma_create_event_channel();
	if (!ch) return errno ? errno : ENOMEM;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) { rc = errno; rdma_destroy_event_channel(ch); return rc; }
	rc = gs_resolve_addr(id, host, port, timeout_ms);
	if (rc == 0) {
		if (rdma_get_cm_event(ch, &ev) != 0) rc = errno;
		else {
			if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED || !id->verbs) rc = ev->status ? -ev->status : EHOSTUNREACH;
			rdma_ack_cm_event(ev);
		}
	}
	if (rc == 0) {
		strncpy(name, ibv_get_device_name(id->verbs->device), len - 1);
		name[len - 1] = 0;
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return rc;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gosrp/gosrp/rdma"
)

// Built reports whether this binary includes the verbs provider.
const Built = true

const recvBit = uint64(1) << 63

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
	d.mrs[m] = struct{}{}
	return m, nil
}

type mr struct {
	d      *Device
	buf    []byte
	access rdma.Access
	pin    runtime.Pinner
	mr     *C.struct_ibv_mr // nil after Deregister
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
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.mr == nil {
		return 0, false
	}
	return uint32(m.mr.lkey), true
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
	rc := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	m.pin.Unpin()
	delete(m.d.mrs, m)
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_dereg_mr: %w", syscall.Errno(rc))
	}
	return nil
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
	lns := make([]*listener, 0, len(d.lns))
	for l := range d.lns {
		lns = append(lns, l)
	}
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
		c.destroy()
	}
	d.mu.Lock()
	srqs := make([]*srq, 0, len(d.srqs))
	for s := range d.srqs {
		srqs = append(srqs, s)
	}
	d.mu.Unlock()
	for _, s := range srqs {
		s.Close()
	}
	// Stop the event loop before freeing the channel it reads.
	d.chFile.Close()
	<-d.loopDone
	C.rdma_destroy_event_channel(d.ch)
	d.mu.Lock()
	for m := range d.mrs {
		m.deregLocked()
	}
	d.mu.Unlock()
	C.ibv_dealloc_pd(d.pd)
	C.rdma_free_devices(d.devList)
	return nil
}

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

// conn is one RC QP on an rdma_cm_id with its own CQ and completion channel.
type conn struct {
	d     *Device
	id    *C.struct_rdma_cm_id
	qp    *C.struct_ibv_qp
	cq    *C.struct_ibv_cq
	cch   *C.struct_ibv_comp_channel
	cchF  *os.File
	caps  rdma.Caps
	local net.Addr
	peer  net.Addr
	srq   *srq // where its receives come from, or nil

	cmEvents chan cmEvent

	mu           sync.Mutex
	sendSeq      uint64 // next send sequence number
	sendDone     uint64 // every send sequence below this has completed
	sendIDs      []uint64
	sendOps      []rdma.Opcode
	reads        int // RDMA READs posted and not yet completed (against ORD)
	recvSeq      uint64
	recvDone     uint64
	recvIDs      []uint64
	closing      bool
	disconnected bool // rdma_disconnect called
	destroyed    bool
	err          error
	done         chan struct{}
	doneOnce     sync.Once
	wcs          [64]C.gs_wc
	sges         []C.struct_ibv_sge
	wrs          []C.gs_wr
}

func (d *Device) newConn(id *C.struct_rdma_cm_id, cfg rdma.QPConfig) (*conn, error) {
	send := pick(cfg.SendDepth, 256, d.lim.maxQPWR)
	recv := pick(cfg.RecvDepth, 256, d.lim.maxQPWR)
	sge := pick(cfg.MaxSGE, 16, d.lim.maxSGE)
	c := &conn{d: d, id: id, cmEvents: make(chan cmEvent, 8), done: make(chan struct{})}
	var csrq *C.struct_ibv_srq
	if cfg.SRQ != nil {
		s, ok := cfg.SRQ.(*srq)
		if !ok || s == nil || s.d != d {
			return nil, fmt.Errorf("verbs: QPConfig.SRQ is not a shared receive queue of %s", d.info.Name)
		}
		if !s.attach(c) {
			return nil, fmt.Errorf("verbs: shared receive queue: %w", rdma.ErrClosed)
		}
		// The CQ takes this QP's receive completions too: at most the
		// SRQ's depth are outstanding.
		c.srq, csrq, recv = s, s.s, s.depth
	}
	undo := func() {
		if c.srq != nil {
			c.srq.detach(c)
		}
	}
	if c.cch = C.ibv_create_comp_channel(d.ctx); c.cch == nil {
		undo()
		return nil, errors.New("verbs: ibv_create_comp_channel failed")
	}
	if c.cq = C.ibv_create_cq(d.ctx, C.int(send+recv), nil, c.cch, 0); c.cq == nil {
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, fmt.Errorf("verbs: ibv_create_cq of %d entries failed", send+recv)
	}
	var osend, orecv, osge, oinl C.int
	if rc := C.gs_create_qp(id, d.pd, c.cq, csrq, C.int(send), C.int(recv), C.int(sge), &osend, &orecv, &osge, &oinl); rc != 0 {
		C.ibv_destroy_cq(c.cq)
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, fmt.Errorf("verbs: rdma_create_qp (send %d, recv %d, sge %d, SRQ %v): %w", send, recv, sge, c.srq != nil, syscall.Errno(rc))
	}
	c.qp = C.gs_id_qp(id)
	c.caps = rdma.Caps{SendDepth: send, RecvDepth: recv, MaxSGE: int(osge), MaxInline: int(oinl)}
	c.sendIDs = make([]uint64, send)
	c.sendOps = make([]rdma.Opcode, send)
	if c.srq == nil {
		c.recvIDs = make([]uint64, recv)
	}
	var err error
	if c.cchF, err = pollFile(C.gs_comp_fd(c.cch), "ibv_comp_channel"); err != nil {
		C.rdma_destroy_qp(id)
		C.ibv_destroy_cq(c.cq)
		C.ibv_destroy_comp_channel(c.cch)
		undo()
		return nil, err
	}
	C.gs_req_notify(c.cq)
	d.mu.Lock()
	d.conns[c] = struct{}{}
	d.mu.Unlock()
	d.setHandler(id, c.event)
	return c, nil
}

func (c *conn) event(e cmEvent) {
	switch e.typ {
	case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL, C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
		c.fail(fmt.Errorf("verbs: %s", cmEventName(e.typ)))
	}
	select {
	case c.cmEvents <- e:
	default:
	}
}

func (c *conn) waitEstablished(ctx context.Context) ([]byte, error) {
	for {
		select {
		case e := <-c.cmEvents:
			switch e.typ {
			case C.RDMA_CM_EVENT_ESTABLISHED:
				c.local = sockAddr(C.rdma_get_local_addr(c.id))
				c.peer = sockAddr(C.rdma_get_peer_addr(c.id))
				// RDMA/CM programmed the QP with the negotiated depths.
				var ord, ird C.int
				if C.gs_query_rd(c.qp, &ord, &ird) == 0 {
					if ord > 0 {
						c.caps.ORD = int(ord)
					}
					if ird > 0 {
						c.caps.IRD = int(ird)
					}
				}
				return e.pd, nil
			case C.RDMA_CM_EVENT_REJECTED:
				return nil, &rdma.RejectError{PrivateData: e.pd, Reason: fmt.Sprintf("RDMA/CM reject status %d", e.status)}
			default:
				return nil, fmt.Errorf("verbs: connection not established: %s (status %d)", cmEventName(e.typ), e.status)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fail moves the connection down: the QP goes to the error state so that
// outstanding work flushes, Done closes and Poll is woken.
func (c *conn) fail(err error) {
	c.mu.Lock()
	c.closing = true
	if c.err == nil {
		c.err = err
	}
	// Under c.mu, so that destroy cannot free the cm_id in between (the
	// RDMA/CM event loop calls fail for DISCONNECTED while Poll may be
	// destroying the drained connection).
	if !c.disconnected && !c.destroyed {
		c.disconnected = true
		C.rdma_disconnect(c.id)
	}
	c.mu.Unlock()
	c.doneOnce.Do(func() { close(c.done) })
	c.cchF.SetReadDeadline(time.Unix(1, 0))
}

func (c *conn) Close() error {
	c.fail(rdma.ErrClosed)
	return nil
}

// destroy frees the QP, CQ, channel and cm_id. Called once drained (from
// Poll) or at Device.Close.
func (c *conn) destroy() {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return
	}
	c.destroyed = true
	c.closing = true
	c.mu.Unlock()
	c.doneOnce.Do(func() { close(c.done) })
	c.d.setHandler(c.id, nil)
	c.cchF.Close()
	C.rdma_destroy_qp(c.id)
	if c.srq != nil {
		c.srq.detach(c)
	}
	C.ibv_destroy_cq(c.cq)
	C.ibv_destroy_comp_channel(c.cch)
	C.rdma_destroy_id(c.id)
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
}

func (c *conn) Caps() rdma.Caps       { return c.caps }
func (c *conn) LocalAddr() net.Addr   { return c.local }
func (c *conn) RemoteAddr() net.Addr  { return c.peer }
func (c *conn) Done() <-chan struct{} { return c.done }
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
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

// maxChunk is how many work requests one call into C posts: the size of the
// ibv_*_wr arrays gs_post_send and gs_post_recv build on their stack.
const maxChunk = 64

// inChunks hands wrs to post in order, maxChunk at a time, and stops at the
// first error (the chunks before it stay posted, as does whatever post
// posted of the failing chunk).
func inChunks[T any](wrs []T, post func([]T) error) error {
	for len(wrs) > 0 {
		n := min(len(wrs), maxChunk)
		if err := post(wrs[:n]); err != nil {
			return err
		}
		wrs = wrs[n:]
	}
	return nil
}

func (c *conn) PostSend(wrs ...rdma.SendWR) error { return inChunks(wrs, c.postSend) }

func (c *conn) postSend(wrs []rdma.SendWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return rdma.ErrClosed
	}
	// Post what fits; the rest fails with ErrQueueFull.
	room := len(c.sendIDs) - int(c.sendSeq-c.sendDone)
	reads := c.reads
	full := false
	for i, w := range wrs {
		if i >= room {
			full = true
		} else if w.Op == rdma.OpRDMARead {
			if reads >= c.caps.ORD {
				full = true
			}
			reads++
		}
		if full {
			wrs = wrs[:i]
			break
		}
	}
	if len(wrs) == 0 {
		return rdma.ErrQueueFull
	}
	c.wrs = c.wrs[:0]
	c.sges = c.sges[:0]
	for i, w := range wrs {
		if len(w.Local) > c.caps.MaxSGE {
			return fmt.Errorf("%w: %d SGEs, QP allows %d", rdma.ErrInvalidWR, len(w.Local), c.caps.MaxSGE)
		}
		g := C.gs_wr{id: C.uint64_t(c.sendSeq + uint64(i)), nsge: C.uint32_t(len(w.Local)), sge_off: C.uint32_t(len(c.sges))}
		switch w.Op {
		case rdma.OpSend:
			g.op = 0
		case rdma.OpSendInvalidate:
			g.op, g.inv = 1, C.uint32_t(w.InvalidateRKey)
		case rdma.OpRDMAWrite:
			g.op = 2
		case rdma.OpRDMARead:
			g.op = 3
		default:
			return fmt.Errorf("%w: opcode %v", rdma.ErrInvalidWR, w.Op)
		}
		if g.op >= 2 {
			g.raddr, g.rkey = C.uint64_t(w.Remote.Addr), C.uint32_t(w.Remote.RKey)
		}
		if w.Signaled {
			g.flags |= C.IBV_SEND_SIGNALED
		}
		if w.Solicited {
			g.flags |= C.IBV_SEND_SOLICITED
		}
		for _, s := range w.Local {
			if m, ok := s.MR.(*mr); ok && w.Op == rdma.OpRDMARead && m.access&(rdma.AccessLocalWrite|rdma.AccessRemoteWrite) == 0 {
				return fmt.Errorf("%w: RDMA READ into a region without local write access", rdma.ErrInvalidWR)
			}
			cs, err := c.sge(s)
			if err != nil {
				return err
			}
			c.sges = append(c.sges, cs)
		}
		c.wrs = append(c.wrs, g)
	}
	var sgp *C.struct_ibv_sge
	if len(c.sges) > 0 {
		sgp = &c.sges[0]
	}
	var posted C.int
	rc := C.gs_post_send(c.qp, &c.wrs[0], C.int(len(c.wrs)), sgp, &posted)
	for i := 0; i < int(posted); i++ {
		slot := (c.sendSeq + uint64(i)) % uint64(len(c.sendIDs))
		c.sendIDs[slot], c.sendOps[slot] = wrs[i].ID, wrs[i].Op
		if wrs[i].Op == rdma.OpRDMARead {
			c.reads++
		}
	}
	c.sendSeq += uint64(posted)
	if rc != 0 {
		if rc == C.ENOMEM {
			return rdma.ErrQueueFull
		}
		return fmt.Errorf("verbs: ibv_post_send: %w", syscall.Errno(rc))
	}
	if full {
		return rdma.ErrQueueFull
	}
	return nil
}

func (c *conn) PostRecv(wrs ...rdma.RecvWR) error {
	if c.srq != nil && len(wrs) > 0 {
		return fmt.Errorf("%w: the queue pair receives through a shared receive queue", rdma.ErrInvalidWR)
	}
	return inChunks(wrs, c.postRecv)
}

func (c *conn) postRecv(wrs []rdma.RecvWR) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return rdma.ErrClosed
	}
	if int(c.recvSeq-c.recvDone)+len(wrs) > len(c.recvIDs) {
		return rdma.ErrQueueFull
	}
	var ids [maxChunk]C.uint64_t
	var sges [maxChunk]C.struct_ibv_sge
	for i, w := range wrs {
		s, err := c.d.recvSGE(w)
		if err != nil {
			return err
		}
		ids[i], sges[i] = C.uint64_t((c.recvSeq+uint64(i))|recvBit), s
	}
	var posted C.int
	rc := C.gs_post_recv(c.qp, nil, &ids[0], &sges[0], C.int(len(wrs)), &posted)
	for i := 0; i < int(posted); i++ {
		c.recvIDs[(c.recvSeq+uint64(i))%uint64(len(c.recvIDs))] = wrs[i].ID
	}
	c.recvSeq += uint64(posted)
	if rc != 0 {
		if rc == C.ENOMEM {
			return rdma.ErrQueueFull
		}
		return fmt.Errorf("verbs: ibv_post_recv: %w", syscall.Errno(rc))
	}
	return nil
}

// recvSGE converts a receive work request's buffer.
func (d *Device) recvSGE(w rdma.RecvWR) (C.struct_ibv_sge, error) {
	if m, ok := w.Local.MR.(*mr); ok && m.access&rdma.AccessLocalWrite == 0 {
		return C.struct_ibv_sge{}, fmt.Errorf("%w: receive buffer without local write access", rdma.ErrInvalidWR)
	}
	return d.sge(w.Local)
}

var wcStatus = map[C.uint32_t]rdma.Status{
	C.IBV_WC_SUCCESS:            rdma.StatusSuccess,
	C.IBV_WC_LOC_LEN_ERR:        rdma.StatusLocalLength,
	C.IBV_WC_LOC_QP_OP_ERR:      rdma.StatusLocalQPOperation,
	C.IBV_WC_LOC_PROT_ERR:       rdma.StatusLocalProtection,
	C.IBV_WC_WR_FLUSH_ERR:       rdma.StatusFlushed,
	C.IBV_WC_REM_INV_REQ_ERR:    rdma.StatusRemoteInvalidRequest,
	C.IBV_WC_REM_ACCESS_ERR:     rdma.StatusRemoteAccess,
	C.IBV_WC_REM_OP_ERR:         rdma.StatusRemoteOperation,
	C.IBV_WC_RETRY_EXC_ERR:      rdma.StatusRetryExceeded,
	C.IBV_WC_RNR_RETRY_EXC_ERR:  rdma.StatusRNRRetryExceeded,
	C.IBV_WC_FATAL_ERR:          rdma.StatusFatal,
	C.IBV_WC_GENERAL_ERR:        rdma.StatusFatal,
	C.IBV_WC_LOC_ACCESS_ERR:     rdma.StatusLocalProtection,
	C.IBV_WC_BAD_RESP_ERR:       rdma.StatusRemoteOperation,
	C.IBV_WC_REM_ABORT_ERR:      rdma.StatusRemoteOperation,
	C.IBV_WC_RESP_TIMEOUT_ERR:   rdma.StatusRetryExceeded,
	C.IBV_WC_INV_EECN_ERR:       rdma.StatusFatal,
	C.IBV_WC_INV_EEC_STATE_ERR:  rdma.StatusFatal,
	C.IBV_WC_LOC_EEC_OP_ERR:     rdma.StatusFatal,
	C.IBV_WC_LOC_RDD_VIOL_ERR:   rdma.StatusFatal,
	C.IBV_WC_REM_INV_RD_REQ_ERR: rdma.StatusRemoteInvalidRequest,
	C.IBV_WC_MW_BIND_ERR:        rdma.StatusLocalProtection,
}

// Poll returns completions; it sleeps on the completion channel (or spins
// with Config.BusyPoll) when there are none. After the connection went down
// and every outstanding work request has completed, it frees the QP and
// returns rdma.ErrClosed.
func (c *conn) Poll(ctx context.Context, out []rdma.Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	stop := context.AfterFunc(ctx, func() { c.cchF.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		n, drained, err := c.pollOnce(out)
		if n > 0 || err != nil {
			return n, err
		}
		if drained {
			c.destroy()
			return 0, rdma.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if c.d.cfg.BusyPoll {
			runtime.Gosched()
			continue
		}
		c.mu.Lock()
		if c.destroyed {
			c.mu.Unlock()
			return 0, rdma.ErrClosed
		}
		C.gs_req_notify(c.cq)
		c.mu.Unlock()
		// Completions that arrived before the re-arm raise no event: look again.
		if n, drained, err := c.pollOnce(out); n > 0 || err != nil || drained {
			if drained && n == 0 {
				c.destroy()
				return 0, rdma.ErrClosed
			}
			return n, err
		}
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if !closing {
			c.cchF.SetReadDeadline(time.Time{})
			if ctx.Err() != nil { // AfterFunc may have fired before the reset
				return 0, ctx.Err()
			}
		}
		werr := waitReadable(c.cchF, func() (bool, error) {
			rc := C.gs_cq_event(c.cch)
			if rc == C.EAGAIN {
				return false, nil
			}
			if rc != 0 {
				return true, syscall.Errno(rc)
			}
			return true, nil
		})
		if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
			c.mu.Lock()
			destroyed := c.destroyed
			c.mu.Unlock()
			if destroyed {
				return 0, rdma.ErrClosed
			}
			return 0, werr
		}
	}
}

func (c *conn) pollOnce(out []rdma.Completion) (n int, drained bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return 0, false, rdma.ErrClosed
	}
	got := int(C.gs_poll(c.cq, &c.wcs[0], C.int(min(len(out), len(c.wcs)))))
	if got < 0 {
		return 0, false, errors.New("verbs: ibv_poll_cq failed")
	}
	for i := 0; i < got; i++ {
		w := &c.wcs[i]
		st, ok := wcStatus[w.status]
		if !ok {
			st = rdma.StatusFatal
		}
		comp := rdma.Completion{Status: st, ByteLen: int(w.byte_len)}
		id := uint64(w.id)
		if id&recvBit != 0 && id&srqBit != 0 {
			comp.ID, comp.Op = c.srq.complete(id&^(recvBit|srqBit)), rdma.OpRecv
			if w.flags&C.IBV_WC_WITH_INV != 0 {
				comp.Invalidated, comp.InvalidatedRKey = true, uint32(w.inv)
			}
		} else if id&recvBit != 0 {
			seq := id &^ recvBit
			comp.ID = c.recvIDs[seq%uint64(len(c.recvIDs))]
			comp.Op = rdma.OpRecv
			c.recvDone = seq + 1
			if w.flags&C.IBV_WC_WITH_INV != 0 {
				comp.Invalidated, comp.InvalidatedRKey = true, uint32(w.inv)
			}
		} else {
			slot := id % uint64(len(c.sendIDs))
			comp.ID, comp.Op = c.sendIDs[slot], c.sendOps[slot]
			// A completion implies every earlier send WR completed: release
			// their slots and ORD credits.
			for ; c.sendDone <= id; c.sendDone++ {
				if c.sendOps[c.sendDone%uint64(len(c.sendIDs))] == rdma.OpRDMARead {
					c.reads--
				}
			}
		}
		if st != rdma.StatusSuccess {
			comp.Err = fmt.Errorf("verbs: %v (vendor error %#x)", st, uint32(w.vendor_err))
			if !c.closing {
				c.closing = true
				if c.err == nil {
					c.err = comp.Err
				}
				go c.fail(comp.Err)
			}
		}
		out[i] = comp
	}
	drained = got == 0 && c.closing && c.sendDone == c.sendSeq && c.recvDone == c.recvSeq
	return got, drained, nil
}

var _ rdma.Device = (*Device)(nil)

// srqBit marks, with recvBit, the work request IDs of receives posted to a
// shared receive queue; the rest of the ID is the SRQ's post sequence.
const srqBit = uint64(1) << 62

var _ rdma.SRQDevice = (*Device)(nil)

// CreateSRQ creates a shared receive queue (ibv_create_srq, one SGE per
// receive) holding at most depth receives, 1 up to the device's max_srq_wr.
// Queue pairs dialled or accepted with it in QPConfig.SRQ take their
// receives from it; each such connection's completion queue is sized for
// depth receive completions besides its sends. Errors: rdma.ErrClosed after
// Close, a range error for depth, or the failed call.
func (d *Device) CreateSRQ(depth int) (rdma.SRQ, error) {
	if d.lim.maxSRQWR <= 0 {
		return nil, fmt.Errorf("verbs: %s has no shared receive queues (max_srq 0)", d.info.Name)
	}
	if depth < 1 || depth > d.lim.maxSRQWR {
		return nil, fmt.Errorf("verbs: SRQ depth %d out of range 1..%d (max_srq_wr of %s)", depth, d.lim.maxSRQWR, d.info.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, rdma.ErrClosed
	}
	cs := C.gs_create_srq(d.pd, C.int(depth))
	if cs == nil {
		return nil, fmt.Errorf("verbs: ibv_create_srq of %d receives on %s failed", depth, d.info.Name)
	}
	s := &srq{d: d, s: cs, depth: depth, ids: map[uint64]uint64{}, users: map[*conn]struct{}{}}
	d.srqs[s] = struct{}{}
	return s, nil
}

// srq implements rdma.SRQ on an ibv_srq.
//
// The adapter does not report when it takes a receive from the SRQ, only its
// completion on the consuming QP's CQ: a buffer counts as posted (Posted, and
// against the depth) until that completion has been polled. A receive that a
// QP consumed but that never completes (its QP destroyed first) keeps its
// slot until Close.
type srq struct {
	d     *Device
	s     *C.struct_ibv_srq // nil after Close
	depth int

	mu    sync.Mutex
	seq   uint64            // next post sequence number
	ids   map[uint64]uint64 // post sequence -> RecvWR.ID, for buffers not yet completed
	users map[*conn]struct{}
}

func (s *srq) attach(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return false
	}
	s.users[c] = struct{}{}
	return true
}

func (s *srq) detach(c *conn) {
	s.mu.Lock()
	delete(s.users, c)
	s.mu.Unlock()
}

// complete returns the RecvWR.ID of the receive posted as seq and frees its
// slot.
func (s *srq) complete(seq uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[seq]
	delete(s.ids, seq)
	return id
}

// PostRecv posts receives (ibv_post_srq_recv), up to 64 per call into the
// library. It stops at the first it cannot post, leaving the earlier ones
// posted: rdma.ErrInvalidWR (a region of another device, deregistered, or
// without local write access; an SGE outside its region), rdma.ErrQueueFull
// (depth receives posted and not completed, or the adapter's ENOMEM),
// rdma.ErrClosed.
func (s *srq) PostRecv(wrs ...rdma.RecvWR) error { return inChunks(wrs, s.postRecv) }

func (s *srq) postRecv(wrs []rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return rdma.ErrClosed
	}
	var ids [maxChunk]C.uint64_t
	var sges [maxChunk]C.struct_ibv_sge
	n := 0
	var stop error
	for _, w := range wrs {
		if len(s.ids)+n >= s.depth {
			stop = rdma.ErrQueueFull
			break
		}
		sg, err := s.d.recvSGE(w)
		if err != nil {
			stop = err
			break
		}
		ids[n], sges[n] = C.uint64_t((s.seq+uint64(n))|recvBit|srqBit), sg
		n++
	}
	if n == 0 {
		return stop
	}
	// Map the IDs first: a completion may be polled as soon as they are posted.
	for i := range n {
		s.ids[s.seq+uint64(i)] = wrs[i].ID
	}
	var posted C.int
	rc := C.gs_post_recv(nil, s.s, &ids[0], &sges[0], C.int(n), &posted)
	for i := int(posted); i < n; i++ {
		delete(s.ids, s.seq+uint64(i))
	}
	s.seq += uint64(n)
	if rc != 0 {
		if rc == C.ENOMEM {
			return rdma.ErrQueueFull
		}
		return fmt.Errorf("verbs: ibv_post_srq_recv: %w", syscall.Errno(rc))
	}
	return stop
}

// Posted is how many receives are posted and not yet completed.
func (s *srq) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// Close destroys the SRQ (ibv_destroy_srq). It fails while a queue pair
// created on it still exists: a connection's QP is freed once it is closed
// and Poll has drained it (or at Device.Close). Safe to call more than once.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return nil
	}
	if n := len(s.users); n > 0 {
		return fmt.Errorf("verbs: shared receive queue still used by %d queue pairs (close and drain them first)", n)
	}
	rc := C.ibv_destroy_srq(s.s)
	s.s = nil
	s.ids = nil
	s.d.mu.Lock()
	delete(s.d.srqs, s)
	s.d.mu.Unlock()
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_destroy_srq: %w", syscall.Errno(rc))
	}
	return nil
}
