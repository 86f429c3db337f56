// Package rdmatest is a provider-independent conformance suite for the rdma
// transport contract, and benchmarks any provider can run.
//
// A provider's test calls Run with a Factory:
//
//	func TestConformance(t *testing.T) {
//		rdmatest.Run(t, func(tb testing.TB) (a, b rdma.Device, addr string) {
//			return newDevice(tb), newDevice(tb), "127.0.0.1:0"
//		})
//	}
//
// # What the suite expects of a provider
//
// Beyond the doc comments of package rdma, the suite relies on these readings
// of the contract (the verbs behaviour they come from is noted):
//
//   - Listen on the factory's address, then Dial the listener's
//     Addr().String(): the address may ask for a free port (":0").
//   - Dial and Poll honour their contexts: with nobody accepting, or nothing
//     to complete, they return an error matching context.DeadlineExceeded
//     when the context expires (an abandoned Poll leaves the connection up).
//   - Connect requests may be answered in any order; Listener.Accept and a
//     blocked Poll return when the listener or connection closes.
//   - Private data up to MaxPrivateData of the receiving side arrives intact
//     (request: the listener's device; reply and reject: the dialer's).
//     Longer private data fails with rdma.ErrPrivateDataTooLong before
//     anything is sent; a ConnRequest whose Accept or Reject failed that way
//     is still pending and can be answered again.
//   - Caps reports at least the requested SendDepth, RecvDepth and MaxSGE,
//     and an ORD between 1 and the peer's requested IRD.
//   - A send queue slot is held from PostSend until Poll returns the work
//     request's completion (an unsignaled request's slot until a later
//     completion of the same send queue is returned); a receive slot until
//     its completion is returned; an RDMA READ counts against ORD for as long
//     as it holds its send slot. Posting past SendDepth, RecvDepth or ORD
//     returns rdma.ErrQueueFull and posts nothing more; the work requests
//     before it in the same call stay posted. (Verbs: a CQ sized to its
//     queues never overflows because slots free only as completions are
//     polled.)
//   - Completions of one queue arrive in posting order; unsignaled requests
//     that succeed produce none; error and flush completions carry the work
//     request's ID and opcode (rdma.OpRecv for receives).
//   - RC ordering: a SEND posted after an RDMA WRITE on the same connection
//     completes at the receiver only after the WRITE's data is in place, and
//     an RDMA READ returns data reflecting every WRITE posted before it (it
//     may also reflect WRITEs posted after it: RFC 5040 §5.5).
//   - A SEND consumes the oldest posted receive. Receives must be posted
//     before the matching SEND arrives: the suite never relies on RNR retry,
//     which iWARP does not have.
//   - Zero-length RDMA WRITE and READ succeed whatever the remote address
//     and key (no key check for zero bytes: IBA vol. 1 ch. 9.4, and ib_srpt's
//     zero-length WRITE with STag 0 over iWARP).
//   - A remote access with an unknown, deregistered or invalidated RKey,
//     outside the region, or without the right completes with
//     rdma.StatusRemoteAccess, and the connection goes down on both sides:
//     every other outstanding work request (sends and receives, both sides)
//     completes with rdma.StatusFlushed, Done closes, Err is non-nil, and
//     Poll returns rdma.ErrClosed once drained. Posting on a down connection
//     returns rdma.ErrClosed (a request posted before the failure was seen
//     completes with rdma.StatusFlushed instead: the suite accepts both).
//   - A SEND longer than the receive buffer completes that receive with
//     rdma.StatusLocalLength and the SEND with rdma.StatusRemoteInvalidRequest
//     or rdma.StatusRemoteOperation; the connection goes down.
//   - SEND with Invalidate reports Invalidated and the key in the receive
//     completion, and the key is unusable remotely afterwards.
//   - Close on either side takes the connection down on both; the closing
//     side's Err matches rdma.ErrClosed. Device.Close takes down the
//     device's connections and listeners.
//   - Once both devices of a factory are closed, every goroutine the
//     provider started for them exits (checked against the goroutine count
//     before the factory was called, with a deadline).
//
// Shared receive queues are optional (rdma.SRQDevice); the SRQ subtests
// skip on a provider without them (see srq.go for what they expect). So are
// completion hooks (rdma.CQHook, hook.go).
//
// Both directions are exercised: the dialer (an SRP initiator) and the
// acceptor (an SRP target, which issues the RDMA READs and WRITEs) each act as
// requester. Subtests run sequentially (the goroutine check needs it; do not
// run the suite in parallel with other tests of the same process), each with
// fresh devices from the factory and a context deadline of at most 30 s.
// RunWith relaxes the suite for documented provider differences (Options).
package rdmatest

import (
	"slices"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Factory returns two devices that can reach each other and an address the
// first can Listen on (the second dials the listener's Addr().String()). It is
// called once per subtest and benchmark. The suite closes both devices when
// the subtest ends; the factory may register more cleanup with tb.Cleanup.
type Factory func(tb testing.TB) (a, b rdma.Device, addr string)

// Options relax the suite for providers whose completion semantics differ
// in documented ways. The zero value asks for the strict behaviour described
// in the package documentation.
type Options struct {
	// CompletesOnTransmit: SEND and RDMA WRITE complete at the requester
	// once transmitted, without waiting for the responder (an iWARP Data
	// Sink acknowledges neither, RFC 5040; siw completes them so). An
	// error the responder finds in such a request then reaches the requester
	// only as the connection's teardown: the request and those after it may
	// complete successfully, with an error, or flushed; and a SEND posted
	// after a failing RDMA READ may complete successfully. The suite then
	// checks placed data only after a fencing RDMA READ.
	CompletesOnTransmit bool
	// RemoteAccessStatuses are the statuses accepted for a work request the
	// responder refused for its key, bounds or rights; empty means
	// {rdma.StatusRemoteAccess}.
	RemoteAccessStatuses []rdma.Status
}

func (o Options) remoteAccessOK(st rdma.Status) bool {
	if len(o.RemoteAccessStatuses) == 0 {
		return st == rdma.StatusRemoteAccess
	}
	return slices.Contains(o.RemoteAccessStatuses, st)
}

// Run runs the conformance suite as subtests of t, strictly.
func Run(t *testing.T, f Factory) { RunWith(t, f, Options{}) }

// RunWith runs the conformance suite as subtests of t, relaxed by opts.
func RunWith(t *testing.T, f Factory, opts Options) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"Connect/PrivateData", testConnectPrivateData},
		{"Connect/PrivateDataTooLong", testPrivateDataTooLong},
		{"Connect/Reject", testReject},
		{"Connect/DialContext", testDialContext},
		{"Connect/ListenerClose", testListenerClose},
		{"Connect/AcceptOutOfOrder", testAcceptOutOfOrder},
		{"PollContext", testPollContext},
		{"SendRecv/Sizes", testSendRecvSizes},
		{"SendRecv/Gather", testSendGather},
		{"SendRecv/FIFO", testSendFIFO},
		{"SendRecv/Solicited", testSolicited},
		{"SendRecv/Unsignaled", testUnsignaled},
		{"SendRecv/Bidirectional", testBidirectional},
		{"SendRecv/LocalLength", testLocalLength(opts)},
		{"SendInvalidate", testSendInvalidate(opts)},
		{"RDMA/WriteRead", testWriteRead(opts)},
		{"RDMA/WriteThenSendOrdering", testWriteSendOrdering},
		{"RDMA/ZeroLength", testZeroLength},
		{"RDMA/BadRKey", remoteError(badRKey, false, opts)},
		{"RDMA/OutOfBoundsEnd", remoteError(pastEnd, false, opts)},
		{"RDMA/OutOfBoundsStart", remoteError(beforeStart, false, opts)},
		{"RDMA/OutOfBoundsWrap", remoteError(addrWrap, false, opts)},
		{"RDMA/WriteWithoutRight", remoteError(writeNoRight, false, opts)},
		{"RDMA/ReadWithoutRight", remoteError(readNoRight, false, opts)},
		{"RDMA/DeregisteredWrite", remoteError(deregWrite, false, opts)},
		{"RDMA/DeregisteredRead", remoteError(deregRead, false, opts)},
		{"RDMA/ReadBadBoundsFromAcceptor", remoteError(beforeStart, true, opts)},
		{"RDMA/WriteWithoutRightFromAcceptor", remoteError(writeNoRight, true, opts)},
		{"Queue/SendFull", testSendQueueFull},
		{"Queue/SendFullBatch", testSendQueueFullBatch},
		{"Queue/RecvFull", testRecvQueueFull},
		{"Queue/ORD", testORD},
		{"InvalidWR", testInvalidWR},
		{"SRQ/Shared", testSRQShared},
		{"SRQ/PostRecv", testSRQPostRecv},
		{"SRQ/Depth", testSRQDepth},
		{"SRQ/CloseConn", testSRQCloseConn},
		{"SRQ/Close", testSRQClose},
		{"SRQ/Empty", testSRQEmpty},
		{"Deregister", testDeregister},
		{"Close/Dialer", testClose(true)},
		{"Close/Acceptor", testClose(false)},
		{"Close/WakesPoll", testCloseWakesPoll},
		{"Close/Device", testDeviceClose},
		{"Hook/Delivers", testHookDelivers},
		{"Hook/Close", testHookClose},
		{"Concurrent", testConcurrent},
		{"ManyConnections", testManyConnections},
		{"RandomOps", testRandomOps},
		{"GoroutineLeak", testGoroutineLeak},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}
