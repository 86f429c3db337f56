package hostile

import (
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// TestManyTinyDescriptors: data-in scattered over 4096 one-byte
// descriptors (an external table, the most the target accepts), several
// commands at once: every byte lands exactly in its descriptor, each
// command is answered GOOD, nothing hangs on send queue accounting.
func TestManyTinyDescriptors(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	const n = 4096 // descriptors = bytes = 8 blocks
	const base = 0x100000
	table := make([]byte, 0, n*16)
	for i := 0; i < n; i++ {
		// Every other byte of the peer's buffer, so the pieces never merge.
		table = append(table, direct(base+uint64(2*i), peerSTag, 1)...)
	}
	p.readData = func(r readRequest) []byte { return table }
	const cmds = 6
	for c := 0; c < cmds; c++ {
		p.send(cmdIU(uint64(100+c), lun0, read10(0, 8), fmtNone, fmtIndirect, 0, 1, 0,
			indirect(direct(tableVA, peerSTag, n*16), n, direct(base, peerSTag, 1))))
	}
	got := map[uint64]bool{}
	for c := 0; c < cmds; c++ {
		iu, err := p.recvIU()
		if err != nil {
			t.Fatalf("after %d responses: %v", c, err)
		}
		if srp.Opcode(iu[0]) != srp.OpRsp {
			c--
			continue
		}
		rsp, err := srp.UnmarshalRsp(iu)
		if err != nil {
			t.Fatal(err)
		}
		if rsp.Status != 0 {
			t.Errorf("tag %d status %#x sense % x", rsp.Tag, rsp.Status, rsp.Sense)
		}
		got[rsp.Tag] = true
	}
	if len(got) != cmds {
		t.Fatalf("answers for %v, want %d commands", got, cmds)
	}
	total := 0
	for _, w := range p.writes {
		if w.STag != peerSTag || w.TO < base || w.TO >= base+2*n || (w.TO-base)%2 != 0 || w.N != 1 {
			t.Fatalf("RDMA WRITE %+v outside the one-byte descriptors", w)
		}
		total += w.N
	}
	if total != cmds*n {
		t.Fatalf("%d bytes written, want %d", total, cmds*n)
	}
}
