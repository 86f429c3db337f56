package rdmatest_test

import (
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/rdma/rdmatest"
)

// A provider's tests run the suite with a factory of two connected devices
// and an address to listen on; here, the loopback provider's.
func ExampleRun() {
	factory := func(tb testing.TB) (a, b rdma.Device, addr string) {
		n := loopback.NewNetwork()
		return n.NewDevice("a"), n.NewDevice("b"), "a:listen"
	}
	_ = func(t *testing.T) { rdmatest.Run(t, factory) }
	_ = func(b *testing.B) { rdmatest.Benchmark(b, factory) }
	// For an iWARP-style provider completing SEND and WRITE on transmit:
	_ = func(t *testing.T) {
		rdmatest.RunWith(t, factory, rdmatest.Options{CompletesOnTransmit: true})
	}
}
