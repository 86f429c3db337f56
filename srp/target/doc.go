// Package target is the SRP target engine: it plays the part of Linux
// ib_srpt on top of any rdma.Device, and hands SCSI commands to the SCSI
// core through scsi.Session.
//
// A Port is one SRP target port, named by its service GUID (target port ID
// = id_ext || ioc_guid, T10 SRP r16a §4.5). Port.Serve accepts connect
// requests; the SRP_LOGIN_REQ travels as the request's private data in the
// 56-byte RDMA/CM form of Linux (struct srp_login_req_rdma), or as a 64-byte
// SRP_LOGIN_REQ; with empty private data the connection is accepted and the
// login is expected as the first IU (answered with a SEND). Logins are
// checked in ib_srpt's order and refused with the matching SRP_LOGIN_REJ
// reason (see Port.HandleConnRequest).
//
// Each accepted connection is a channel with the ib_srpt life cycle
// CONNECTING → LIVE → DISCONNECTING → DRAINING → DISCONNECTED, written as a
// pure transition function (step) whose effects a single loop goroutine per
// channel carries out. That goroutine owns the channel's receive ring,
// send ring, credits and commands; SCSI commands run in their own
// goroutines (bounded by the receive ring) so the receive path never waits
// for a backstore.
//
// # Choices beyond or unlike ib_srpt
//
//   - No zero-length RDMA WRITE after accept: ib_srpt posts one to learn
//     that an InfiniBand CM connection is established when the RTU may be
//     lost; rdma.ConnRequest.Accept returns an established connection, so
//     the channel goes LIVE at once.
//   - Indirect descriptors whose table is only partly inline are served:
//     the table is fetched with an RDMA READ (ib_srpt answers BUSY).
//   - Malformed descriptors, bidirectional commands and transfers over
//     Config.MaxDataLen get CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD
//     IN CDB (05/24/00) instead of BUSY. A reused outstanding tag gets
//     ABORTED COMMAND, OVERLAPPED COMMANDS ATTEMPTED (0B/4E/00).
//   - Credits: an SRP_CMD or SRP_TSK_MGMT received while the initiator held
//     no credit is logged once per channel and processed anyway (it arrived
//     in a posted receive buffer; if no response context is free it is
//     parked and replayed in order). Credit of requests that end without a
//     response (aborted commands, IUs too short to carry a tag) is carried
//     by the next SRP_RSP, or by an SRP_CRED_REQ when nothing is
//     outstanding to carry it.
//   - SRP_I_LOGOUT closes the channel. SRP_CRED_RSP and SRP_AER_RSP are
//     accepted and spend no credit.
//   - Unknown or misdirected IUs (an unknown type code, an IU only a target
//     sends such as SRP_RSP or SRP_LOGIN_RSP, a second SRP_LOGIN_REQ): the
//     first on a channel is logged with the channel number and opcode, its
//     receive buffer reposted and its credit handed back (next SRP_RSP, or
//     an SRP_CRED_REQ when nothing is outstanding), so req_lim never leaks;
//     the second gets SRP_T_LOGOUT with reason 2 (invalid IU type code) and
//     the channel closes. ib_srpt (srpt_handle_new_iu) logs "received IU
//     with unknown opcode" or "Received SRP_RSP", reposts the buffer and
//     keeps the channel open, but never returns the credit its receive
//     path took (srpt_recv_done decrements req_lim for every IU).
//   - Config.MaxTotalChannels bounds the channels of the port (ib_srpt has
//     no such bound); logins beyond it get LOGIN_REJ 0x10001. IU-form
//     connections count from the moment they are accepted and are closed
//     when no SRP_LOGIN_REQ arrives within Config.LoginTimeout.
//   - Port.SetAccess applies to live channels: those that lost their ACL,
//     or whose LUN map or read-only set changed, get SRP_T_LOGOUT; the
//     others run on. ib_srpt leaves existing sessions alone when an ACL
//     is removed until they log out.
//   - With Config.UseSRQ (ib_srpt use_srq) the port posts SRQSize buffers
//     to one shared receive queue at creation; a channel holds a buffer
//     from its receive completion until the IU is done (for an SRP_CMD,
//     until its SRP_RSP send completes) and posts it back; a closing
//     channel posts back every buffer it still holds, flushed ones
//     included, and Port.Close destroys the queue after the last channel.
//     Unlike ib_srpt, immediate data is still offered with a shared
//     queue; its buffers are laid out for ib_srp's offset 68. A channel
//     holding more shared buffers than its own ring would have
//     (2*RQSize+4: its initiator ignores req_lim) is closed at once, and
//     parked IUs of a closing channel give their buffers back at once, so
//     one flooding initiator cannot keep the others' buffers. The
//     transport still hands out buffers before the target sees them: a
//     burst larger than SRQSize can empty the queue for a moment.
//   - The multichannel rejection (0x10005) and unsupported-buffer-format
//     rejection (0x10004) are checked; ib_srpt checks neither.
//   - IU-form logins (empty private data) set up the receive ring before the
//     login is known, aligned for immediate data at offset 68 (ib_srp's).
//   - The receive ring holds 2*RQSize+4 buffers, posted before the login
//     reply when the provider offers rdma.RecvFirstAcceptor: iWARP has no
//     RNR retry, so an initiator SEND must always find a buffer.
//   - A TMF aborts the commands of its own channel that are still fetching
//     data; commands of other channels of the same I_T nexus are aborted by
//     the SCSI core once they reach it. When the core answers FUNCTION
//     COMPLETE, commands of the TMF's channel that it covered and that
//     have not been answered yet get no SRP_RSP even if their result
//     races in after the abort (their credit rides on a later response).
package target
