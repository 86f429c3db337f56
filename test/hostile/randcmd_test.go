package hostile

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestRandomCommands sends SRP_CMDs with random fields (buffer formats,
// descriptor counts, add_cdb_len, CDB, descriptors aimed at the peer's
// memory with small lengths), one at a time: each must be answered with an
// SRP_RSP carrying its tag, every RDMA access must stay within the peer
// memory all descriptors lie in, and the channel must keep serving.
func TestRandomCommands(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	r := rand.New(rand.NewPCG(7, 11))
	n := 1500
	if testing.Short() {
		n = 300
	}
	// The peer's "memory": STag peerSTag, [peerVA, peerVA+1 MiB).
	const span = 1 << 20
	inSpan := func(stag uint32, to uint64, size int) bool {
		return stag == peerSTag && to >= peerVA && to+uint64(size) <= peerVA+span
	}
	p.readData = func(rr readRequest) []byte {
		if !inSpan(rr.SourceSTag, rr.SourceTO, int(rr.Size)) {
			t.Errorf("RDMA READ of %d bytes at %#x/%#x outside the peer's memory", rr.Size, rr.SourceSTag, rr.SourceTO)
		}
		return make([]byte, rr.Size)
	}
	desc := func() []byte {
		return direct(peerVA+uint64(r.IntN(span/2)), peerSTag, uint32(r.IntN(span/4)))
	}
	for i := 0; i < n; i++ {
		tag := uint64(0x100000 + i)
		cdb := randBytes(r, 16)
		// Mostly commands the LUN knows, with small transfers.
		switch r.IntN(4) {
		case 0:
			cdb = read10(uint32(r.IntN(2048)), uint16(r.IntN(64)))
		case 1:
			cdb = write10(uint32(r.IntN(2048)), uint16(r.IntN(64)))
		}
		var add []byte
		addLen := byte(0)
		if r.IntN(8) == 0 {
			addLen = byte(r.IntN(16)) << 2
			add = randBytes(r, int(addLen))
		}
		outFmt, inFmt := byte(r.IntN(4)), byte(r.IntN(4))
		if r.IntN(3) > 0 {
			outFmt = 0
		}
		outCnt, inCnt := byte(r.IntN(3)), byte(r.IntN(3))
		for _, f := range []byte{outFmt, inFmt} {
			switch f {
			case fmtDirect:
				add = append(add, desc()...)
			case fmtIndirect:
				k := r.IntN(3)
				var ds [][]byte
				total := uint32(0)
				for j := 0; j < k; j++ {
					d := desc()
					total += binary.BigEndian.Uint32(d[12:])
					ds = append(ds, d)
				}
				if r.IntN(4) == 0 {
					total = r.Uint32()
				}
				add = append(add, indirect(direct(peerVA, peerSTag, uint32(16*(k+r.IntN(2)))), total, ds...)...)
			case fmtImm:
				add = append(add, randBytes(r, 4)...)
			}
		}
		iu := cmdIU(tag, lun0, cdb, outFmt, inFmt, outCnt, inCnt, addLen, add)
		if r.IntN(10) == 0 {
			iu = iu[:16+r.IntN(len(iu)-16)]
		}
		p.writes = nil
		if err := p.send(iu); err != nil {
			t.Fatal(err)
		}
		p.expectRsp(t, tag)
		for _, w := range p.writes {
			if !inSpan(w.STag, w.TO, w.N) {
				t.Fatalf("IU % x: RDMA WRITE %+v outside the peer's memory", iu, w)
			}
		}
	}
	p.send(tur(1))
	if rsp := p.expectRsp(t, 1); rsp.Status != 0 {
		t.Fatalf("TEST UNIT READY after the random commands: status %#x", rsp.Status)
	}
}
