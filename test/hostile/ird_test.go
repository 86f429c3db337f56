package hostile

import (
	"testing"
)

// TestReadRequestsBeyondIRD: a burst of zero-length RDMA Read Requests,
// far more than the IRD the target advertised in its MPA reply (RFC 6581
// §5). Each is answered by a zero-length Read Response in order, unless
// the burst outruns the responses: then the target terminates with RDMAP
// 0/2/0x07 (as siw), never anything else.
func TestReadRequestsBeyondIRD(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p := dialRaw(t, tg.addr)
	p.mustLogin(false)
	const n = 200
	var burst []byte
	for i := 0; i < n; i++ {
		burst = append(burst, p.fpdu(readReq(uint32(i+1), uint32(0x7000+i), 0, 0, 0, 0))...)
	}
	go p.write(burst)
	got := 0
	for got < n {
		f, err := p.readFPDU()
		if err != nil {
			t.Fatalf("stream ended after %d responses without a Terminate: %v", got, err)
		}
		if f.tagged && f.opcode == 2 {
			if f.stag != uint32(0x7000+got) || len(f.payload) != 0 || f.ulpdu[0]&0x40 == 0 {
				t.Fatalf("response %d: STag %#x, %d bytes, control %#x; want STag %#x, empty, last", got, f.stag, len(f.payload), f.ulpdu[0], 0x7000+got)
			}
			got++
			continue
		}
		if !f.tagged && f.opcode == 7 {
			if f.payload[0] != 0x02 || f.payload[1] != 0x07 {
				t.Fatalf("Terminate % x after %d responses, want RDMAP 0/2/0x07", f.payload[:4], got)
			}
			t.Logf("%d responses, then Terminate RDMAP 0/2/0x07", got)
			p.expectEOF()
			return
		}
	}
	t.Logf("all %d answered", n)
}
