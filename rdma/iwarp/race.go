//go:build race

package iwarp

import "sync/atomic"

// raceSync gives the race detector the happens-before edge that a TCP
// segment gives real programs: what a writer did before sending is visible
// to the reader that received it. Without it, the detector would flag a
// test that polls an RDMA WRITE's completion at one end and reads the target
// memory at the other end of a loopback connection. Race builds only.
var raceSync atomic.Uint64

// raceRelease marks a send (before the bytes go to the socket).
func raceRelease() { raceSync.Add(1) }

// raceAcquire marks a receive (after the bytes came from the socket).
func raceAcquire() { raceSync.Load() }

// copyShared copies src, registered memory the connection's reader may be
// placing a peer's RDMA WRITE into at the same time (as an adapter's DMA
// would), into dst. That concurrency is the protocol's (RFC 5040 §5.5: a
// WRITE may pass an earlier Read), not a bug for the detector to report,
// so in race builds the copy is not instrumented.
//
//go:norace
func copyShared(dst, src []byte) int {
	n := min(len(dst), len(src))
	for i := range n {
		dst[i] = src[i]
	}
	return n
}
