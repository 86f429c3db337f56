package hostile

import (
	"context"
	"testing"
	"time"
)

// TestStalledReader: a peer asks for far more data-in than the TCP buffers
// hold and stops reading (zero window). The target keeps serving other
// initiators, and a port close still completes in bounded time (the
// channel's writer is stuck in a TCP write).
func TestStalledReader(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	for i := 0; i < 16; i++ {
		// READ(10) of the whole 1 MiB LUN into the peer's "memory".
		if err := p.send(cmdIU(uint64(10+i), lun0, read10(0, lunBytes/blockSize), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, lunBytes))); err != nil {
			t.Fatal(err)
		}
	}
	// The peer reads nothing from here on.
	tg.wellBehaved(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := tg.port.Close(ctx); err != nil {
		t.Fatalf("port Close with a stalled peer: %v", err)
	}
	t.Logf("port closed %v after the close began", time.Since(start))
}

// TestSilentMidFPDU: a peer sends half an FPDU (and half a multi-segment
// Send) and goes silent; the target keeps serving others, and a port close
// completes in bounded time.
func TestSilentMidFPDU(t *testing.T) {
	for _, c := range []struct {
		name string
		send func(p *rawPeer)
	}{
		{"half-fpdu", func(p *rawPeer) {
			f := p.fpdu(append(untagged(true, 3, 0, 0, 1, 0), tur(5)...))
			p.write(f[:len(f)-7])
		}},
		{"first-segment-only", func(p *rawPeer) {
			// The first segment of a Send (L clear); the rest never comes.
			p.write(p.fpdu(append(untagged(false, 3, 0, 0, 1, 0), tur(5)[:24]...)))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
			p := dialRaw(t, tg.addr)
			p.mustLogin(false)
			c.send(p)
			tg.wellBehaved(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := tg.port.Close(ctx); err != nil {
				t.Fatalf("port Close with a silent peer: %v", err)
			}
			p.expectEOF()
		})
	}
}
