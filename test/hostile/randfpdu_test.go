package hostile

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRandomFPDUs: after a valid login, FPDUs with random DDP/RDMAP
// control bytes, header fields and payloads (framing and CRC correct).
// The target answers each stream with at most one Terminate whose layer
// is RDMAP, DDP or MPA (RFC 5040 §7.1), then closes, or keeps serving;
// it never crashes, and a well-behaved initiator is served afterwards.
func TestRandomFPDUs(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	r := rand.New(rand.NewPCG(3, 5))
	n := 150
	if testing.Short() {
		n = 40
	}
	for i := 0; i < n; i++ {
		p := dialRaw(t, tg.addr)
		p.mustLogin(r.IntN(2) == 0)
		for k := 0; k < 1+r.IntN(3); k++ {
			var u []byte
			if r.IntN(2) == 0 {
				u = tagged(r.IntN(2) == 0, byte(r.IntN(16)), r.Uint32(), r.Uint64())
			} else {
				u = untagged(r.IntN(2) == 0, byte(r.IntN(16)), r.Uint32(), uint32(r.IntN(4)), uint32(r.IntN(3)), uint32(r.IntN(64)))
				if r.IntN(4) == 0 {
					binary.BigEndian.PutUint32(u[10:], r.Uint32())
				}
			}
			if r.IntN(4) == 0 {
				u[0] ^= byte(r.IntN(256)) // version and reserved bits too
				u[1] ^= byte(r.IntN(256))
			}
			u = append(u, randBytes(r, r.IntN(200))...)
			if p.write(p.fpdu(u)) != nil {
				break
			}
		}
		p.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		terms := 0
		for {
			f, err := p.readFPDU()
			if err != nil {
				break // closed, or quiet (the FPDUs were acceptable)
			}
			if !f.tagged && f.opcode == 7 {
				terms++
				if len(f.payload) < 4 || f.payload[0]>>4 > 2 {
					t.Fatalf("Terminate % x: bad control", f.payload)
				}
			}
		}
		if terms > 1 {
			t.Fatalf("%d Terminates on one stream", terms)
		}
		p.nc.Close()
	}
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}
