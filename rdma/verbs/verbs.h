// C side of the verbs provider: flat work request and completion
// structs Go memory may hold, and thin wrappers around libibverbs and
// librdmacm calls and the struct fields cgo cannot reach. Included by
// every cgo file of the package; the functions are static inline so
// each file's copy is private to it.
#ifndef GOSRP_VERBS_H
#define GOSRP_VERBS_H
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

static inline int gs_post_send(struct ibv_qp *qp, gs_wr *w, int n, struct ibv_sge *sges, int *posted) {
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
static inline int gs_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t *ids, struct ibv_sge *sges, int n, int *posted) {
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

static inline int gs_poll(struct ibv_cq *cq, gs_wc *out, int n) {
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

// gs_poll_arm polls up to n completions; when it finds fewer and *armed
// is 0 it arms cq for its next completion (ibv_req_notify_cq), sets
// *armed, and polls again for the completions that arrived before the arm
// raised no event. One crossing from Go for the common cases.
static inline int gs_poll_arm(struct ibv_cq *cq, gs_wc *out, int n, int *armed) {
	int got, more;
	if (n > 64) n = 64;
	got = gs_poll(cq, out, n);
	if (got < 0 || got == n || *armed) return got;
	if (ibv_req_notify_cq(cq, 0) != 0) return -1;
	*armed = 1;
	more = gs_poll(cq, out + got, n - got);
	return more < 0 ? more : got + more;
}

static inline int gs_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// gs_cq_event takes one completion channel event of ch without blocking
// and acknowledges it (ibv_ack_cq_events): 1, 0 when none is pending, or
// -errno. One read suffices: the CQ raises an event only once per
// ibv_req_notify_cq, and it is armed again only after its event was taken.
static inline int gs_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq; void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx) != 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	ibv_ack_cq_events(cq, 1);
	return 1;
}

static inline int gs_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return errno;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return errno;
	return 0;
}

// gs_cm_event takes one RDMA/CM event without blocking, copies it and acks it.
static inline int gs_cm_event(struct rdma_event_channel *ch, gs_event *out) {
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

static inline int gs_addr(const char *host, const char *port, int passive, struct sockaddr_storage *ss) {
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

static inline int gs_bind_listen(struct rdma_cm_id *id, const char *host, const char *port, int backlog) {
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (gs_addr(host, port, 1, &ss) != 0) return EINVAL;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss) != 0) return errno;
	if (rdma_listen(id, backlog) != 0) return errno;
	return 0;
}

static inline int gs_resolve_addr(struct rdma_cm_id *id, const char *host, const char *port, int timeout_ms) {
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (gs_addr(host, port, 0, &ss) != 0) return EINVAL;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, timeout_ms) != 0) return errno;
	return 0;
}

// gs_create_qp creates the RC QP of id; with srq its receives come from
// that shared receive queue and recv is ignored.
static inline int gs_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq,
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

// gs_conn_param fills the connection parameters of rdma_accept and
// rdma_connect: private data, IRD/ORD, RNR retries without limit (7) and,
// for connect, 7 transport retries (rdma_accept ignores retry_count).
static inline void gs_conn_param(struct rdma_conn_param *p, void *pd, int pdlen, int rr, int idep, int retry) {
	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = pdlen;
	p->responder_resources = rr;
	p->initiator_depth = idep;
	p->retry_count = retry;
	p->rnr_retry_count = 7;
}

static inline int gs_accept(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int idep) {
	struct rdma_conn_param p;
	gs_conn_param(&p, pd, pdlen, rr, idep, 0);
	if (rdma_accept(id, &p) != 0) return errno;
	return 0;
}

static inline int gs_connect(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int idep) {
	struct rdma_conn_param p;
	gs_conn_param(&p, pd, pdlen, rr, idep, 7);
	if (rdma_connect(id, &p) != 0) return errno;
	return 0;
}

static inline int gs_reject(struct rdma_cm_id *id, void *pd, int pdlen) {
	if (rdma_reject(id, pd, pdlen) != 0) return errno;
	return 0;
}

static inline struct ibv_context *gs_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static inline int gs_port_num(struct rdma_cm_id *id) { return id->port_num; }

static inline int gs_query_port(struct ibv_context *ctx, int port, int *link, int *state) {
	struct ibv_port_attr a;
	if (ibv_query_port(ctx, port, &a) != 0) return errno;
	*link = a.link_layer;
	*state = a.state;
	return 0;
}

static inline const char *gs_dev_name(struct ibv_context *ctx) { return ibv_get_device_name(ctx->device); }
static inline int gs_dev_transport(struct ibv_context *ctx) { return ctx->device->transport_type; }

static inline int gs_query_device(struct ibv_context *ctx, uint64_t *guid, int *phys_ports, int *max_qp_wr, int *max_sge, int *max_rd_atom, int *max_cqe, int *max_srq_wr) {
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

static inline int gs_query_gid(struct ibv_context *ctx, int port, uint8_t *out) {
	union ibv_gid g;
	if (ibv_query_gid(ctx, port, 0, &g) != 0) return errno;
	memcpy(out, g.raw, 16);
	return 0;
}

static inline struct ibv_srq *gs_create_srq(struct ibv_pd *pd, int max_wr) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = 1;
	return ibv_create_srq(pd, &a);
}

static inline struct ibv_mr *gs_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}
static inline int gs_comp_fd(struct ibv_comp_channel *ch) { return ch->fd; }
static inline int gs_cm_fd(struct rdma_event_channel *ch) { return ch->fd; }
static inline int gs_query_rd(struct ibv_qp *qp, int *ord, int *ird) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &ia) != 0) return errno;
	*ord = a.max_rd_atomic;
	*ird = a.max_dest_rd_atomic;
	return 0;
}
static inline struct ibv_qp *gs_id_qp(struct rdma_cm_id *id) { return id->qp; }

// gs_device_for resolves host:port on a private event channel and copies
// the name of the device RDMA/CM bound the id to.
static inline int gs_device_for(const char *host, const char *port, int timeout_ms, char *name, int len) {
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

#endif
