package hostile

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// The raw peer's pretend memory for data descriptors: the target RDMA
// WRITEs data-in here and RDMA READs data-out from here.
const (
	peerSTag = 0x00abcd01
	peerVA   = 0x10000
)

// SRP_CMD buffer formats (T10 SRP r16a table 24; SRP-2 immediate).
const (
	fmtNone     = 0
	fmtDirect   = 1
	fmtIndirect = 2
	fmtImm      = 3
)

// cmdIU builds an SRP_CMD byte by byte (struct srp_cmd): opcode 02h, buf_fmt
// (DATA-OUT format in the high nibble), the descriptor counts, tag, LUN,
// add_cdb_len, the 16-byte CDB, then addData (additional CDB bytes and
// descriptors).
func cmdIU(tag, lun uint64, cdb []byte, outFmt, inFmt, outCnt, inCnt byte, addCDBLen byte, addData []byte) []byte {
	b := make([]byte, 48+len(addData))
	b[0] = 0x02
	b[5] = outFmt<<4 | inFmt
	b[6], b[7] = outCnt, inCnt
	binary.BigEndian.PutUint64(b[8:], tag)
	binary.BigEndian.PutUint64(b[20:], lun)
	b[31] = addCDBLen
	copy(b[32:48], cdb)
	copy(b[48:], addData)
	return b
}

// direct is a 16-byte memory descriptor (struct srp_direct_buf).
func direct(va uint64, key, n uint32) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, va)
	binary.BigEndian.PutUint32(b[8:], key)
	binary.BigEndian.PutUint32(b[12:], n)
	return b
}

// indirect is struct srp_indirect_buf: table_desc, len, then the inline
// descriptors.
func indirect(table []byte, total uint32, descs ...[]byte) []byte {
	b := append([]byte(nil), table...)
	b = binary.BigEndian.AppendUint32(b, total)
	for _, d := range descs {
		b = append(b, d...)
	}
	return b
}

func read10(lba uint32, blocks uint16) []byte {
	c := []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], blocks)
	return c
}

func write10(lba uint32, blocks uint16) []byte {
	c := read10(lba, blocks)
	c[0] = 0x2a
	return c
}

// lun0 is LUN 0 in SAM single-level addressing.
const lun0 = 0

// loggedIn logs a raw peer in and clears the power-on UNIT ATTENTION.
func loggedIn(t *testing.T, addr string) (*rawPeer, *srp.LoginResponse) {
	t.Helper()
	p := dialRaw(t, addr)
	lr := p.mustLogin(false)
	p.send(tur(0xffff0001))
	p.expectRsp(t, 0xffff0001)
	return p, lr
}

// expectSense checks an SRP_RSP for CHECK CONDITION with fixed or
// descriptor sense key/ASC/ASCQ.
func expectSense(t *testing.T, rsp *srp.Rsp, key, asc, ascq byte) {
	t.Helper()
	if rsp.Status != 2 {
		t.Fatalf("status %#x, want CHECK CONDITION (sense % x)", rsp.Status, rsp.Sense)
	}
	if rsp.Flags&srp.SnsValid == 0 || len(rsp.Sense) < 14 {
		t.Fatalf("no sense data (flags %#x, % x)", rsp.Flags, rsp.Sense)
	}
	var k, a, q byte
	switch rsp.Sense[0] & 0x7f {
	case 0x70, 0x71:
		k, a, q = rsp.Sense[2]&0xf, rsp.Sense[12], rsp.Sense[13]
	case 0x72, 0x73:
		k, a, q = rsp.Sense[1]&0xf, rsp.Sense[2], rsp.Sense[3]
	default:
		t.Fatalf("sense response code %#x", rsp.Sense[0])
	}
	if k != key || a != asc || q != ascq {
		t.Fatalf("sense %02x/%02x/%02x, want %02x/%02x/%02x", k, a, q, key, asc, ascq)
	}
}

// TestSRPMalformedCmd sends SRP_CMDs whose descriptors break T10 SRP r16a
// §6.8 or the target's limits: each is answered with CHECK CONDITION,
// ILLEGAL REQUEST, INVALID FIELD IN CDB (05/24/00) and the same tag, no
// data moves, and the channel keeps serving.
func TestSRPMalformedCmd(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	d512 := direct(peerVA, peerSTag, 512)
	cases := []struct {
		name string
		iu   []byte
	}{
		{"bidirectional", cmdIU(1, lun0, read10(0, 1), fmtDirect, fmtDirect, 1, 1, 0, append(append([]byte(nil), d512...), d512...))},
		{"data-in-4GiB", cmdIU(2, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 0xffffffff))},
		{"data-out-over-max", cmdIU(3, lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 64<<20))},
		{"direct-count-2", cmdIU(4, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 2, 0, append(append([]byte(nil), d512...), d512...))},
		{"direct-missing", cmdIU(5, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 0, nil)},
		{"format-5", cmdIU(6, lun0, read10(0, 1), fmtNone, 5, 0, 1, 0, d512)},
		{"format-15-out", cmdIU(7, lun0, write10(0, 1), 15, fmtNone, 1, 0, 0, d512)},
		{"imm-in-data-in", cmdIU(8, lun0, read10(0, 1), fmtNone, fmtImm, 0, 0, 0, []byte{0, 0, 2, 0})},
		{"imm-not-negotiated", cmdIU(9, lun0, write10(0, 1), fmtImm, fmtNone, 0, 0, 0, append([]byte{0, 0, 2, 0}, make([]byte, 512)...))},
		{"indirect-count-beyond-iu", cmdIU(10, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 200, 0, indirect(direct(peerVA, peerSTag, 200*16), 512, d512))},
		{"indirect-sum-mismatch", cmdIU(11, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 1, 0, indirect(direct(peerVA, peerSTag, 16), 4096, d512))},
		{"indirect-table-not-multiple", cmdIU(12, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 1, 0, indirect(direct(peerVA, peerSTag, 17), 512, d512))},
		{"indirect-table-shorter-than-inline", cmdIU(13, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 2, 0, indirect(direct(peerVA, peerSTag, 16), 1024, d512, d512))},
		{"indirect-external-huge", cmdIU(14, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 1, 0, indirect(direct(peerVA, peerSTag, 0xfffffff0), 512, d512))},
		{"indirect-len-overflow-32", cmdIU(15, lun0, read10(0, 1), fmtNone, fmtIndirect, 0, 2, 0, indirect(direct(peerVA, peerSTag, 32), 0x200, direct(peerVA, peerSTag, 0xffffff00), direct(peerVA, peerSTag, 0x300)))},
		{"add-cdb-len-beyond-iu", cmdIU(16, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 252, d512)},
		{"truncated-cmd", cmdIU(17, lun0, read10(0, 1), 0, 0, 0, 0, 0, nil)[:24]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tag := binary.BigEndian.Uint64(c.iu[8:])
			p.writes = nil
			if err := p.send(c.iu); err != nil {
				t.Fatal(err)
			}
			rsp := p.expectRsp(t, tag)
			expectSense(t, rsp, 5, 0x24, 0)
			if len(p.writes) != 0 {
				t.Errorf("target wrote data for a refused command: %+v", p.writes)
			}
		})
	}
	// The channel still serves: READ(10) of one block lands in the
	// descriptor and nowhere else.
	p.writes = nil
	p.send(cmdIU(100, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 0, d512))
	if rsp := p.expectRsp(t, 100); rsp.Status != 0 {
		t.Fatalf("READ(10) after the malformed commands: status %#x", rsp.Status)
	}
	checkWrites(t, p.writes, peerSTag, peerVA, 512, 512)
	p.nc.Close()
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}

// checkWrites checks that the target's RDMA WRITEs stayed inside
// [va, va+n) of stag and moved want bytes in all.
func checkWrites(t *testing.T, ws []writeSeg, stag uint32, va uint64, n, want int) {
	t.Helper()
	got := 0
	for _, w := range ws {
		if w.STag != stag || w.TO < va || w.TO+uint64(w.N) > va+uint64(n) {
			t.Errorf("RDMA WRITE of %d bytes to STag %#x TO %#x outside the %d-byte descriptor at %#x/%#x", w.N, w.STag, w.TO, n, stag, va)
		}
		got += w.N
	}
	if got != want {
		t.Errorf("RDMA WRITEs moved %d bytes, want %d", got, want)
	}
}

// TestSRPResiduals: a data-in descriptor shorter than the CDB's transfer
// gets exactly its length and DIOVER with the residual; a longer one gets
// the transfer and DIUNDER (T10 SRP r16a §6.9 SRP_RSP flags), and no byte
// lands outside the descriptor.
func TestSRPResiduals(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)

	p.writes = nil
	p.send(cmdIU(1, lun0, read10(0, 8), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 512)))
	rsp := p.expectRsp(t, 1)
	if rsp.Status != 0 || rsp.Flags&srp.DataInOver == 0 || rsp.DataInResCnt != 4096-512 {
		t.Errorf("READ 8 blocks into 512 bytes: status %#x flags %#x data_in_res_cnt %d, want GOOD, DIOVER, 3584", rsp.Status, rsp.Flags, rsp.DataInResCnt)
	}
	checkWrites(t, p.writes, peerSTag, peerVA, 512, 512)

	p.writes = nil
	p.send(cmdIU(2, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 4096)))
	rsp = p.expectRsp(t, 2)
	if rsp.Status != 0 || rsp.Flags&srp.DataInUnder == 0 || rsp.DataInResCnt != 4096-512 {
		t.Errorf("READ 1 block into 4096 bytes: status %#x flags %#x data_in_res_cnt %d, want GOOD, DIUNDER, 3584", rsp.Status, rsp.Flags, rsp.DataInResCnt)
	}
	checkWrites(t, p.writes, peerSTag, peerVA, 4096, 512)

	// WRITE with a data-out buffer that disagrees with the CDB: Linux LIO
	// (target_cmd_size_check) rejects underflow and overflow of a WRITE
	// data CDB with INVALID FIELD IN COMMAND INFORMATION UNIT (05/0E/03),
	// reporting the residual (DOOVER / DOUNDER). No RDMA READ may leave the
	// descriptor.
	var reads []readRequest
	p.readData = func(r readRequest) []byte {
		reads = append(reads, r)
		return make([]byte, r.Size)
	}
	for _, c := range []struct {
		tag    uint64
		blocks uint16
		desc   uint32
		flag   srp.RspFlags
	}{{3, 8, 512, srp.DataOutOver}, {4, 1, 4096, srp.DataOutUnder}} {
		reads = nil
		p.send(cmdIU(c.tag, lun0, write10(0, c.blocks), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, c.desc)))
		rsp = p.expectRsp(t, c.tag)
		expectSense(t, rsp, 5, 0x0e, 3)
		if rsp.Flags&c.flag == 0 || rsp.DataOutResCnt != 4096-512 {
			t.Errorf("WRITE %d blocks from %d bytes: flags %#x data_out_res_cnt %d, want flag %#x and 3584", c.blocks, c.desc, rsp.Flags, rsp.DataOutResCnt, c.flag)
		}
		for _, r := range reads {
			if r.SourceSTag != peerSTag || r.SourceTO < peerVA || r.SourceTO+uint64(r.Size) > peerVA+uint64(c.desc) {
				t.Errorf("RDMA READ of %d bytes at %#x/%#x outside the %d-byte descriptor", r.Size, r.SourceSTag, r.SourceTO, c.desc)
			}
		}
	}
	// The channel still serves.
	p.writes = nil
	p.send(cmdIU(5, lun0, read10(0, 1), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 512)))
	if rsp = p.expectRsp(t, 5); rsp.Status != 0 {
		t.Fatalf("READ(10): status %#x", rsp.Status)
	}
}

// TestSRPTMF: task management with an unknown tag, an unknown function, a
// LUN that does not exist, and a truncated IU get the SRP_RSP response
// codes ib_srpt gives (RSPVALID, response data byte 3).
func TestSRPTMF(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	tmf := func(tag uint64, fn srp.TMF, lun, task uint64) []byte {
		b, _ := (&srp.TaskMgmt{Tag: tag, LUN: lun, Func: fn, TaskTag: task}).Marshal()
		return b
	}
	cases := []struct {
		name string
		iu   []byte
		tag  uint64
		code byte
	}{
		{"abort-unknown-tag", tmf(1, srp.TMFAbortTask, lun0, 0xdead), 1, srp.TMFRspFailed},
		{"function-0x77", tmf(2, srp.TMF(0x77), lun0, 0), 2, srp.TMFRspNotSupported},
		{"lun-reset-missing-lun", tmf(3, srp.TMFLUNReset, 0x0005000000000000, 0), 3, 0x09},
		{"abort-task-set", tmf(4, srp.TMFAbortTaskSet, lun0, 0), 4, srp.TMFRspComplete},
		{"truncated", tmf(5, srp.TMFAbortTask, lun0, 1)[:20], 5, srp.TMFRspInvalidIU},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.send(c.iu)
			rsp := p.expectRsp(t, c.tag)
			if rsp.Flags&srp.RspValid == 0 || len(rsp.RespData) != 4 {
				t.Fatalf("TMF response flags %#x response data % x, want RSPVALID and 4 bytes", rsp.Flags, rsp.RespData)
			}
			if rsp.RespData[3] != c.code {
				t.Errorf("TMF response code %#x, want %#x", rsp.RespData[3], c.code)
			}
		})
	}
	p.send(tur(50))
	if rsp := p.expectRsp(t, 50); rsp.Status != 0 {
		t.Fatalf("TEST UNIT READY after the TMFs: status %#x", rsp.Status)
	}
}

// TestSRPTagReuseAndAbort: a command waits for its data-out (the peer holds
// back the Read Response); a second command with the same tag gets
// CHECK CONDITION, OVERLAPPED COMMANDS ATTEMPTED (0B/4E/00); ABORT TASK
// of the waiting command then completes once its data arrived, and the
// aborted command is not answered.
func TestSRPTagReuseAndAbort(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	p.holdReads = true
	p.send(cmdIU(7, lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 512)))
	p.send(tur(7))
	rsp := p.expectRsp(t, 7)
	expectSense(t, rsp, 0x0b, 0x4e, 0)
	if len(p.heldReads) != 1 {
		t.Fatalf("%d RDMA Read Requests for the WRITE, want 1", len(p.heldReads))
	}
	b, _ := (&srp.TaskMgmt{Tag: 8, LUN: lun0, Func: srp.TMFAbortTask, TaskTag: 7}).Marshal()
	p.send(b)
	// Now let the data arrive.
	p.holdReads = false
	if err := p.answerRead(p.heldReads[0]); err != nil {
		t.Fatal(err)
	}
	rsp = p.expectRsp(t, 8)
	if rsp.Flags&srp.RspValid == 0 || len(rsp.RespData) != 4 || rsp.RespData[3] != srp.TMFRspComplete {
		t.Fatalf("ABORT TASK response flags %#x data % x, want FUNCTION COMPLETE", rsp.Flags, rsp.RespData)
	}
	p.send(tur(9))
	rsp = p.expectRsp(t, 9) // fails if the aborted command (tag 7) answered first
	if rsp.Status != 0 {
		t.Fatalf("TEST UNIT READY: status %#x", rsp.Status)
	}
}

// TestSRPUnansweredRead: the peer never answers the target's RDMA READ.
// I_LOGOUT, a port close and a TCP reset must still end the channel in
// bounded time without leaking.
func TestSRPUnansweredRead(t *testing.T) {
	t.Run("logout", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
		p, _ := loggedIn(t, tg.addr)
		p.holdReads = true
		p.send(cmdIU(7, lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 512)))
		p.send(tur(8))
		p.expectRsp(t, 8)
		b, _ := (&srp.ILogout{Tag: 9}).Marshal()
		p.send(b)
		p.expectEOF()
		tg.waitSessions(t, 0)
		tg.wellBehaved(t)
	})
	t.Run("port-close", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
		p, _ := loggedIn(t, tg.addr)
		p.holdReads = true
		p.send(cmdIU(7, lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 512)))
		p.send(tur(8))
		p.expectRsp(t, 8)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tg.port.Close(ctx); err != nil {
			t.Fatalf("port Close with an RDMA READ unanswered: %v", err)
		}
	})
	t.Run("abort-then-reset", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
		p, _ := loggedIn(t, tg.addr)
		p.holdReads = true
		p.send(cmdIU(7, lun0, write10(0, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 512)))
		b, _ := (&srp.TaskMgmt{Tag: 8, LUN: lun0, Func: srp.TMFAbortTask, TaskTag: 7}).Marshal()
		p.send(b)
		p.send(tur(9))
		p.expectRsp(t, 9)
		rst(p)
		tg.waitSessions(t, 0)
		tg.wellBehaved(t)
	})
}

// TestSRPUnexpectedIUs: the first IU of an unknown or target-to-initiator
// type is ignored; the second gets SRP_T_LOGOUT with reason 2 (invalid IU
// type code, T10 SRP r16a §6.6 table 19) and the channel closes.
func TestSRPUnexpectedIUs(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	for _, c := range []struct {
		name  string
		first []byte
	}{
		{"unknown-opcode", []byte{0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"srp-rsp", func() []byte { b, _ := (&srp.Rsp{Tag: 3}).Marshal(); return b }()},
		{"second-login", func() []byte {
			lr := srp.LoginRequest{Tag: 3, ReqITIULen: 8260, ReqBufFmt: srp.BufFmtDirect, InitiatorPortID: initiatorID, TargetPortID: srp.NewPortID(guid, guid)}
			b, _ := lr.Marshal()
			return b
		}()},
		{"empty", []byte{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := loggedIn(t, tg.addr)
			p.send(c.first)
			p.send(tur(10))
			if rsp := p.expectRsp(t, 10); rsp.Status != 0 {
				t.Fatalf("TEST UNIT READY after one unexpected IU: status %#x", rsp.Status)
			}
			p.send(c.first)
			for {
				iu, err := p.recvIU()
				if err != nil {
					t.Fatalf("no SRP_T_LOGOUT after a second unexpected IU: %v", err)
				}
				if len(iu) > 0 && srp.Opcode(iu[0]) == srp.OpTLogout {
					lo, err := srp.UnmarshalTLogout(iu)
					if err != nil {
						t.Fatal(err)
					}
					if lo.Reason != srp.TLogoutInvalidIUType {
						t.Errorf("SRP_T_LOGOUT reason %v, want %v", lo.Reason, srp.TLogoutInvalidIUType)
					}
					break
				}
			}
			p.expectEOF()
		})
	}
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}

// TestSRPAfterILogout: IUs sent right behind SRP_I_LOGOUT are not
// executed: no SRP_RSP comes back, and the connection closes.
func TestSRPAfterILogout(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, _ := loggedIn(t, tg.addr)
	b, _ := (&srp.ILogout{Tag: 1}).Marshal()
	var burst []byte
	burst = append(burst, p.fpdu(append(untagged(true, 3, 0, 0, p.msn[0], 0), b...))...)
	p.msn[0]++
	// A WRITE behind the logout must not reach the medium.
	for i := 0; i < 4; i++ {
		burst = append(burst, p.fpdu(append(untagged(true, 3, 0, 0, p.msn[0], 0), cmdIU(uint64(20+i), lun0, write10(1000, 1), fmtDirect, fmtNone, 1, 0, 0, direct(peerVA, peerSTag, 512))...))...)
		p.msn[0]++
	}
	p.write(burst)
	for {
		iu, err := p.recvIU()
		if err != nil {
			break
		}
		if len(iu) > 0 && srp.Opcode(iu[0]) == srp.OpRsp {
			t.Errorf("SRP_RSP after SRP_I_LOGOUT: % x", iu)
		}
	}
	if len(p.writes) != 0 {
		t.Errorf("RDMA traffic after SRP_I_LOGOUT: %+v", p.writes)
	}
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}

// TestSRPCreditOverrun sends far more SRP_CMDs than req_lim in one burst.
// iWARP has no RNR retry, so the target either answers every one or, once
// its receive ring is exhausted, terminates with DDP 1/2/0x02 (no buffer,
// RFC 5041 §7.2); it must not hang or crash, and keeps serving others.
func TestSRPCreditOverrun(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	p, lr := loggedIn(t, tg.addr)
	n := int(lr.ReqLimDelta)*4 + 20
	var burst []byte
	for i := 0; i < n; i++ {
		burst = append(burst, p.fpdu(append(untagged(true, 3, 0, 0, p.msn[0], 0), tur(uint64(1000+i))...))...)
		p.msn[0]++
	}
	go p.write(burst)
	answered := 0
	for answered < n {
		f, err := p.readFPDU()
		if err != nil {
			t.Fatalf("stream ended after %d of %d responses without a Terminate: %v", answered, n, err)
		}
		if f.tagged {
			continue
		}
		if f.opcode == 7 {
			if f.payload[0] != 0x12 || f.payload[1] != 0x02 {
				t.Fatalf("Terminate % x after %d responses, want DDP 1/2/0x02", f.payload[:4], answered)
			}
			t.Logf("credit overrun: %d of %d answered, then Terminate DDP 1/2/0x02", answered, n)
			p.expectEOF()
			break
		}
		if len(f.payload) > 0 && srp.Opcode(f.payload[0]) == srp.OpRsp {
			answered++
		}
	}
	if answered == n {
		t.Logf("credit overrun: all %d answered", n)
	}
	p.nc.Close()
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}
