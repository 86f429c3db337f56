package hostile

import (
	"io"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// TestConnectResetStorm: many peers send a valid login and reset the TCP
// connection at once (before, while or after the target answers), some
// with FPDUs pipelined behind the MPA request; nothing may be left behind
// (channels, regions, goroutines) and a well-behaved initiator is served.
func TestConnectResetStorm(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	const n = 60
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		p := dialRaw(t, tg.addr)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := mpaFrame(keyReq, flagH, 2, append(irdOrd(16, 16), loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = p.id })...))
			switch i % 3 {
			case 0:
				p.write(req)
			case 1:
				// FPDUs pipelined behind the request (RFC 5044 §7.1.2 has
				// the initiator wait for the reply).
				f := p.fpdu(append(untagged(true, 3, 0, 0, 1, 0), tur(1)...))
				p.write(append(req, f...))
			case 2:
				p.write(req)
				io.ReadFull(p.nc, make([]byte, 20)) // the reply's header
			}
			rst(p)
		}(i)
	}
	wg.Wait()
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}
