package hostile

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
)

// readLBA reads one block through a well-behaved initiator.
func (tg *tgt) readLBA(t *testing.T, lba uint64) []byte {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	dev := iwarp.NewDevice(iwarp.Config{Logger: testLogger(t)})
	defer dev.Close()
	s, err := initiator.Dial(ctx, dev, initiator.Options{
		IDExt: guid, IOCGUID: guid, Dest: tg.addr, InitiatorExt: 0x600d, InitiatorGUID: 0x600d,
		ChCount: 1, ReconnectDelay: -1, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	defer s.Close()
	b := make([]byte, blockSize)
	// The first command of the nexus may report the power-on UNIT
	// ATTENTION; the initiator's READ(16) then fails once.
	for i := 0; ; i++ {
		err = s.Read16(ctx, initiator.LUN(0), lba, b, blockSize, false)
		if err == nil || i == 1 {
			break
		}
	}
	if err != nil {
		t.Fatalf("READ(16) LBA %d: %v", lba, err)
	}
	return b
}

// TestReadResponseAttacks: the target RDMA READs a WRITE's data-out from
// the peer; the peer answers with a Read Response that is shorter or longer
// than the RDMA Read Message Size, or aimed elsewhere. RFC 5041 §7.2 /
// Linux siw (siw_rresp_check_ntoh): the requester terminates with DDP
// 1/1/0x01 (base or bounds) when the response does not fill exactly the
// requested length, 1/1/0x00 for a wrong sink STag; nothing outside the
// sink is touched and the WRITE must not reach the medium with data the
// peer never sent (for a short response: stale bytes of a pooled buffer).
func TestReadResponseAttacks(t *testing.T) {
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	cases := []struct {
		name             string
		data             func(r readRequest) []byte
		sink             func(r readRequest) (uint32, uint64)
		layer, typ, code byte
		// rewrite sends the first half twice (segments at offset 0, the
		// second one last): the total is right, the second half a hole.
		rewrite bool
	}{
		{"short", func(r readRequest) []byte { return fill(0xaa, int(r.Size)/2) }, nil, 1, 1, 0x01, false},
		{"empty", func(r readRequest) []byte { return nil }, nil, 1, 1, 0x01, false},
		{"long", func(r readRequest) []byte { return fill(0xaa, int(r.Size)+64) }, nil, 1, 1, 0x01, false},
		{"wrong-sink-stag", func(r readRequest) []byte { return fill(0xaa, int(r.Size)) }, func(r readRequest) (uint32, uint64) { return r.SinkSTag ^ 0x100, r.SinkTO }, 1, 1, 0x00, false},
		{"sink-to-before", func(r readRequest) []byte { return fill(0xaa, int(r.Size)) }, func(r readRequest) (uint32, uint64) { return r.SinkSTag, r.SinkTO - 16 }, 1, 1, 0x01, false},
		{"sink-to-after", func(r readRequest) []byte { return fill(0xaa, int(r.Size)) }, func(r readRequest) (uint32, uint64) { return r.SinkSTag, r.SinkTO + 16 }, 1, 1, 0x01, false},
		{"rewrite-leaves-hole", func(r readRequest) []byte { return fill(0xaa, int(r.Size)/2) }, nil, 1, 1, 0x01, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
			p, _ := loggedIn(t, tg.addr)
			// A full WRITE of 0x55 leaves a 0x55 buffer in the channel's pool.
			p.readData = func(r readRequest) []byte { return fill(0x55, int(r.Size)) }
			p.send(cmdIU(1, lun0, write10(10, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, blockSize)))
			if rsp := p.expectRsp(t, 1); rsp.Status != 0 {
				t.Fatalf("WRITE: status %#x", rsp.Status)
			}
			p.holdReads = true
			p.send(cmdIU(2, lun0, write10(11, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, blockSize)))
			for len(p.heldReads) == 0 {
				f, err := p.readFPDU()
				if err != nil {
					t.Fatal(err)
				}
				if !f.tagged && f.opcode == 1 {
					h := f.ulpdu[18:]
					p.heldReads = append(p.heldReads, readRequest{SinkSTag: be32(h[0:]), SinkTO: uint64(be32(h[4:]))<<32 | uint64(be32(h[8:])), Size: be32(h[12:])})
				}
			}
			r := p.heldReads[0]
			stag, to := r.SinkSTag, r.SinkTO
			if c.sink != nil {
				stag, to = c.sink(r)
			}
			data := c.data(r)
			if c.rewrite {
				p.write(p.fpdu(append(tagged(false, 2, stag, to), data...)))
			}
			u := append(tagged(true, 2, stag, to), data...)
			p.write(p.fpdu(u))
			p.expectTerminate(c.layer, c.typ, c.code)
			tg.waitSessions(t, 0)
			if got := tg.readLBA(t, 11); !bytes.Equal(got, make([]byte, blockSize)) {
				t.Fatalf("LBA 11 after a refused WRITE holds % x ...: data the peer never sent reached the medium", got[:32])
			}
		})
	}
}
