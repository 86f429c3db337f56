// Package loopback is an in-process, deterministic provider of the rdma
// transport contract, for tests of the layers above it (SRP target and
// initiator) and as the reference the rdmatest conformance suite runs against.
//
// # Addressing and connection management
//
// A Network is a namespace of addresses; devices made by one Network reach
// each other and nothing else. Listen accepts any non-empty string as the
// address (the empty string picks a fresh unique one); a second listener on
// the same address fails with an error wrapping syscall.EADDRINUSE. Dialling an
// address nobody listens on fails with an error wrapping syscall.ECONNREFUSED,
// as a TCP or RDMA/CM connect would.
//
// Connect requests, replies and rejects carry at most MaxPrivateData = 196
// bytes of private data, the private data size of an InfiniBand CM REP
// message (IBA vol. 1 ch. 12.6). Real IB CM requests carry 92 bytes (56 under
// RDMA/CM) and rejects 148; the loopback uses one limit for all three. Longer private
// data fails with rdma.ErrPrivateDataTooLong. A Reject reaches the dialer as
// an *rdma.RejectError holding the private data.
//
// # Memory
//
// Register gives each region an LKey and an RKey unique within the device and
// a fake IOVA (Addr) that is not a process address: regions are spaced at
// page-aligned addresses starting at 0x10000000. A remote access names
// (Addr+offset, RKey); the RKey must belong to a region registered on the
// peer's device, not deregistered and not invalidated, the whole byte range
// must fall inside that region, and the region must grant AccessRemoteWrite
// (RDMA WRITE) or AccessRemoteRead (RDMA READ). A violation completes the work
// request at the requester with rdma.StatusRemoteAccess and moves the queue
// pair to the error state, as an RC QP does (IBA vol. 1 ch. 10.3; RFC 5040
// §7: the responder terminates the stream).
//
// Zero-length RDMA WRITE and READ do not look at the RKey or address at all
// (IBA vol. 1 ch. 9.4: a zero-length RDMA operation validates neither the
// R_Key nor the virtual address); ib_srpt's zero-length WRITE with STag 0
// succeeds.
//
// # Queue pair semantics
//
// Every connection is a reliable connected queue pair. Work requests execute
// in post order per send queue (RC ordering): a SEND posted after an RDMA
// WRITE reaches the peer after the WRITE's data has been placed, and a work
// request stalled (see RNR below) holds back everything behind it. An RDMA
// READ therefore sees exactly the WRITEs posted before it; real providers may
// also let it see WRITEs posted after it (RFC 5040 §5.5).
//
//   - SEND consumes the peer's oldest posted receive. Its gather list is
//     copied into the receive buffer when it executes; the receive completes
//     with the byte count, the solicited bit and, for SEND with Invalidate, the
//     invalidated key. A SEND longer than the receive buffer completes the
//     receive with rdma.StatusLocalLength and the SEND with
//     rdma.StatusRemoteInvalidRequest, and the QP goes to error.
//   - SEND with Invalidate invalidates InvalidateRKey, which must name a valid
//     region of the receiver's device (else the receive completes with
//     rdma.StatusLocalProtection, the SEND with rdma.StatusRemoteOperation,
//     and the QP goes to error). An invalidated region refuses every later
//     remote access; local use (as an SGE) stays allowed.
//   - RNR: a SEND finding no posted receive waits until the peer posts one,
//     for ever by default (ib_srpt's CM REP carries rnr_retry 7, which means
//     retry without limit). WithRNRTimeout bounds the wait: the SEND then completes
//     with rdma.StatusRNRRetryExceeded and the QP goes to error.
//   - RDMA READ completes with ByteLen set to the bytes read. RDMA WRITE and
//     SEND completions have ByteLen 0.
//   - Unsignaled work requests that succeed produce no completion; errors and
//     flushes always do.
//   - WithCompleteOnTransmit reports responder-side errors of SEND and RDMA
//     WRITE as iWARP providers do: the request completes successfully and the
//     connection then goes down.
//
// Work executes synchronously inside PostSend and PostRecv (and inside a timer
// callback for the optional RNR timeout and injected delays), under one mutex
// shared by the two ends of a connection, so the outcome of any sequence of
// posts is deterministic and there are no per-connection goroutines. A
// consequence for upper layers: a buffer reused right after PostSend returns
// usually goes unnoticed here, while real providers read it later; run such
// code against rdma/iwarp too, or with WithAsyncExecution, which runs the
// work on a goroutine per connection so that -race reports such reuse.
//
// # Queue limits
//
// A send queue slot is held from PostSend until the work request's completion
// is returned by Poll; an unsignaled work request's slot is released when a
// later completion of the same send queue is returned, as on verbs hardware
// (so posting only unsignaled work eventually fills the queue). A receive slot
// is held from PostRecv until its completion is returned by Poll. An RDMA READ
// counts against ORD for as long as it holds its send slot. Posting beyond
// SendDepth, RecvDepth or ORD fails with rdma.ErrQueueFull. So at most
// SendDepth + RecvDepth completions ever wait for Poll, as with a verbs CQ
// sized to its queues.
//
// ORD and IRD are negotiated at connection time: each side's ORD becomes the
// smaller of its own ORD and the peer's IRD, and its IRD the peer's negotiated
// ORD. The responder checks its IRD too: a READ arriving with IRD reads already
// outstanding completes with rdma.StatusRemoteInvalidRequest and the QP goes to
// error (only reachable with WithUncheckedORD).
//
// # Errors and teardown
//
// A QP error or a Close on either side takes the connection down on both
// sides: every work request not yet executed, on either side, completes with
// rdma.StatusFlushed (after the failing request's own error completion), Done
// is closed, and Poll returns the remaining completions and then
// rdma.ErrClosed. Err is rdma.ErrClosed on the side that called Close,
// ErrPeerClosed (which matches rdma.ErrClosed under errors.Is) on the other,
// an *rdma.TerminateError after a protocol error (Local set on the side that
// detected it, Layer/Type/Code as RFC 5040 §7 would send them), and
// ErrConnectionLost after a dropped connection. Device.Close closes the
// device's listeners and connections; posting on a down connection fails with
// rdma.ErrClosed.
//
// # Shared receive queues
//
// Device.CreateSRQ makes a shared receive queue (rdma.SRQDevice). A
// connection created with it in QPConfig.SRQ has no receive queue of its own
// (Conn.PostRecv fails with rdma.ErrInvalidWR); a SEND arriving on it
// consumes the SRQ's oldest buffer and completes through that connection's
// Poll, or waits as on an empty receive queue (RNR) until a buffer is posted
// to the SRQ. A consumed buffer leaves the SRQ at once (Posted drops), so
// nothing is ever consumed and not yet completed: closing a connection
// flushes nothing of the SRQ.
//
// # Fault injection
//
// Device.InjectFault and Conn.InjectFault arm a Fault: the chosen send work
// requests complete with an error status, are held back for a delay, or drop
// the connection. Conn.Drop drops a connection at once. See Fault.
package loopback
