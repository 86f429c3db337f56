package hostile

import (
	"testing"
	"time"
)

// TestReloginAfterReset: an initiator whose connection dies (RST) logs in
// again at once with the same initiator port ID and SINGLE, as ib_srp
// reconnects. The new channel must serve: its TEST UNIT READY is answered.
//
// The race (fixed in srp/target 075725e): the new login's prepareLogin finds the I_T nexus of the dying
// channel and reserves it; before the new channel joins it (newChannel,
// after registering its rings) the old channel is released, finds the
// nexus without channels, drops it and closes its SCSI session; the new
// channel then joins a dropped nexus whose session answers every command
// Aborted, which the channel drops silently: a live channel that never
// answers.
func TestReloginAfterReset(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(64)})
	for i := 0; i < 40; i++ {
		p := dialRaw(t, tg.addr)
		p.nc.SetDeadline(time.Now().Add(10 * time.Second))
		p.id = initiatorID // the same I_T nexus every time
		p.mustLogin(false)
		p.send(tur(0x7e57))
		p.expectRsp(t, 0x7e57)
		for j := 0; j < 4; j++ {
			p.send(cmdIU(uint64(10+j), lun0, read10(0, 1024), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 512*1024)))
		}
		rst(p)
	}
	tg.wellBehaved(t)
}
