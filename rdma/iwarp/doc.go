// Package iwarp is a pure-Go iWARP provider of the rdma transport contract:
// RDMAP (RFC 5040) over DDP (RFC 5041) over MPA (RFC 5044, with the RFC 6581
// enhanced connection establishment) over TCP. It speaks the wire protocol
// of Linux soft-iWARP (siw), so kernel consumers on siw (ib_srpt, ib_srp)
// are its peers as well as other gosrp processes.
//
// # Connection establishment (MPA)
//
// Dial sends an MPA request: revision 2 with flag 0x10 (enhanced) and the
// RFC 6581 IRD/ORD word leading the private data, as siw does
// ("MPA ID Req Frame", 10 02 00 3c, 00 04 00 00, then 56 bytes of SRP login),
// or revision 1 (Config.MPARevision). The listener answers revision 1
// requests with revision 1. IRD/ORD: each side's ORD becomes the smaller of
// its own and the peer's IRD; Caps.IRD reports the peer's negotiated ORD
// while the IRD advertised stays the limit enforced. CRC32c is used when
// either side sets the C bit. Markers (M bit), revisions other than 1 and 2
// and PD_Length over 512 are refused with an MPA reject; a reject with
// private data reaches the dialer as *rdma.RejectError. Peer-to-peer mode
// (Config.PeerToPeer) offers and picks the zero-length RDMA Write or Read
// RTR; the Send RTR is never chosen (it would eat a consumer receive). Every
// exchange is bounded by Config.HandshakeTimeout and the caller's context;
// each incoming connection is handshaken in its own goroutine. The decisions
// themselves are pure functions (handshake.go).
//
// # Framing
//
// FPDU: 2-byte ULPDU_Length, DDP/RDMAP header, payload, pad to a 4-byte
// boundary, 4-byte CRC field (zero without CRC; with CRC the CRC32c of
// everything before it, stored little endian as siw and iSCSI digests do).
// Messages are cut into segments of Config.MaxFPDUPayload bytes (default
// 65472: FPDUs near the 64 KiB MPA limit; siw accepts any ULPDU length).
// Send uses untagged queue 0, RDMA Read Request queue 1 and Terminate queue
// 2, each with MSNs from 1; RDMA Write and Read Response are tagged (STag =
// the region's RKey, TO = Addr()+offset). DV and RV are 1.
//
// # Data path
//
// Each connection has one reader goroutine, which parses FPDUs from a 32 KiB
// buffer and places tagged data and Send payloads straight into the
// registered buffer (no intermediate copy): a payload of 8 KiB or more is
// read with readv(2) into the region, the pad and CRC field, and the buffer
// (which so receives the next FPDU's header in the same system call); and
// one writer goroutine, which
// gathers the FPDUs of every queued work request and Read Response into one
// vectored write (writev), headers in a reused arena and payloads as slices
// of the registered memory. TCP_NODELAY is set. Nothing is allocated per
// FPDU.
//
// # Completion semantics
//
// iWARP has no acknowledgement of a Send or RDMA Write. By default the
// writer follows each batch of Sends and Writes with a zero-length RDMA Read
// Request (a completion fence, counted against ORD; at most two in flight,
// one without an RFC 6581 IRD/ORD exchange); a Read Response proves
// that the peer processed everything before it (RFC 5040 §5.5 ordering), so
// a SEND or WRITE completes when its data is placed at the peer, and a peer
// Terminate completes the work request it names (by STag/TO or MSN in the
// copied header) with StatusRemoteAccess, StatusRemoteInvalidRequest, ...,
// the rest with StatusFlushed. Config.CompleteOnTransmit completes Sends and
// Writes once written to TCP instead, as siw does. Queue slots are held
// until Poll returns the completion, as on verbs hardware.
//
// # Errors
//
// Every violation found on receive is answered with a Terminate (RFC 5040
// §4.8, §7) carrying the offending FPDU's length field and DDP header (M and
// D flags), plus the RDMA Read Request header (R flag) for RDMAP errors of a
// Read Request, then TCP is closed and outstanding work flushes:
//
//	Write/Read Response to an unknown or invalidated STag  DDP 1/1/0x00
//	... outside the region (or TO wrap)                     DDP 1/1/0x01
//	Write to a region without remote write                  RDMAP 0/1/0x02
//	Read Request: bad source STag / bounds / rights         RDMAP 0/1/0x00, 0x01, 0x02
//	DDP version not 1 (tagged / untagged)                   DDP 1/1/0x04, 1/2/0x06
//	QN not 0, 1 or 2                                        DDP 1/2/0x01
//	Send with no receive posted                             DDP 1/2/0x02
//	MSN not the expected one                                DDP 1/2/0x03
//	MO not where the message stands                         DDP 1/2/0x04
//	Send longer than the receive buffer                     DDP 1/2/0x05 (receive: StatusLocalLength)
//	RDMAP version not 1                                     RDMAP 0/2/0x05
//	opcode unknown or on the wrong queue, stray Response    RDMAP 0/2/0x06
//	Read Requests beyond the IRD advertised                 RDMAP 0/2/0x07 (as siw)
//	Send with Invalidate of an STag that is not valid       RDMAP 0/2/0x09
//	CRC mismatch                                            MPA 2/0/0x02
//
// Zero-length RDMA Writes and Reads name no memory and are accepted whatever
// their STag (ib_srpt's first FPDU is a zero-length Write to STag 0). A
// peer's Terminate is Err() as a *rdma.TerminateError with Local false.
//
// # Shared receive queues
//
// Device.CreateSRQ makes a shared receive queue (rdma.SRQDevice). A
// connection made with QPConfig.SRQ takes the buffer for each arriving Send
// from it, oldest first, and completes it through its own Poll; a Send that
// finds it empty gets the Terminate of an empty receive queue (DDP
// 1/2/0x02), which takes down that connection only. A buffer stays held
// (counted against the depth) until its completion is polled.
//
// # Memory
//
// An STag is a 24-bit index and an 8-bit key (never 0), LKey = RKey. Addr()
// is a tagged-offset base unique on the device, not a process address. A
// Send with Invalidate makes the named region refuse remote access; local use
// stays allowed.
package iwarp
