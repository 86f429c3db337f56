package hostile

import (
	"bytes"
	"testing"
)

// TestAcknowledgedWriteSurvivesReset: a WRITE answered GOOD is on the
// medium even when the initiator resets the connection right after the
// SRP_RSP (and with more WRITEs still in flight behind it).
func TestAcknowledgedWriteSurvivesReset(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	pat := bytes.Repeat([]byte{0xa5, 0x5a, 0x3c, 0xc3}, blockSize/4)
	p.readData = func(r readRequest) []byte { return bytes.Repeat(pat, int(r.Size)/blockSize) }
	p.send(cmdIU(1, lun0, write10(300, 4), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 4*blockSize)))
	if rsp := p.expectRsp(t, 1); rsp.Status != 0 {
		t.Fatalf("WRITE: status %#x sense % x", rsp.Status, rsp.Sense)
	}
	// More WRITEs in flight, then the reset.
	p.holdReads = true
	for i := 0; i < 4; i++ {
		p.send(cmdIU(uint64(2+i), lun0, write10(400, 8), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 8*blockSize)))
	}
	rst(p)
	tg.waitSessions(t, 0)
	for lba := uint64(300); lba < 304; lba++ {
		if got := tg.readLBA(t, lba); !bytes.Equal(got, pat) {
			t.Fatalf("LBA %d after the reset holds % x..., want the acknowledged data", lba, got[:8])
		}
	}
}
