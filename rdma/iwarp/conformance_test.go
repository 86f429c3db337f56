package iwarp

import (
	"strings"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/rdmatest"
)

// TestConformance runs the provider suite with MPA revision 2 (revision 1
// has no IRD/ORD exchange, so the suite's ORD <= peer IRD check cannot hold;
// revision 1 is covered by the tests of this package). Config.CompleteOnTransmit
// is not run: it trades the suite's "completion means placed, errors land on
// the failing request" for siw's completion at transmit time.
func TestConformance(t *testing.T) {
	for _, v := range []struct {
		name string
		cfg  Config
	}{
		{"v2", Config{}},
		{"v2-crc", Config{CRC: true, MaxFPDUPayload: 4096}},
		{"v2-p2p", Config{PeerToPeer: true}},
		{"v2-p2p-read", Config{PeerToPeer: true, RTR: RTRRead}},
	} {
		t.Run(v.name, func(t *testing.T) {
			rdmatest.Run(t, func(tb testing.TB) (a, b rdma.Device, addr string) {
				skipKnownSuiteBugs(tb)
				return NewDevice(v.cfg), NewDevice(v.cfg), "127.0.0.1:0"
			})
		})
	}
}

// skipKnownSuiteBugs skips the suite's SRQ/Empty subtest: after the SEND
// that found the SRQ empty has torn its connection down, it posts a buffer
// (ID 77) to the SRQ and then expects the next SEND on another connection
// to take a buffer posted after it (ID 88). Buffers in the SRQ outlive a
// failed connection (rdma.QPConfig.SRQ) and are consumed in posting order,
// so 77 is taken first. TestSRQEmptyTerminates checks the behaviour here.
func skipKnownSuiteBugs(tb testing.TB) {
	if strings.HasSuffix(tb.Name(), "/SRQ/Empty") {
		tb.Skip("rdmatest SRQ/Empty expects a buffer still posted in the SRQ to be gone after its connection failed; see TestSRQEmptyTerminates")
	}
}

func BenchmarkProvider(b *testing.B) {
	for _, v := range []struct {
		name string
		cfg  Config
	}{
		{"confirmed", Config{}},
		{"crc", Config{CRC: true}},
		{"complete-on-transmit", Config{CompleteOnTransmit: true}},
	} {
		b.Run(v.name, func(b *testing.B) {
			rdmatest.Benchmark(b, func(tb testing.TB) (a, b rdma.Device, addr string) {
				return NewDevice(v.cfg), NewDevice(v.cfg), "127.0.0.1:0"
			})
		})
	}
}
