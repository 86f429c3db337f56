package target

import "sync/atomic"

// chanStats are the counters of one channel. The goroutine holding the
// channel's turn writes them (wakes also the provider's completion
// goroutine, before it tries for the turn); Port.Sessions and the
// channel's release log read them from any goroutine. Each is one atomic
// add on the path it counts.
type chanStats struct {
	commands        atomic.Uint64 // SRP_CMDs received
	readBytes       atomic.Uint64 // data-in bytes sent (RDMA WRITE)
	writeBytes      atomic.Uint64 // data-out bytes received (RDMA READ or immediate)
	errors          atomic.Uint64 // unexpected or malformed IUs, failed work requests
	checkConditions atomic.Uint64 // SRP_RSPs with status CHECK CONDITION
	tmfs            atomic.Uint64 // SRP_TSK_MGMTs received
	maxOutstanding  atomic.Int64  // most commands and TMFs in progress at once
	wakes           atomic.Uint64 // completion notifications taken (rdma.CQNotifier, rdma.CQHook; each turn of a busy-polling provider)
	polls           atomic.Uint64 // polls of the completion queue that found work
	completions     atomic.Uint64 // work completions handled
	doorbells       atomic.Uint64 // doorbells rung (rdma.Doorbeller)
}
