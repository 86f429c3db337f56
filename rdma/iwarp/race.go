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
