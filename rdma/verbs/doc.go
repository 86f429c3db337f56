// Package verbs provides the rdma contract on RDMA hardware through
// libibverbs and librdmacm (InfiniBand, RoCE and iWARP adapters, and the
// kernel's soft-RoCE rxe and soft-iWARP siw).
//
// The provider is built only with the build tag "verbs" and cgo:
//
//	apt-get install libibverbs-dev librdmacm-dev rdma-core
//	go build -tags verbs ./...
//
// Without the tag, Open returns ErrNotBuilt, so programs can name the
// transport in their configuration and get a clear error.
//
// Model: a Device is one protection domain (ibv_pd) on one RDMA device, plus
// one RDMA/CM event channel. Listen and Dial create RC queue pairs on
// rdma_cm_ids bound to that device; each connection has its own completion
// queue and completion channel. A goroutine per connection waits on the
// channel through Go's network poller (its file descriptor is
// non-blocking), takes the pending event (one per arm) and runs the
// consumer's completion hook (rdma.CQHook) on the spot, or signals
// Notify (rdma.CQNotifier) and a waiting Poll, which honours its context.
// TryPoll takes up to 64 completions per call into the library and, when
// it drains the CQ, re-arms it and polls once more in the same call.
// SENDs that fit the QP's max_inline_data are posted IBV_SEND_INLINE.
// DeviceFor names the device RDMA/CM routes an address through, for
// initiators that open the device their target is reached by.
//
// Device implements rdma.SRQDevice on adapters with shared receive queues
// (max_srq > 0; rxe has them): CreateSRQ makes an ibv_srq, and a QPConfig
// naming it creates the QP with ibv_qp_init_attr.srq. Its receive
// completions arrive on the CQ of the connection the SEND came in on. The
// library does not say when the adapter takes a buffer from the SRQ, so a
// buffer counts against the depth (and in Posted) until its completion is
// polled. SRQ.Close succeeds once every QP on it is destroyed, that is once
// its connection was closed and drained by Poll or TryPoll (or at
// Device.Close).
//
// Memory passed to Register stays pinned (runtime.Pinner) until Deregister,
// as the cgo rules require for memory the adapter keeps using.
//
// Where the hardware differs from the rdma contract's ideal:
//   - On InfiniBand and RoCE the connection manager carries private data in
//     fixed-size CM messages: the receiver sees it zero-padded (56 bytes in
//     a connect request, 196 in a reply, 148 in a reject). SRP IUs are
//     decoded from the front, so the padding is harmless; the rdmatest
//     subtests that compare private data byte for byte (Connect/PrivateData,
//     Connect/Reject, ManyConnections) cannot pass there.
//   - Completions carry no solicited-event flag (ibv_wc has none).
//   - A SEND larger than the receive buffer is reported as the provider
//     chooses (rxe: local QP operation error, not local length error).
//   - SEND with Invalidate needs memory registered for remote invalidation
//     (fast-registration MRs); plain registrations refuse it.
//   - On iWARP a bad remote access reaches the requester through a
//     Terminate; siw then reports a local QP operation error.
package verbs

import "errors"

// ErrNotBuilt is returned by Open in a build without the "verbs" tag.
var ErrNotBuilt = errors.New("verbs: this binary was built without RDMA verbs support (rebuild with -tags verbs; needs libibverbs-dev and librdmacm-dev)")
