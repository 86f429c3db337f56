package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

func direct(d srp.DirectBuf) srp.DataBuf {
	return srp.DataBuf{Format: srp.DescDirect, Desc: []srp.DirectBuf{d}}
}

// split describes [off, off+n) of initiator memory as k descriptors laid out
// in scrambled order, so data must be gathered per descriptor.
func (i *ini) split(off, n, k int) []srp.DirectBuf {
	var ds []srp.DirectBuf
	per := n / k
	for j := range k {
		l := per
		if j == k-1 {
			l = n - per*(k-1)
		}
		// descriptor j addresses a piece placed at off + (k-1-j)*per' region
		_, d := i.buf(off+j*per, l)
		ds = append(ds, d)
	}
	return ds
}

func indirect(ds []srp.DirectBuf, inline int, table srp.DirectBuf) srp.DataBuf {
	var total uint32
	for _, d := range ds {
		total += d.Len
	}
	return srp.DataBuf{Format: srp.DescIndirect, Desc: ds[:inline], Table: table, Len: total}
}

// tableAt writes ds as a descriptor table into initiator memory at off.
func (i *ini) tableAt(off int, ds []srp.DirectBuf) srp.DirectBuf {
	b, d := i.buf(off, 16*len(ds))
	for k, x := range ds {
		binary.BigEndian.PutUint64(b[16*k:], x.VA)
		binary.BigEndian.PutUint32(b[16*k+8:], x.Key)
		binary.BigEndian.PutUint32(b[16*k+12:], x.Len)
	}
	return d
}

func checkGood(t *testing.T, r *srp.Rsp, tag uint64) {
	t.Helper()
	if r.Tag != tag || r.Status != 0 || r.Flags != 0 || len(r.Sense) != 0 {
		t.Fatalf("tag %d: rsp %+v", tag, r)
	}
}

// TestWriteReadDescriptors writes with one descriptor form and reads back
// with another; the data must round-trip through the core's RAM.
func TestWriteReadDescriptors(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	const n = 64 << 10
	forms := []struct {
		name string
		desc func(off int) srp.DataBuf
	}{
		{"direct", func(off int) srp.DataBuf { _, d := i.buf(off, n); return direct(d) }},
		{"indirect-inline", func(off int) srp.DataBuf {
			ds := i.split(off, n, 5)
			tbl := srp.DirectBuf{VA: 0xdead0000, Key: 0x1234, Len: 16 * 5} // never fetched: whole table inline
			return indirect(ds, 5, tbl)
		}},
		{"indirect-external", func(off int) srp.DataBuf {
			ds := i.split(off, n, 9)
			return indirect(ds, 2, i.tableAt(3<<20+off/16, ds))
		}},
		{"indirect-external-none-inline", func(off int) srp.DataBuf {
			ds := i.split(off, n, 3)
			return indirect(ds, 0, i.tableAt(3<<20+off/16+4096, ds))
		}},
	}
	tag := uint64(100)
	for _, w := range forms {
		for _, r := range forms {
			tag++
			src, _ := i.buf(0, n)
			fill(src, byte(tag))
			want := append([]byte(nil), src...)
			lba := uint32(tag%30) * 128
			i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x2a, lba, n/512), DataOut: w.desc(0)})
			checkGood(t, i.rspIU(), tag)
			dst, _ := i.buf(1<<20, n)
			clear(dst)
			tag++
			i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x28, lba, n/512), DataIn: r.desc(1 << 20)})
			checkGood(t, i.rspIU(), tag)
			if !bytes.Equal(dst, want) {
				t.Fatalf("write %s / read %s: data differs", w.name, r.name)
			}
		}
	}
}

// TestImmediateData sends write data inside the SRP_CMD at the negotiated
// offset and checks it reached the core 512-byte aligned.
func TestImmediateData(t *testing.T) {
	e := newEnv(t, nil)
	var addrs []uintptr
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if len(cmd.DataOut) > 0 {
			addrs = append(addrs, addrOf(cmd.DataOut))
		}
		return scsi.Result{}, false
	})
	i := e.login(defaultLogin())
	data := make([]byte, 4096)
	fill(data, 9)
	i.sendIU(&srp.Cmd{Tag: 1, CDB: cdb10(0x2a, 8, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: data})
	checkGood(t, i.rspIU(), 1)
	if !bytes.Equal(e.core.mem[8*512:8*512+4096], data) {
		t.Fatal("immediate data not written")
	}
	if len(addrs) != 1 || addrs[0]%512 != 0 {
		t.Fatalf("immediate data addresses %#x, want 512-byte aligned", addrs)
	}
	// Immediate data on a channel that did not negotiate it: CHECK CONDITION.
	lr := defaultLogin()
	lr.ReqFlags = srp.MultiChanMulti
	j := e.login(lr)
	j.sendIU(&srp.Cmd{Tag: 2, CDB: cdb10(0x2a, 8, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: data})
	checkSense(t, j.rspIU(), 2, 0x05, 0x24, 0x00)
}

func checkSense(t *testing.T, r *srp.Rsp, tag uint64, key, asc, ascq byte) {
	t.Helper()
	if r.Tag != tag || r.Status != 2 || r.Flags&srp.SnsValid == 0 || len(r.Sense) < 14 {
		t.Fatalf("tag %d: want CHECK CONDITION, got %+v", tag, r)
	}
	if r.Sense[0] != 0x70 || r.Sense[2]&0xf != key || r.Sense[12] != asc || r.Sense[13] != ascq {
		t.Fatalf("tag %d: sense % x, want %02x/%02x/%02x", tag, r.Sense, key, asc, ascq)
	}
}

// TestResiduals: descriptor totals against the CDB's transfer length
// (SRP_RSP flags DIUNDER 0x20 / DIOVER 0x10 / DOUNDER 0x08 / DOOVER 0x04).
func TestResiduals(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	_, d := i.buf(0, 8192)
	cases := []struct {
		cmd   srp.Cmd
		flags srp.RspFlags
		out   uint32
		in    uint32
	}{
		// READ of 4 blocks (2048 bytes) into an 8192-byte buffer: underflow 6144.
		{srp.Cmd{CDB: cdb10(0x28, 0, 4), DataIn: direct(d)}, srp.DataInUnder, 0, 6144},
		// READ of 32 blocks (16384 bytes) into 8192: overflow 8192.
		{srp.Cmd{CDB: cdb10(0x28, 0, 32), DataIn: direct(d)}, srp.DataInOver, 0, 8192},
		// WRITE of 4 blocks from 8192: underflow 6144.
		{srp.Cmd{CDB: cdb10(0x2a, 0, 4), DataOut: direct(d)}, srp.DataOutUnder, 6144, 0},
		// WRITE of 32 blocks from 8192: overflow 8192.
		{srp.Cmd{CDB: cdb10(0x2a, 0, 32), DataOut: direct(d)}, srp.DataOutOver, 8192, 0},
		// READ of 2 blocks with no buffer: overflow 1024.
		{srp.Cmd{CDB: cdb10(0x28, 0, 2)}, srp.DataInOver, 0, 1024},
		// exact
		{srp.Cmd{CDB: cdb10(0x28, 0, 16), DataIn: direct(d)}, 0, 0, 0},
	}
	for k, tc := range cases {
		tc.cmd.Tag = uint64(k + 1)
		i.sendIU(&tc.cmd)
		b := i.next()
		want := make([]byte, 36)
		want[0] = 0xc1
		binary.BigEndian.PutUint32(want[4:], 1)
		binary.BigEndian.PutUint64(want[8:], uint64(k+1))
		want[18] = byte(tc.flags)
		binary.BigEndian.PutUint32(want[20:], tc.out)
		binary.BigEndian.PutUint32(want[24:], tc.in)
		if !bytes.Equal(b, want) {
			t.Errorf("case %d\n got % x\nwant % x", k, b, want)
		}
	}
}

// TestMalformedCommands: bad descriptors get CHECK CONDITION, ILLEGAL
// REQUEST, INVALID FIELD IN CDB (05/24/00) and the channel stays usable.
func TestMalformedCommands(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxDataLen = 1 << 20 })
	i := e.login(defaultLogin())
	_, d := i.buf(0, 4096)
	good, _ := (&srp.Cmd{Tag: 1, CDB: make([]byte, 16), DataOut: direct(d)}).Marshal()
	mk := func(tag uint64, f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		binary.BigEndian.PutUint64(b[8:], tag)
		return f(b)
	}
	cases := map[uint64][]byte{
		// direct descriptor cut off
		10: mk(10, func(b []byte) []byte { return b[:55] }),
		// data_out_desc_cnt 2 for a direct descriptor
		11: mk(11, func(b []byte) []byte { b[6] = 2; return b }),
		// unknown format code 5
		12: mk(12, func(b []byte) []byte { b[5] = 0x50; return b }),
		// bidirectional
		13: func() []byte {
			b, _ := (&srp.Cmd{Tag: 13, CDB: make([]byte, 16), DataOut: direct(d), DataIn: direct(d)}).Marshal()
			return b
		}(),
		// indirect whose total disagrees with the inline list
		14: func() []byte {
			ds := i.split(0, 4096, 2)
			ind := indirect(ds, 2, srp.DirectBuf{Len: 32})
			b, _ := (&srp.Cmd{Tag: 14, CDB: make([]byte, 16), DataIn: ind}).Marshal()
			binary.BigEndian.PutUint32(b[48+16:], 9999)
			return b
		}(),
		// length over max_data_len
		15: func() []byte {
			b, _ := (&srp.Cmd{Tag: 15, CDB: make([]byte, 16), DataIn: direct(srp.DirectBuf{VA: d.VA, Key: d.Key, Len: 0xffffffff})}).Marshal()
			return b
		}(),
		// immediate data claimed beyond the IU
		16: func() []byte {
			b, _ := (&srp.Cmd{Tag: 16, CDB: make([]byte, 16), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: make([]byte, 100)}).Marshal()
			binary.BigEndian.PutUint32(b[48:], 5000)
			return b
		}(),
		// add_cdb_len beyond the IU
		17: mk(17, func(b []byte) []byte { b[31] = 0xfc; return b[:64] }),
		// external table whose entries disagree with the total
		18: func() []byte {
			ds := i.split(0, 4096, 4)
			tbl := i.tableAt(2<<20, ds)
			ind := indirect(ds, 1, tbl)
			ind.Len = 4000
			b, _ := (&srp.Cmd{Tag: 18, CDB: cdb10(0x28, 0, 8), DataIn: ind}).Marshal()
			return b
		}(),
	}
	for tag := uint64(10); tag <= 18; tag++ {
		i.send(cases[tag])
		checkSense(t, i.rspIU(), tag, 0x05, 0x24, 0x00)
	}
	// A truncated SRP_TSK_MGMT gets response code 02h.
	tm, _ := (&srp.TaskMgmt{Tag: 30, Func: srp.TMFLUNReset}).Marshal()
	i.send(tm[:20])
	r := i.rspIU()
	if code, ok := r.TMFCode(); !ok || code != 0x02 || r.Tag != 30 {
		t.Fatalf("truncated TMF: %+v", r)
	}
	// An IU too short to carry a tag is dropped; its credit comes back in
	// an SRP_CRED_REQ (nothing is outstanding), or with the next response
	// if that command was already in.
	i.send([]byte{0x02, 0, 0, 0})
	i.sendIU(&srp.Cmd{Tag: 40, CDB: make([]byte, 16)})
	want := uint32(2)
	if b := i.next(); b[0] == 0x81 {
		if len(b) != 16 || binary.BigEndian.Uint32(b[4:]) != 1 {
			t.Fatalf("CRED_REQ % x, want delta 1", b)
		}
		i.sendIU(&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])})
		want = 1
		r = i.rspIU()
	} else if r2, err := srp.UnmarshalRsp(b); err != nil {
		t.Fatalf("got % x: %v", b, err)
	} else {
		r = r2
	}
	if r.Tag != 40 || r.ReqLimDelta != want {
		t.Fatalf("after dropped IU: %+v, want req_lim_delta %d", r, want)
	}
	// A command reusing an outstanding tag: ABORTED COMMAND, OVERLAPPED
	// COMMANDS ATTEMPTED.
	release := make(chan struct{})
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.Tag == 50 {
			<-release
		}
		return scsi.Result{}, false
	})
	i.sendIU(&srp.Cmd{Tag: 50, CDB: make([]byte, 16)})
	i.sendIU(&srp.Cmd{Tag: 50, CDB: make([]byte, 16)})
	checkSense(t, i.rspIU(), 50, 0x0b, 0x4e, 0x00)
	close(release)
	checkGood(t, i.rspIU(), 50)
}

// TestUnknownOpcode: each kind of IU a target never accepts on a live
// channel (unknown type codes, target-to-initiator IUs, a second login) is
// ignored the first time, with its credit handed back; the second one on
// the channel gets SRP_T_LOGOUT reason 2 (invalid IU type code) and the
// channel closes.
func TestUnknownOpcode(t *testing.T) {
	iu := func(op byte, n int) []byte { b := make([]byte, n); b[0] = op; b[15] = 9; return b }
	for _, tc := range []struct {
		name string
		iu   []byte
	}{
		{"unknown 0x77", iu(0x77, 16)},
		{"unknown 0xff", iu(0xff, 64)},
		{"SRP_T_LOGOUT", iu(0x80, 16)},
		{"SRP_CRED_REQ", iu(0x81, 16)},
		{"SRP_AER_REQ", iu(0x82, 36)},
		{"SRP_LOGIN_RSP", iu(0xc0, 52)},
		{"SRP_RSP", iu(0xc1, 36)},
		{"SRP_LOGIN_REJ", iu(0xc2, 32)},
		{"SRP_LOGIN_REQ", iu(0x00, 64)},
		{"one byte", []byte{0x99}},
		{"empty SEND", []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			i := e.login(defaultLogin())
			i.send(tc.iu)
			// Nothing outstanding carries the credit: an SRP_CRED_REQ with
			// req_lim_delta 1 does.
			b := i.next()
			if len(b) != 16 || b[0] != 0x81 || binary.BigEndian.Uint32(b[4:]) != 1 {
				t.Fatalf("want SRP_CRED_REQ delta 1, got % x", b)
			}
			i.sendIU(&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])})
			i.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
			if r := i.rspIU(); r.Tag != 1 || r.ReqLimDelta != 1 || r.Status != 0 {
				t.Fatalf("rsp %+v", r)
			}
			i.send(tc.iu)
			ius := i.waitClosed()
			want := []byte{0x80, 0, 0, 0, 0, 0, 0, 2}
			if len(ius) != 1 || len(ius[0]) != 16 || !bytes.Equal(ius[0][:8], want) {
				t.Fatalf("got % x, want one SRP_T_LOGOUT reason 2", ius)
			}
		})
	}
}

// TestUnknownOpcodeCredit: the credit of an unexpected IU rides on the next
// SRP_RSP when a command is outstanding, and is not handed back when the
// initiator held none to spend; either way req_lim ends where it began.
func TestUnknownOpcodeCredit(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rq           int // req_lim at login
		before       int // commands outstanding before the unexpected IU
		after        int // commands sent after it
		wantDeltaSum uint32
	}{
		// req_lim 3: cmd, unexpected IU (spends and gets back one), cmd:
		// the two responses return 1 + 1 + the unexpected IU's credit.
		{"credit returned", 3, 1, 1, 3},
		// req_lim 2, both spent: the unexpected IU spent nothing and gets
		// nothing back.
		{"no credit held", 2, 2, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.RQSize = tc.rq })
			release := make(chan struct{})
			e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
				<-release
				return scsi.Result{}, true
			})
			i := e.login(defaultLogin())
			outstanding := func(n int) {
				waitFor(t, e, func() bool { s := e.port.Sessions(); return len(s) == 1 && s[0].Outstanding == n })
			}
			tag := uint64(0)
			for range tc.before {
				tag++
				i.sendIU(&srp.Cmd{Tag: tag, CDB: make([]byte, 16)})
			}
			outstanding(tc.before)
			i.send(append([]byte{0x55}, make([]byte, 15)...))
			waitFor(t, e, func() bool { s := e.port.Sessions(); return len(s) == 1 && s[0].Errors == 1 })
			for range tc.after {
				tag++
				i.sendIU(&srp.Cmd{Tag: tag, CDB: make([]byte, 16)})
			}
			outstanding(tc.before + tc.after)
			close(release)
			var sum uint32
			for range tag {
				r := i.rspIU()
				if r.ReqLimDelta == 0 {
					t.Fatalf("rsp %+v: req_lim_delta 0", r)
				}
				sum += r.ReqLimDelta
			}
			if sum != tc.wantDeltaSum {
				t.Fatalf("req_lim_deltas sum to %d, want %d", sum, tc.wantDeltaSum)
			}
			waitFor(t, e, func() bool { s := e.port.Sessions(); return len(s) == 1 && s[0].Outstanding == 0 })
			if s := e.port.Sessions(); s[0].ReqLim != tc.rq {
				t.Fatalf("req_lim %d, want %d", s[0].ReqLim, tc.rq)
			}
		})
	}
}

// TestSenseTruncated: sense data longer than max_ti_iu_len - 36 is cut.
func TestSenseTruncated(t *testing.T) {
	e := newEnv(t, nil)
	long := make([]byte, 200)
	long[0] = 0x70
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		return scsi.Result{Status: 2, Sense: long}, true
	})
	lr := defaultLogin()
	lr.ReqITIULen = 100 // max_ti_iu_len echoes it: 64 bytes of sense fit
	i := e.login(lr)
	i.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
	r := i.rspIU()
	if len(r.Sense) != 64 || r.Flags != srp.SnsValid {
		t.Fatalf("sense %d bytes, flags %#x; want 64, 0x02", len(r.Sense), r.Flags)
	}
	// With the default max_rsp_size (256) the sense is cut to 220.
	j := e.login(defaultLogin())
	j.sendIU(&srp.Cmd{Tag: 2, CDB: make([]byte, 16)})
	if r := j.rspIU(); len(r.Sense) != 200 {
		t.Fatalf("sense %d bytes, want 200", len(r.Sense))
	}
}

// TestCredits sends more commands than req_lim over time and checks the
// req_lim accounting: every response returns exactly one credit, and the
// initiator never runs out.
func TestCredits(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	lim := int(binary.BigEndian.Uint32(i.rsp[4:]))
	_, d := i.buf(0, 4096)
	tag := uint64(0)
	outstanding := 0
	for round := 0; round < 20; round++ {
		for lim > 0 {
			tag++
			i.sendIU(&srp.Cmd{Tag: tag, CDB: cdb10(0x28, uint32(tag%100), 8), DataIn: direct(d)})
			lim--
			outstanding++
		}
		for outstanding > 0 {
			r := i.rspIU()
			if r.ReqLimDelta != 1 || r.Status != 0 {
				t.Fatalf("rsp %+v", r)
			}
			lim += int(r.ReqLimDelta)
			outstanding--
		}
	}
	if lim != 16 {
		t.Fatalf("req_lim %d, want 16", lim)
	}
}

// TestParkedIUsInOrder: with the send ring full, further IUs wait and run in
// arrival order once contexts free up.
func TestParkedIUsInOrder(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RQSize = 1 })
	release := make(chan struct{})
	var order []uint64
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.Tag == 1 {
			<-release
		}
		e.core.mu.Lock()
		order = append(order, cmd.Tag)
		e.core.mu.Unlock()
		return scsi.Result{}, false
	})
	i := e.login(defaultLogin())
	// The first command holds the only response context; seven more (sent
	// without credit, which the target tolerates) are parked and then run
	// one at a time.
	for tag := uint64(1); tag <= 8; tag++ {
		i.sendIU(&srp.Cmd{Tag: tag, CDB: make([]byte, 16)})
	}
	waitFor(t, e, func() bool {
		s := e.port.Sessions()
		return len(s) == 1 && s[0].Outstanding == 1
	})
	close(release)
	got := map[uint64]bool{}
	for range 8 {
		r := i.rspIU()
		got[r.Tag] = true
	}
	if len(got) != 8 {
		t.Fatalf("responses for %v", got)
	}
	e.core.mu.Lock()
	defer e.core.mu.Unlock()
	for k := range order {
		if order[k] != uint64(k+1) {
			t.Fatalf("parked IUs ran out of order: %v", order)
		}
	}
}

func waitFor(t *testing.T, e *env, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			t.Fatal("condition not reached")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestAbortDuringRDMARead: ABORT TASK of a write whose data RDMA READ is
// still in flight (held back 3 s by the loopback provider, ample time for
// the TMF to arrive even on a loaded machine) waits for the READ, answers FUNCTION COMPLETE with the
// aborted command's credit, and never sends the command's SRP_RSP.
func TestAbortDuringRDMARead(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.tdev.InjectFault(loopback.Fault{Op: rdma.OpRDMARead, Delay: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	i := e.login(defaultLogin())
	_, d := i.buf(0, 8192)
	i.sendIU(&srp.Cmd{Tag: 5, LUN: 0, CDB: cdb10(0x2a, 0, 16), DataOut: direct(d)})
	waitFor(t, e, func() bool {
		s := e.port.Sessions()
		return len(s) == 1 && s[0].Outstanding == 1
	})
	i.sendIU(&srp.TaskMgmt{Tag: 6, Func: srp.TMFAbortTask, TaskTag: 5})
	b := i.next()
	want := make([]byte, 40)
	want[0] = 0xc1
	binary.BigEndian.PutUint32(want[4:], 2) // the TMF's credit and the aborted command's
	binary.BigEndian.PutUint64(want[8:], 6)
	want[18] = 0x01                          // RSPVALID
	binary.BigEndian.PutUint32(want[32:], 4) // resp_data_len
	if !bytes.Equal(b, want) {
		t.Fatalf("TMF rsp\n got % x\nwant % x", b, want)
	}
	e.core.mu.Lock()
	executed := e.core.executed
	e.core.mu.Unlock()
	if executed != 0 {
		t.Fatalf("aborted command reached the core")
	}
	i.sendIU(&srp.Cmd{Tag: 7, CDB: make([]byte, 16)})
	if r := i.rspIU(); r.Tag != 7 || r.ReqLimDelta != 1 {
		t.Fatalf("next rsp %+v (the aborted command must not answer)", r)
	}
}

// TestTMFs: each function reaches the core; unknown functions answer 4.
func TestTMFs(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	fns := []srp.TMF{srp.TMFAbortTaskSet, srp.TMFClearTaskSet, srp.TMFLUNReset, srp.TMFClearACA}
	for k, fn := range fns {
		i.sendIU(&srp.TaskMgmt{Tag: uint64(k), Func: fn, LUN: 0})
		r := i.rspIU()
		if code, ok := r.TMFCode(); !ok || code != 0 || r.Tag != uint64(k) {
			t.Fatalf("%v: %+v", fn, r)
		}
	}
	i.sendIU(&srp.TaskMgmt{Tag: 9, Func: 0x20})
	if code, ok := i.rspIU().TMFCode(); !ok || code != 4 {
		t.Fatalf("unknown TMF code %d", code)
	}
	// ABORT TASK of an executing command: the core aborts it, no SRP_RSP
	// for it, and its credit rides on the TMF response or a CRED_REQ.
	started := make(chan struct{})
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.Tag == 20 {
			close(started)
			<-ctx.Done()
			return scsi.Result{Aborted: true}, true
		}
		return scsi.Result{}, false
	})
	i.sendIU(&srp.Cmd{Tag: 20, CDB: make([]byte, 16)})
	<-started
	i.sendIU(&srp.TaskMgmt{Tag: 21, Func: srp.TMFAbortTask, TaskTag: 20})
	credit := 0
	for credit < 2 {
		b := i.next()
		switch b[0] {
		case 0xc1:
			r, _ := srp.UnmarshalRsp(b)
			if code, ok := r.TMFCode(); r.Tag != 21 || !ok || code != 0 {
				t.Fatalf("rsp %+v", r)
			}
			credit += int(r.ReqLimDelta)
		case 0x81: // SRP_CRED_REQ
			credit += int(binary.BigEndian.Uint32(b[4:]))
			i.sendIU(&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])})
		default:
			t.Fatalf("unexpected IU % x", b)
		}
	}
	e.core.mu.Lock()
	defer e.core.mu.Unlock()
	want := []scsi.TMF{scsi.TMFAbortTaskSet, scsi.TMFClearTaskSet, scsi.TMFLUNReset, scsi.TMFClearACA, scsi.TMFAbortTask}
	if len(e.core.tmfs) != len(want) {
		t.Fatalf("core TMFs %v, want %v", e.core.tmfs, want)
	}
	for k := range want {
		if e.core.tmfs[k] != want[k] {
			t.Fatalf("core TMFs %v, want %v", e.core.tmfs, want)
		}
	}
}

// TestLogout: SRP_I_LOGOUT closes the channel; the admin's RemoveSession
// sends SRP_T_LOGOUT first.
func TestLogout(t *testing.T) {
	e := newEnv(t, nil)
	i := e.login(defaultLogin())
	i.sendIU(&srp.ILogout{Tag: 1})
	if ius := i.waitClosed(); len(ius) != 0 {
		t.Fatalf("got % x", ius)
	}
	j := e.login(defaultLogin())
	if !e.port.RemoveSession(testInitiator.String()) {
		t.Fatal("session not found")
	}
	ius := j.waitClosed()
	want := []byte{0x80, 0, 0, 0, 0, 0, 0, 0}
	if len(ius) != 1 || len(ius[0]) != 16 || !bytes.Equal(ius[0][:8], want) {
		t.Fatalf("got % x, want SRP_T_LOGOUT", ius)
	}
	// Every SCSI session opened is closed once its nexus has no channel.
	waitFor(t, e, func() bool {
		e.core.mu.Lock()
		defer e.core.mu.Unlock()
		return len(e.port.Sessions()) == 0 && e.core.opened >= 1 && e.core.closed == e.core.opened
	})
}

// TestCloseWithCommandsInFlight drops connections while commands execute,
// wait for RDMA READs, and sit parked: the channel must drain and free
// everything (the env cleanup checks for leaks).
func TestCloseWithCommandsInFlight(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RQSize = 4 })
	release := make(chan struct{})
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		select {
		case <-release:
		case <-ctx.Done():
			return scsi.Result{Aborted: true}, true
		}
		return scsi.Result{}, false
	})
	for round := range 3 {
		i := e.login(defaultLogin())
		_, d := i.buf(0, 1<<20)
		for tag := uint64(1); tag <= 6; tag++ {
			c := srp.Cmd{Tag: tag, CDB: cdb10(0x28, 0, 16)}
			if tag%2 == 0 {
				c = srp.Cmd{Tag: tag, CDB: cdb10(0x2a, 0, 16), DataOut: direct(d)}
			}
			i.sendIU(&c)
		}
		switch round {
		case 0:
			_ = i.conn.Close()
		case 1:
			i.conn.(*loopback.Conn).Drop()
		case 2:
			e.port.RemoveSession(testInitiator.String())
		}
		waitFor(t, e, func() bool { return len(e.port.Sessions()) == 0 })
	}
	close(release)
}
