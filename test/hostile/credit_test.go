package hostile

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// TestCreditAccounting: whatever requests the peer sends (good, malformed,
// truncated below a tag, which get no SRP_RSP), the req_lim_delta it gets
// back in SRP_RSPs and SRP_CRED_REQs (T10 SRP r16a §6.10) restores its
// request limit exactly to the LOGIN_RSP's req_lim_delta: no credit is
// lost or invented.
func TestCreditAccounting(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p := dialRaw(t, tg.addr)
	lr := p.mustLogin(false)
	limit := int(lr.ReqLimDelta)
	credit := limit
	answered := map[uint64]bool{}
	// take handles one IU from the target.
	take := func(iu []byte) {
		switch srp.Opcode(iu[0]) {
		case srp.OpRsp:
			credit += int(int32(binary.BigEndian.Uint32(iu[4:])))
			answered[binary.BigEndian.Uint64(iu[8:])] = true
		case srp.OpCredReq:
			credit += int(int32(binary.BigEndian.Uint32(iu[4:])))
			b, _ := (&srp.CredRsp{Tag: binary.BigEndian.Uint64(iu[8:])}).Marshal()
			p.send(b) // spends no credit
		default:
			t.Fatalf("unexpected IU % x", iu)
		}
	}
	request := func(iu []byte, tag uint64, answer bool) {
		credit--
		p.send(iu)
		for answer && !answered[tag] {
			b, err := p.recvIU()
			if err != nil {
				t.Fatal(err)
			}
			take(b)
		}
	}
	request(tur(1), 1, true)
	d := direct(peerVA, peerSTag, 512)
	for i := 0; i < 5; i++ {
		tag := uint64(10 + i)
		request(cmdIU(tag, lun0, read10(0, 1), fmtDirect, fmtDirect, 1, 1, 0, append(append([]byte(nil), d...), d...)), tag, true)
	}
	request([]byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, false)
	request([]byte{0x02, 0, 0, 0}, 0, false)
	b, _ := (&srp.TaskMgmt{Tag: 30, LUN: lun0, Func: srp.TMFAbortTask, TaskTag: 0x999}).Marshal()
	request(b, 30, true)
	for i := 0; i < 3; i++ {
		request(tur(uint64(20+i)), uint64(20+i), true)
	}
	// Only a broken target waits out this bound; a loaded machine under
	// -race can stall the target's last SRP_CRED_REQ for seconds.
	p.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for credit != limit {
		b, err := p.recvIU()
		if err != nil {
			t.Fatalf("request limit %d, want %d back (%v)", credit, limit, err)
		}
		take(b)
	}
	// Nothing more may come: a surplus would invent credit.
	p.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := p.recvIU(); err == nil {
		t.Fatalf("after the limit was restored the target sent % x", b)
	}
}
