// Package rdma is the transport contract SRP runs on: a verbs-like model of
// reliable connected queue pairs with SEND/RECV, RDMA READ and RDMA WRITE
// against registered memory, and a connection manager whose connect request
// and reply carry private data (the SRP login).
//
// The vocabulary follows the InfiniBand Architecture Specification vol. 1
// ch. 10-11 (verbs) and the RDMA/CM API of librdmacm. Providers: rdma/loopback
// (in-process, deterministic), rdma/iwarp (pure Go, MPA/DDP/RDMAP over TCP,
// RFC 5040/5041/5044/6581) and rdma/verbs (libibverbs/librdmacm, cgo, build
// tag "verbs").
//
// Package rdma knows nothing of SRP or SCSI.
package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Access is the set of rights a memory region grants (ibv_access_flags).
type Access uint32

const (
	// AccessLocalWrite lets the local side place data into the region:
	// receive buffers and RDMA READ sinks need it.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite lets a peer RDMA WRITE into the region (needs
	// AccessLocalWrite too, as in verbs).
	AccessRemoteWrite
	// AccessRemoteRead lets a peer RDMA READ from the region.
	AccessRemoteRead
	// AccessPlaceAhead, with AccessRemoteWrite, says the region is one
	// transfer's at a time, which the peer fills with RDMA Writes from
	// the transfer's start on: a provider that predicts the next segments
	// of an RDMA Write (rdma/iwarp: several FPDUs per readv(2)) may place
	// them straight into the region, and a wrong guess may leave bytes of
	// the stream in the region past the Write's data, up to its end, where
	// the peer has not written. It grants the peer nothing more; providers
	// that do not predict ignore it.
	AccessPlaceAhead
)

// String lists the rights, e.g. "local-write|remote-read".
func (a Access) String() string {
	s := ""
	add := func(n string) {
		if s != "" {
			s += "|"
		}
		s += n
	}
	if a&AccessLocalWrite != 0 {
		add("local-write")
	}
	if a&AccessRemoteWrite != 0 {
		add("remote-write")
	}
	if a&AccessRemoteRead != 0 {
		add("remote-read")
	}
	if a&AccessPlaceAhead != 0 {
		add("place-ahead")
	}
	if s == "" {
		return "none"
	}
	return s
}

// MemoryRegion is registered memory (ibv_mr). The provider keeps the buffer
// pinned and valid until Deregister. Remote peers address it by (Addr()+offset,
// RKey()); every remote access is checked against the region's bounds and
// rights before a byte moves.
type MemoryRegion interface {
	// Bytes is the registered buffer itself (not a copy).
	Bytes() []byte
	// Addr is the address peers use for byte 0 of the region (the IOVA / iWARP
	// tagged offset base). Not necessarily a process address.
	Addr() uint64
	// LKey is the local key, used in local SGEs.
	LKey() uint32
	// RKey is the remote key (iWARP STag) peers name in RDMA READ/WRITE.
	RKey() uint32
	// Access returns the rights granted at registration.
	Access() Access
	// Deregister invalidates the keys; later remote accesses fail with a
	// remote access error. Safe to call twice (the second returns
	// ErrDeregistered).
	Deregister() error
}

// SGE is one local scatter/gather element: Length bytes at Offset in MR.
type SGE struct {
	MR     MemoryRegion
	Offset int // bytes from the start of MR
	Length int // bytes
}

// Bytes returns the SGE's slice of the region, or nil when it is out of bounds.
func (s SGE) Bytes() []byte {
	if s.MR == nil || s.Offset < 0 || s.Length < 0 {
		return nil
	}
	b := s.MR.Bytes()
	if s.Offset > len(b) || s.Length > len(b)-s.Offset {
		return nil
	}
	return b[s.Offset : s.Offset+s.Length]
}

// Opcode names a work request or completion type (ibv_wr_opcode / ibv_wc_opcode).
type Opcode uint8

const (
	OpSend           Opcode = iota + 1 // SEND (RDMAP Send / Send with Solicited Event)
	OpSendInvalidate                   // SEND with Invalidate (RFC 5040 §5.3: invalidates InvalidateRKey at the peer)
	OpRDMAWrite                        // RDMA WRITE, possibly zero-length
	OpRDMARead                         // RDMA READ
	OpRecv                             // a receive completion
)

var opcodeNames = map[Opcode]string{
	OpSend: "SEND", OpSendInvalidate: "SEND_INV", OpRDMAWrite: "RDMA_WRITE",
	OpRDMARead: "RDMA_READ", OpRecv: "RECV",
}

func (o Opcode) String() string {
	if n, ok := opcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// RemoteAddr names peer memory: an address inside a region the peer
// registered, and that region's RKey (iWARP: tagged offset and STag).
type RemoteAddr struct {
	Addr uint64
	RKey uint32
}

// SendWR is a send-queue work request (ibv_send_wr).
type SendWR struct {
	// ID is returned in the completion.
	ID uint64
	// Op is OpSend, OpSendInvalidate, OpRDMAWrite or OpRDMARead.
	Op Opcode
	// Local is the gather list (SEND, RDMA WRITE) or scatter list (RDMA READ).
	// Empty means a zero-length operation.
	Local []SGE
	// Remote is the peer memory of an RDMA WRITE or READ.
	Remote RemoteAddr
	// Signaled asks for a completion on success. Errors always complete.
	Signaled bool
	// Solicited sets the solicited-event bit of a SEND.
	Solicited bool
	// InvalidateRKey is the peer key a SEND with Invalidate invalidates.
	InvalidateRKey uint32
}

// RecvWR is a receive-queue work request (ibv_recv_wr): one buffer for one
// incoming SEND.
type RecvWR struct {
	ID    uint64
	Local SGE
}

// Status is a completion status in the verbs vocabulary (ibv_wc_status).
type Status uint8

const (
	StatusSuccess              Status = iota // IBV_WC_SUCCESS
	StatusLocalLength                        // IBV_WC_LOC_LEN_ERR: incoming SEND larger than the receive buffer
	StatusLocalQPOperation                   // IBV_WC_LOC_QP_OP_ERR
	StatusLocalProtection                    // IBV_WC_LOC_PROT_ERR: bad local SGE (key, bounds, rights)
	StatusFlushed                            // IBV_WC_WR_FLUSH_ERR: flushed by QP error or close
	StatusRemoteInvalidRequest               // IBV_WC_REM_INV_REQ_ERR
	StatusRemoteAccess                       // IBV_WC_REM_ACCESS_ERR: bad STag, bounds or rights at the peer
	StatusRemoteOperation                    // IBV_WC_REM_OP_ERR
	StatusRetryExceeded                      // IBV_WC_RETRY_EXC_ERR: transport lost
	StatusRNRRetryExceeded                   // IBV_WC_RNR_RETRY_EXC_ERR: peer had no receive buffer
	StatusFatal                              // IBV_WC_FATAL_ERR / IBV_WC_GENERAL_ERR
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local protection error",
	"work request flushed", "remote invalid request", "remote access error",
	"remote operation error", "transport retry exceeded", "RNR retry exceeded", "fatal error",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Completion reports the end of one work request (ibv_wc).
type Completion struct {
	ID     uint64
	Op     Opcode // the work request's opcode; OpRecv for receives
	Status Status
	// ByteLen is the number of bytes received (OpRecv) or read (OpRDMARead).
	ByteLen int
	// Solicited is set on a receive whose SEND had the solicited-event bit.
	Solicited bool
	// InvalidatedRKey is set (with Invalidated) on a receive of a SEND with
	// Invalidate: the local key that the peer invalidated.
	InvalidatedRKey uint32
	Invalidated     bool
	// Err explains a non-success Status (may be nil).
	Err error
}

// QPConfig sizes a queue pair. Zero fields take the provider's default.
type QPConfig struct {
	SendDepth int // maximum outstanding send work requests
	RecvDepth int // maximum posted receive work requests
	MaxSGE    int // maximum SGEs per work request
	// IRD is how many RDMA READs the peer may have outstanding against us
	// (responder resources); ORD how many we may have outstanding (initiator
	// depth). Negotiated down to the peer's values at connection time.
	IRD, ORD int
	// SRQ, when set, makes the queue pair take its receive buffers from this
	// shared receive queue (ibv_qp_init_attr.srq): RecvDepth is ignored,
	// Conn.PostRecv fails with ErrInvalidWR, and each SEND that arrives
	// consumes the SRQ's oldest posted buffer, its completion (with that
	// buffer's RecvWR.ID) delivered through this Conn's Poll. Closing or
	// losing the Conn flushes only its own consumed-but-uncompleted
	// receives; buffers still in the SRQ stay there. The SRQ must come from
	// the same Device.
	SRQ SRQ
}

// SRQDevice is an optional ability of a Device: shared receive queues
// (ibv_create_srq), one pool of receive buffers serving many queue pairs, as
// ib_srpt uses one per HCA port (use_srq) to save memory with many channels.
type SRQDevice interface {
	// CreateSRQ creates a shared receive queue holding at most depth posted
	// receive work requests (ibv_srq_attr.max_wr).
	CreateSRQ(depth int) (SRQ, error)
}

// SRQ is a shared receive queue.
type SRQ interface {
	// PostRecv posts receive buffers (their MRs need AccessLocalWrite). It
	// fails with ErrQueueFull past the depth, ErrClosed after Close, or
	// ErrInvalidWR for a malformed request, posting none of the remainder.
	PostRecv(wrs ...RecvWR) error
	// Posted is how many buffers are posted and not yet consumed.
	Posted() int
	// Close destroys the SRQ (ibv_destroy_srq); buffers still posted are
	// released without completions. Queue pairs using it must be closed
	// first, else it fails. Safe to call more than once.
	Close() error
}

// Caps are a connected QP's negotiated limits.
type Caps struct {
	SendDepth, RecvDepth, MaxSGE int
	IRD, ORD                     int
	// MaxInline is the largest SEND the provider copies at post time, in bytes.
	MaxInline int
}

// Conn is a connected reliable queue pair (RC QP + its CQ + its rdma_cm_id).
//
// Post* may be called from any goroutine. Completions are delivered in order
// per queue (send queue, receive queue) through Poll. When the connection
// fails or is closed, every outstanding work request completes with
// StatusFlushed (or the error status), then Poll returns ErrClosed.
type Conn interface {
	// PostSend posts send work requests in order. It fails (posting none of
	// the remainder) with ErrQueueFull when the send queue or ORD would be
	// exceeded, ErrClosed after close, or ErrInvalidWR for a malformed request.
	PostSend(wrs ...SendWR) error
	// PostRecv posts receive buffers (their MRs need AccessLocalWrite).
	PostRecv(wrs ...RecvWR) error
	// Poll blocks until at least one completion is available, ctx ends, or the
	// connection is closed and drained; it fills out and returns the count.
	// Only one goroutine may Poll at a time.
	Poll(ctx context.Context, out []Completion) (int, error)
	// Caps returns the negotiated queue limits.
	Caps() Caps
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Close disconnects (DREQ / TCP FIN after iWARP teardown), flushes the
	// outstanding work and frees the QP. Safe to call more than once.
	Close() error
	// Done is closed when the connection has gone down for any reason.
	Done() <-chan struct{}
	// Err is why the connection went down (nil while up, ErrClosed after a
	// local Close, a *TerminateError or network error otherwise).
	Err() error
}

// CQNotifier is implemented by connections whose completions can be taken
// without blocking, with a channel that tells when there may be some (as
// ibv_poll_cq on a CQ armed by ibv_req_notify_cq with a completion
// channel), so one goroutine can wait for completions and its other events
// in one select instead of dedicating a goroutine to Poll.
type CQNotifier interface {
	// TryPoll fills out with the completions available now and returns
	// how many, 0 when there are none; once the connection is down and
	// every completion has been taken it returns ErrClosed. Only one
	// goroutine may poll at a time (TryPoll or Poll).
	TryPoll(out []Completion) (int, error)
	// Notify returns a channel that receives after new completions arrive
	// (and possibly at other times). A receiver calls TryPoll until it
	// returns fewer than len(out) before waiting on it again.
	Notify() <-chan struct{}
}

// CQHook is implemented by connections that can run the consumer's
// completion handling on the goroutine that queued the completions (the
// provider's receive or transmit goroutine), so that no consumer goroutine
// has to be woken to take them: one goroutine hand-off fewer per message,
// as a kernel consumer's completion handler runs in the context that
// completed the work (ib_srpt's srpt_recv_done in the CQ's softirq).
type CQHook interface {
	CQNotifier
	// SetCQHook makes the connection call fn, instead of signalling
	// Notify's channel, at some point after it queued new completions: on
	// one of its own goroutines, with none of its locks held, before that
	// goroutine waits for the network. fn takes the completions with
	// TryPoll (it may be called when there are none). It may run on two
	// goroutines at once and concurrently with the consumer's own, so it
	// must guard its state (a consumer busy elsewhere can hand the work to
	// its goroutine and return), and it must not block: the connection
	// receives nothing while fn runs. Completions queued during the
	// consumer's own PostSend or Doorbell are there for TryPoll when the
	// call returns. Close called from fn does not wait for the
	// connection's goroutines to end. Notify's channel still receives when
	// the connection goes down.
	SetCQHook(fn func())
}

// Doorbeller is implemented by connections that can hold posted send work
// until told to transmit (a doorbell write, in hardware terms), so a
// consumer that posts many work requests in a row sends them together: on
// iWARP in one system call, written by the caller itself when the
// connection's writer is idle.
type Doorbeller interface {
	// PostSendDeferred is PostSend without starting transmission.
	PostSendDeferred(wrs ...SendWR) error
	// Doorbell starts transmitting what was posted. It may write on the
	// caller's goroutine, never waiting for the network.
	Doorbell()
}

// LoneWaiter is implemented by connections whose receive side can wait for
// input in a way that wakes the waiting thread sooner, at the cost of
// batching: worth it while a consumer awaits a single answer (one command
// outstanding), not under load. On iWARP the reader then waits in
// ppoll(2), whose wake-up the kernel may run on the sender's CPU, instead
// of Go's poller (rdma/iwarp, rxReader.eagerWait).
type LoneWaiter interface {
	// SetLoneWait says whether the consumer now awaits a single message.
	SetLoneWait(on bool)
}

// LocalRegioner is implemented by devices whose providers read and write
// local memory with the CPU (the pure-Go iWARP provider), so any memory
// can be the source of a SEND or RDMA WRITE or the sink of an RDMA READ
// without registering it: a consumer moves data where it lies (a RAM
// backstore's pages) instead of through a registered buffer and a copy.
// Hardware providers, whose adapter reaches the memory by DMA, need
// Register instead.
type LocalRegioner interface {
	// LocalRegion returns a region over buf usable only in the local SGEs
	// of work requests on this device: no remote key names it (RKey 0),
	// it has local write rights only, and Deregister is not needed. buf
	// must stay valid memory until those work requests complete; an RDMA
	// READ's completion, flushed ones included, is reported only once the
	// provider no longer writes its sink.
	LocalRegion(buf []byte) MemoryRegion
}

// RegionCache is implemented by devices whose adapters reach memory only
// through registrations (the verbs provider): it keeps the registrations of
// memory that work requests read again and again, such as a RAM
// backstore's chunks, so a consumer can send from memory where it lies
// rather than copy it into a registered buffer, without a registration
// per transfer (the role of a registration cache in user-space RDMA
// stacks; LIO's rd_mcp needs none, its pages being the kernel's).
type RegionCache interface {
	// CachedRegion returns a region with local access rights (reads, and
	// writes as an RDMA READ's sink) that holds buf, and buf's byte offset
	// in it. The region may cover all of
	// buf[:cap(buf)]: the device keeps that memory referenced, so it
	// stays valid and registered while cached. Each successful call must
	// be matched by one ReleaseRegion once the work requests using the
	// region have completed; a region in use is never deregistered.
	// Errors: ErrClosed, or the registration's (the locked-memory limit,
	// the adapter's region count); the caller then moves the data through
	// memory it registered itself.
	CachedRegion(buf []byte) (MemoryRegion, int, error)
	// ReleaseRegion ends one use of a region CachedRegion returned.
	ReleaseRegion(MemoryRegion)
}

// Device is a protection domain on one provider: memory registered on it is
// usable by every connection dialled or accepted through it.
type Device interface {
	// Register registers buf with the given rights. The caller must not
	// resize buf; it stays valid until Deregister.
	Register(buf []byte, access Access) (MemoryRegion, error)
	// Listen starts a connection manager listener (rdma_listen). addr is
	// provider-specific ("host:port" for iWARP and RDMA/CM).
	Listen(ctx context.Context, addr string) (Listener, error)
	// Dial connects (rdma_connect) carrying privateData in the connect
	// request. On acceptance it returns the connection and the reply private
	// data. A rejection returns a *RejectError holding the peer's private data.
	Dial(ctx context.Context, addr string, cfg QPConfig, privateData []byte) (Conn, []byte, error)
	// MaxPrivateData is the most bytes of private data a connect request may
	// carry (iWARP MPA: 512 minus the MPA v2 IRD/ORD word; IB CM REQ: 56 for
	// RDMA/CM).
	MaxPrivateData() int
	// Name names the provider and device ("iwarp", "loopback", "rxe0").
	Name() string
	// Close closes the listeners and connections made through the device.
	Close() error
}

// Listener yields incoming connect requests.
type Listener interface {
	// Accept waits for the next connect request.
	Accept(ctx context.Context) (ConnRequest, error)
	Addr() net.Addr
	Close() error
}

// ConnRequest is one connect request awaiting a decision. Exactly one of
// Accept or Reject must be called.
type ConnRequest interface {
	// PrivateData is the request's private data (for SRP: the login).
	PrivateData() []byte
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Accept creates the QP with cfg, replies with privateData and returns
	// the established connection.
	Accept(ctx context.Context, cfg QPConfig, privateData []byte) (Conn, error)
	// Reject refuses the request with privateData (for SRP: the LOGIN_REJ).
	Reject(privateData []byte) error
}

// RecvFirstAcceptor is an optional ability of a ConnRequest: AcceptRecv is
// Accept with receive work requests posted on the new queue pair before the
// reply goes out, as a verbs consumer posts receives between creating the
// QP and rdma_accept. On transports without RNR retry (iWARP: a SEND that
// finds no posted receive terminates the stream, RFC 5041 §7.2 / RFC 5040
// §7) a consumer whose peer may SEND as soon as it sees the reply (an SRP
// target) needs it; with plain Accept the first SENDs race the consumer's
// PostRecv. The receives complete through Poll like any other.
type RecvFirstAcceptor interface {
	AcceptRecv(ctx context.Context, cfg QPConfig, privateData []byte, recvs []RecvWR) (Conn, error)
}

var (
	// ErrClosed reports use of a closed connection, listener or device.
	ErrClosed = errors.New("rdma: connection closed")
	// ErrQueueFull reports a post that would exceed the queue depth or ORD.
	ErrQueueFull = errors.New("rdma: queue full")
	// ErrInvalidWR reports a malformed work request (bad opcode, SGE out of
	// its region, too many SGEs, missing rights).
	ErrInvalidWR = errors.New("rdma: invalid work request")
	// ErrDeregistered reports use of a deregistered memory region.
	ErrDeregistered = errors.New("rdma: memory region deregistered")
	// ErrPrivateDataTooLong reports private data over MaxPrivateData.
	ErrPrivateDataTooLong = errors.New("rdma: private data too long")
)

// RejectError is returned by Dial when the peer rejected the connect request.
type RejectError struct {
	PrivateData []byte // the peer's reject private data (SRP: LOGIN_REJ)
	Reason      string // provider detail, e.g. "MPA reject"
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rdma: connection rejected (%s, %d bytes private data)", e.Reason, len(e.PrivateData))
}

// TerminateError is why a connection was torn down by a protocol error
// (iWARP Terminate, RFC 5040 §7; or a verbs async error).
type TerminateError struct {
	Local  bool   // we sent the Terminate (else the peer did)
	Layer  uint8  // RFC 5040 §7.1 layer: 0 RDMAP, 1 DDP, 2 LLP (MPA)
	Type   uint8  // error type within the layer
	Code   uint8  // error code
	Detail string // human-readable reason
}

func (e *TerminateError) Error() string {
	who := "peer"
	if e.Local {
		who = "local"
	}
	return fmt.Sprintf("rdma: %s terminate (layer %d type %d code %#02x): %s", who, e.Layer, e.Type, e.Code, e.Detail)
}
