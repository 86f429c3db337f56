package hostile

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gosrp/gosrp/srp"
)

// tableVA is where the raw peer keeps an external descriptor table.
const tableVA = 0x20000

// TestExternalTable: an indirect descriptor whose table lies in initiator
// memory (T10 SRP r16a §5.7.4: table_desc longer than the inline list) is
// fetched by RDMA READ; a fetched table whose lengths do not add up to the
// indirect buffer's len, also by 32-bit wrap-around, gets CHECK CONDITION
// 05/24/00; a consistent one moves exactly the data it names.
func TestExternalTable(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	const va1, va2 = 0x40000, 0x50000
	cases := []struct {
		name  string
		table [][]byte
		good  bool
	}{
		{"consistent", [][]byte{direct(va1, peerSTag, 512), direct(va2, peerSTag+1, 512)}, true},
		{"sum-short", [][]byte{direct(va1, peerSTag, 512), direct(va2, peerSTag, 256)}, false},
		{"sum-long", [][]byte{direct(va1, peerSTag, 512), direct(va2, peerSTag, 1000)}, false},
		{"sum-wraps-32-bits", [][]byte{direct(va1, peerSTag, 0xffffffff), direct(va2, peerSTag, 0x401)}, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tag := uint64(100 + i)
			var reads []readRequest
			p.readData = func(r readRequest) []byte {
				reads = append(reads, r)
				if r.SourceTO == tableVA {
					return bytes.Join(c.table, nil)
				}
				return make([]byte, r.Size)
			}
			p.writes = nil
			// READ(10) of 2 blocks; one descriptor inline, the table holds two.
			iu := cmdIU(tag, lun0, read10(0, 2), fmtNone, fmtIndirect, 0, 1, 0,
				indirect(direct(tableVA, peerSTag, 32), 1024, direct(va1, peerSTag, 512)))
			p.send(iu)
			rsp := p.expectRsp(t, tag)
			if len(reads) != 1 || reads[0].SourceTO != tableVA || reads[0].Size != 32 || reads[0].SourceSTag != peerSTag {
				t.Fatalf("RDMA READs %+v, want one of the 32-byte table", reads)
			}
			if !c.good {
				expectSense(t, rsp, 5, 0x24, 0)
				if len(p.writes) != 0 {
					t.Fatalf("data moved for a refused table: %+v", p.writes)
				}
				return
			}
			if rsp.Status != 0 {
				t.Fatalf("status %#x sense % x", rsp.Status, rsp.Sense)
			}
			if len(p.writes) != 2 || p.writes[0] != (writeSeg{peerSTag, va1, 512}) || p.writes[1] != (writeSeg{peerSTag + 1, va2, 512}) {
				t.Fatalf("RDMA WRITEs %+v, want 512 bytes at %#x/%#x and %#x/%#x", p.writes, peerSTag, va1, peerSTag+1, va2)
			}
		})
	}
}

// TestImmediateData: with SRP-2 immediate data negotiated (offset 68),
// immediate data that claims more bytes than the IU holds gets CHECK
// CONDITION 05/24/00, an IU beyond max_it_iu_len a Terminate; a
// well-formed one is written.
func TestImmediateData(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p := dialRaw(t, tg.addr)
	rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) {
		l.ReqFlags |= srp.LoginImmRequested
		l.ImmDataOffset = srp.DefaultImmDataOffset
	}), false)
	if rej {
		t.Fatalf("login rejected % x", pd)
	}
	lr, err := srp.UnmarshalLoginResponse(pd)
	if err != nil {
		t.Fatal(err)
	}
	if lr.RspFlags&srp.LoginRspImmSupp == 0 {
		t.Fatalf("LOGIN_RSP flags %#x without IMMED_SUPP", lr.RspFlags)
	}
	p.send(tur(1))
	p.expectRsp(t, 1)
	imm := func(tag uint64, blocks uint16, claim uint32, data []byte) []byte {
		// imm_buf (its 4-byte len) follows the CDB at byte 48; the data
		// starts at imm_data_offset 68.
		b := cmdIU(tag, lun0, write10(200, blocks), fmtImm, fmtNone, 0, 0, 0, nil)
		b = binary.BigEndian.AppendUint32(b, claim)
		b = append(b, make([]byte, srp.DefaultImmDataOffset-len(b))...)
		return append(b, data...)
	}
	blk := bytes.Repeat([]byte{0x5a}, blockSize)
	cases := []struct {
		name string
		iu   []byte
		ok   bool
	}{
		{"claims-more-than-iu", imm(10, 8, 4096, blk), false},
		{"claims-4GiB", imm(11, 1, 0xffffffff, blk), false},
		{"well-formed", imm(13, 1, blockSize, blk), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tag := binary.BigEndian.Uint64(c.iu[8:])
			p.send(c.iu)
			rsp := p.expectRsp(t, tag)
			if !c.ok {
				expectSense(t, rsp, 5, 0x24, 0)
				return
			}
			if rsp.Status != 0 {
				t.Fatalf("status %#x sense % x", rsp.Status, rsp.Sense)
			}
		})
	}
	// An IU longer than max_it_iu_len (8276) does not fit the receive
	// buffer: DDP 1/2/0x05 (RFC 5041 §7.2, message too long).
	if lr.MaxITIULen != 8276 {
		t.Errorf("max_it_iu_len %d, want ib_srpt's 8276", lr.MaxITIULen)
	}
	p.send(imm(12, 16, 8400, make([]byte, 8400)))
	p.expectTerminate(1, 2, 0x05)
	if got := tg.readLBA(t, 200); !bytes.Equal(got, blk) {
		t.Fatalf("LBA 200 holds % x..., want the immediate data", got[:16])
	}
	tg.wellBehaved(t)
}
