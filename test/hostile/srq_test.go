package hostile

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/target"
)

// TestSRQFloodIsolation: with one shared receive queue for the port
// (UseSRQ), a peer that ignores req_lim and floods SRP_CMDs must not
// starve the shared queue so that a well-behaved initiator, which never
// exceeds its credit, finds no buffer (iWARP has no RNR retry: its
// connection would be terminated, RFC 5041 §7.2 DDP 1/2/0x02).
func TestSRQFloodIsolation(t *testing.T) {
	t.Skip("known bug: rdma/iwarp/srq.go + srp/target (UseSRQ): one peer ignoring req_lim drains the port's shared receive queue before the target sees the overrun (closing the overrunning channel, fb244c3, comes too late: the transport has already placed the burst); a well-behaved initiator's next SEND finds the SRQ empty and its connection is terminated with DDP 1/2/0x02. Needs a per-connection bound on SRQ buffers held in the transport")
	tg := startTarget(t, tgtOpts{port: target.Config{RQSize: 16, UseSRQ: true, SRQSize: 64}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := floodPeer(t, tg.addr, 200)
				if err != nil {
					return
				}
				p.nc.Close()
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		tg.wellBehaved(t)
	}
	cancel()
	wg.Wait()
}

// floodPeer logs in and sends n TEST UNIT READYs in one burst, ignoring
// req_lim, then drains what comes back until the target closes or 1 s
// passes.
func floodPeer(t *testing.T, addr string, n int) (*rawPeer, error) {
	p := dialRaw(t, addr)
	if err := p.write(mpaFrame(keyReq, flagH, 2, append(irdOrd(16, 16), loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = p.id })...))); err != nil {
		return nil, err
	}
	if _, _, _, err := p.mpaReply(); err != nil {
		return nil, err
	}
	var burst []byte
	for i := 0; i < n; i++ {
		burst = append(burst, p.fpdu(append(untagged(true, 3, 0, 0, p.msn[0], 0), tur(uint64(i))...))...)
		p.msn[0]++
	}
	if err := p.write(burst); err != nil {
		return p, nil
	}
	p.nc.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, err := p.readFPDU(); err != nil {
			return p, nil
		}
	}
}
