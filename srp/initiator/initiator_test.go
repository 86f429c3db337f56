package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

func testCtx(t *testing.T) context.Context {
	d := 30 * time.Second
	if dl, ok := t.Deadline(); ok && time.Until(dl) < d {
		d = time.Until(dl) - time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T, tune func(*fakeTarget, *Options)) (*fakeTarget, *Session) {
	t.Helper()
	net := loopback.NewNetwork()
	ft := newFakeTarget(t, net)
	o := Options{Dest: ft.addr(), IDExt: 0x0002c90300a1b2c3, IOCGUID: 0x0002c90300a1b2c3, InitiatorExt: 1, InitiatorGUID: 0x1122334455667788}
	if tune != nil {
		tune(ft, &o)
	}
	dev := net.NewDevice("initiator")
	t.Cleanup(func() { dev.Close() })
	s, err := Dial(testCtx(t), dev, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return ft, s
}

func TestReqITIULen(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want int
	}{
		{Options{}, 8260}, // 68 + 8192
		{Options{NoImmData: true}, 48 + 16 + 20 + 16*12},    // 276
		{Options{CmdSGEntries: 255, NoImmData: true}, 4164}, // 84 + 4080
		{Options{CmdSGEntries: 255}, 8260},                  // max(4164, 8260)
		{Options{MaxITIUSize: 1000}, 1000},                  // capped
		{Options{MaxImmData: 65536}, 68 + 65536},
	} {
		if got := c.o.ReqITIULen(); got != c.want {
			t.Errorf("%+v: ReqITIULen = %d, want %d", c.o, got, c.want)
		}
	}
}

func TestLoginPrivateDataBytes(t *testing.T) {
	o := Options{IDExt: 0x0102030405060708, IOCGUID: 0x1112131415161718, InitiatorExt: 0x2122232425262728, InitiatorGUID: 0x3132333435363738, Dest: "x"}
	b := loginPrivateData(o.withDefaults(), false)
	want := []byte{
		0, 0, 0, 0, 0, 0, 0, 0, // tag
		0x00, 0x06, // req_buf_fmt DIRECT|INDIRECT
		0x80,                   // SINGLE | IMMED_REQUESTED
		0x00,                   // opcode LOGIN_REQ
		0x00, 0x00, 0x20, 0x44, // req_it_iu_len 8260
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, // initiator_ext || GUID
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // id_ext || ioc_guid
		0x00, 0x44, // imm_data_offset 68
		0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("login private data\n got %x\nwant %x", b, want)
	}
	m := loginPrivateData(o.withDefaults(), true)
	if m[10] != 0x81 {
		t.Errorf("MULTI req_flags = %#x, want 0x81", m[10])
	}
	o.IOClass = IOClassRev10
	r10 := loginPrivateData(o.withDefaults(), false)
	if r10[16] != 0x31 || r10[24] != 0x21 || r10[32] != 0x11 || r10[40] != 0x01 {
		t.Errorf("rev10 port IDs not swapped: %x", r10[16:48])
	}
}

func TestLoginFacts(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { ft.reqLim = 16; o.ChCount = 3 })
	li := s.Info()
	// can_queue = min(req_lim - 1, queue_size - 2) = min(15, 62).
	if li.CanQueue != 15 || !li.ImmediateData || li.UsedITIULen != 8260 || li.MaxTIIULen != 256 {
		t.Errorf("login info %+v", li)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.logins) != 3 {
		t.Fatalf("%d logins, want 3", len(ft.logins))
	}
	for i, l := range ft.logins {
		want := srp.MultiChanMulti
		if i == 0 {
			want = srp.MultiChanSingle
		}
		if l.ReqFlags&srp.MultiChanMask != want || l.ReqFlags&srp.LoginImmRequested == 0 || l.ImmDataOffset != 68 || l.ReqITIULen != 8260 {
			t.Errorf("login %d: %+v", i, l)
		}
	}
}

func TestLoginReject(t *testing.T) {
	net := loopback.NewNetwork()
	ft := newFakeTarget(t, net)
	ft.reject = srp.RejChannelLimitReached
	dev := net.NewDevice("initiator")
	defer dev.Close()
	_, err := Dial(testCtx(t), dev, Options{Dest: ft.addr()})
	var lr *LoginRejectError
	if !errors.As(err, &lr) || lr.Reason != 0x10006 {
		t.Fatalf("err = %v, want LoginRejectError 0x10006", err)
	}
	if !strings.Contains(err.Error(), "ACL") {
		t.Errorf("reject message gives no hint: %v", err)
	}
}

func TestReadWriteDescriptors(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	lun := LUN(0)
	cases := []struct {
		name   string
		segs   []int
		bufFmt byte // SRP_CMD byte 5 of the write
		outCnt byte
	}{
		{"immediate 1 block", []int{512}, 0x30, 0},
		{"immediate 16 blocks", []int{8192}, 0x30, 0},
		{"direct 17 blocks", []int{8704}, 0x10, 0},
		{"direct 128 blocks", []int{65536}, 0x10, 0},
		{"indirect 3 segments", []int{4096, 8192, 4096 * 4}, 0x20, 3},
	}
	lba := uint64(0)
	for _, c := range cases {
		var segs [][]byte
		var all []byte
		for _, n := range c.segs {
			b := make([]byte, n)
			rand.Read(b)
			segs = append(segs, b)
			all = append(all, b...)
		}
		blocks := uint32(len(all) / 512)
		if c.name == "indirect 3 segments" {
			// Large enough to skip immediate data.
		}
		_, err := s.run(ctx, &Command{LUN: lun, CDB: rw16(opWrite16, lba, blocks, false), DataOut: segs})
		if err != nil {
			t.Fatalf("%s: write: %v", c.name, err)
		}
		ft.mu.Lock()
		raw := ft.rawIUs[len(ft.rawIUs)-1]
		ft.mu.Unlock()
		if raw[5] != c.bufFmt || raw[6] != c.outCnt {
			t.Errorf("%s: buf_fmt %#02x out_cnt %d, want %#02x %d", c.name, raw[5], raw[6], c.bufFmt, c.outCnt)
		}
		if c.bufFmt == 0x30 {
			if len(raw) != 68+len(all) || binary.BigEndian.Uint32(raw[48:]) != uint32(len(all)) {
				t.Errorf("%s: immediate IU %d bytes, imm len %d", c.name, len(raw), binary.BigEndian.Uint32(raw[48:]))
			}
		}
		if c.bufFmt == 0x20 {
			// indirect: table_desc len 16*3, total len, then the three descriptors.
			if binary.BigEndian.Uint32(raw[48+12:]) != 48 || binary.BigEndian.Uint32(raw[48+16:]) != uint32(len(all)) || len(raw) != 48+20+48 {
				t.Errorf("%s: indirect header %x", c.name, raw[48:68])
			}
		}
		// Read back through a scatter list of the same shape.
		in := make([][]byte, len(c.segs))
		for i, n := range c.segs {
			in[i] = make([]byte, n)
		}
		res, err := s.run(ctx, &Command{LUN: lun, CDB: rw16(opRead16, lba, blocks, false), DataIn: in})
		if err != nil || res.DataInLen != len(all) {
			t.Fatalf("%s: read: %v (%d bytes)", c.name, err, res.DataInLen)
		}
		if !bytes.Equal(bytes.Join(in, nil), all) {
			t.Fatalf("%s: data read back differs", c.name)
		}
		ft.mu.Lock()
		raw = ft.rawIUs[len(ft.rawIUs)-1]
		ft.mu.Unlock()
		wantIn := byte(0x01)
		if len(c.segs) > 1 {
			wantIn = 0x02
		}
		if raw[5] != wantIn || (wantIn == 2 && raw[7] != byte(len(c.segs))) {
			t.Errorf("%s: read buf_fmt %#02x in_cnt %d", c.name, raw[5], raw[7])
		}
		lba += uint64(blocks)
	}
}

func TestNoImmediateWhenTargetRefuses(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { ft.immOK = false })
	if s.Info().ImmediateData {
		t.Fatal("immediate data in use although the target did not set IMMED_SUPP")
	}
	if err := s.Write16(testCtx(t), 0, 0, make([]byte, 512), 512, false); err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if raw := ft.rawIUs[len(ft.rawIUs)-1]; raw[5] != 0x10 {
		t.Errorf("buf_fmt %#02x, want direct data-out 0x10", raw[5])
	}
}

func TestMappingLimits(t *testing.T) {
	_, s := setup(t, func(ft *fakeTarget, o *Options) { o.CmdSGEntries = 2; o.MaxSect = 16 })
	ctx := testCtx(t)
	segs := [][]byte{make([]byte, 512), make([]byte, 512), make([]byte, 512)}
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opRead16, 0, 3, false), DataIn: segs}); !errors.Is(err, ErrTooManySegments) {
		t.Errorf("3 segments with cmd_sg_entries=2: %v", err)
	}
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opRead16, 0, 17, false), DataIn: [][]byte{make([]byte, 17*512)}}); !errors.Is(err, ErrTransferTooLarge) {
		t.Errorf("17 sectors with max_sect=16: %v", err)
	}
	// The session still works and its credits were returned.
	for i := 0; i < 40; i++ {
		if err := s.TestUnitReady(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSCSIHelpers(t *testing.T) {
	_, s := setup(t, nil)
	ctx := testCtx(t)
	b, err := s.Inquiry(ctx, 0, false, 0, 96)
	if err != nil {
		t.Fatal(err)
	}
	inq, err := ParseInquiry(b)
	if err != nil || inq.Vendor != "GOSRP" || inq.Product != "FAKE TARGET" || inq.Revision != "0001" || inq.Version != 6 {
		t.Errorf("inquiry %+v %v", inq, err)
	}
	c, err := s.ReadCapacity16(ctx, 0)
	if err != nil || c.Blocks() != fakeBlocks || c.BlockSize != 512 {
		t.Errorf("capacity %+v %v", c, err)
	}
	luns, err := s.ReportLUNs(ctx)
	if err != nil || len(luns) != 2 || luns[0] != 0 || luns[1] != 0x0001000000000000 {
		t.Errorf("luns %x %v", luns, err)
	}
	// An unsupported opcode: CHECK CONDITION, ILLEGAL REQUEST, 20h/00h.
	_, err = s.run(ctx, &Command{CDB: []byte{0xc7, 0, 0, 0, 0, 0}})
	if !IsSense(err, sense.KeyIllegalRequest, 0x20, 0) || !strings.Contains(err.Error(), "INVALID COMMAND OPERATION CODE") {
		t.Errorf("unsupported opcode: %v", err)
	}
	// Out of range: 21h/00h.
	err = s.Read16(ctx, 0, fakeBlocks, make([]byte, 512), 512, false)
	if !IsSense(err, sense.KeyIllegalRequest, 0x21, 0) {
		t.Errorf("read past the end: %v", err)
	}
}

func TestConcurrentIOAndCredits(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { ft.reqLim = 8; o.ChCount = 2 })
	ctx := testCtx(t)
	const workers, per = 48, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 4096)
			got := make([]byte, 4096)
			for i := 0; i < per; i++ {
				lba := uint64(w*8) % (fakeBlocks - 8)
				rand.Read(buf)
				if err := s.Write16(ctx, 0, lba, buf, 512, i%2 == 0); err != nil {
					errs <- err
					return
				}
				if err := s.Read16(ctx, 0, lba, got, 512, false); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, got) {
					errs <- fmt.Errorf("worker %d: data mismatch", w)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	// Two channels, each with req_lim 8 of which one is kept for TMFs.
	if ft.maxOut > 2*7 {
		t.Errorf("target saw %d commands outstanding, more than 2 channels × (req_lim-1)", ft.maxOut)
	}
}

func TestCredReqAndAER(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	// Every channel the target has at the time gets each request and
	// must answer it (the session's other channels may still be logging
	// in: how many there are varies).
	ft.waitConn(t)
	nCred := ft.sendToAll(&srp.CredReq{ReqLimDelta: 3, Tag: 0xfeed})
	sense := checkCondition(6, 0x2a, 0x09)
	nAER := ft.sendToAll(&srp.AerReq{ReqLimDelta: 0, Tag: 0xbeef, LUN: LUN(0), Sense: sense})
	if nCred == 0 || nAER == 0 {
		t.Fatalf("requests sent on %d and %d channels", nCred, nAER)
	}
	for {
		ft.mu.Lock()
		done := len(ft.credRsps) >= nCred && len(ft.aerRsps) >= nAER
		ft.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no CRED_RSP/AER_RSP")
		case <-time.After(5 * time.Millisecond):
		}
	}
	ft.mu.Lock()
	for _, tag := range ft.credRsps {
		if tag != 0xfeed {
			t.Errorf("CRED_RSP tags %x, want feed", ft.credRsps)
		}
	}
	for _, tag := range ft.aerRsps {
		if tag != 0xbeef {
			t.Errorf("AER_RSP tags %x, want beef", ft.aerRsps)
		}
	}
	if len(ft.credRsps) != nCred || len(ft.aerRsps) != nAER {
		t.Errorf("%d CRED_RSPs and %d AER_RSPs for requests on %d and %d channels", len(ft.credRsps), len(ft.aerRsps), nCred, nAER)
	}
	ft.mu.Unlock()
	s.chans[0].mu.Lock()
	if got := s.chans[0].reqLim; got != 32+3 {
		t.Errorf("req_lim after CRED_REQ delta 3: %d, want 35", got)
	}
	s.chans[0].mu.Unlock()
}

// TestAbortOnTimeout: a command unanswered for CommandTimeout is aborted
// with ABORT TASK naming its tag, on the session's clock.
func TestAbortOnTimeout(t *testing.T) {
	clk := newManualClock()
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.Clock = clk })
	ctx := testCtx(t)
	ft.setHold(true)
	errc := make(chan error, 1)
	go func() { errc <- s.TestUnitReady(ctx, 0) }()
	waitFor(t, ctx, "the command's timer", func() bool { return clk.running() == 1 })
	clk.Advance(DefaultCommandTimeout - time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("command ended before its timeout: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	if err := <-errc; !errors.Is(err, ErrAborted) {
		t.Fatalf("held command: %v, want ErrAborted", err)
	}
	ft.mu.Lock()
	ft.hold = false
	if len(ft.tmfs) != 1 || ft.tmfs[0].Func != srp.TMFAbortTask || ft.tmfs[0].TaskTag != ft.cmds[len(ft.cmds)-1].Tag {
		t.Errorf("TMFs %+v, want one ABORT TASK naming tag %#x", ft.tmfs, ft.cmds[len(ft.cmds)-1].Tag)
	}
	ft.mu.Unlock()
	if err := s.TestUnitReady(ctx, 0); err != nil {
		t.Fatalf("after abort: %v", err)
	}
}

// waitFor polls cond until it holds; only the test's pacing uses real
// time, the session runs on its manual clock.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func TestLUNReset(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	ft.setHold(true)
	errc := make(chan error, 1)
	go func() { errc <- s.TestUnitReady(ctx, 0) }()
	for {
		ft.mu.Lock()
		n := len(ft.held)
		ft.mu.Unlock()
		if n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("command not held")
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := s.LUNReset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrAborted) {
		t.Errorf("command outstanding over a LUN reset: %v", err)
	}
	if err := s.AbortTask(ctx, 0, 12345); err == nil {
		t.Error("ABORT TASK of an unknown tag succeeded")
	} else if te := (*TMFError)(nil); !errors.As(err, &te) || te.Response != 5 {
		t.Errorf("ABORT TASK of an unknown tag: %v", err)
	}
}

func TestReconnectAfterTargetDrop(t *testing.T) {
	clk := newManualClock()
	const delay = 20 * time.Millisecond
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.ReconnectDelay = delay; o.ChCount = 2; o.Clock = clk })
	ctx := testCtx(t)
	data := make([]byte, 4096)
	rand.Read(data)
	if err := s.Write16(ctx, 0, 8, data, 512, false); err != nil {
		t.Fatal(err)
	}
	ft.dropAll()
	waitFor(t, ctx, "the session to block", func() bool { return s.State() == StateBlocked })
	// Commands issued while the session is blocked wait and then succeed.
	got := make([]byte, 4096)
	errc := make(chan error, 1)
	go func() { errc <- s.Read16(ctx, 0, 8, got, 512, false) }()
	select {
	case err := <-errc:
		t.Fatalf("read ended before a reconnect: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if n := func() int { ft.mu.Lock(); defer ft.mu.Unlock(); return len(ft.logins) }(); n != 2 {
		t.Fatalf("%d logins before reconnect_delay passed, want 2", n)
	}
	clk.Advance(delay)
	if err := <-errc; err != nil {
		t.Fatalf("read across reconnect: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data differs after reconnect")
	}
	if st := s.State(); st != StateRunning {
		t.Errorf("state %v", st)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.logins) != 4 || ft.logins[2].ReqFlags&srp.MultiChanMask != srp.MultiChanSingle {
		t.Errorf("%d logins after reconnect", len(ft.logins))
	}
}

// TestFastIOFailAndDevLoss: with the target gone, commands wait until
// fast_io_fail_tmo, then fail fast; at dev_loss_tmo the session is lost.
func TestFastIOFailAndDevLoss(t *testing.T) {
	clk := newManualClock()
	const delay, fastFail, devLoss = 20 * time.Millisecond, 100 * time.Millisecond, 2 * time.Second
	ft, s := setup(t, func(ft *fakeTarget, o *Options) {
		o.ReconnectDelay, o.FastIOFailTmo, o.DevLossTmo, o.Clock = delay, fastFail, devLoss, clk
	})
	ctx := testCtx(t)
	ft.ln.Close()
	ft.dropAll()
	waitFor(t, ctx, "the session to block", func() bool { return s.State() == StateBlocked })
	// fast_io_fail_tmo, dev_loss_tmo and reconnect_delay.
	waitFor(t, ctx, "the recovery timers", func() bool { return clk.running() == 3 })
	errc := make(chan error, 1)
	go func() { errc <- s.TestUnitReady(ctx, 0) }()
	clk.Advance(fastFail - time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("command ended before fast_io_fail_tmo: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	if err := <-errc; !errors.Is(err, ErrFastIOFail) {
		t.Fatalf("err %v, want ErrFastIOFail", err)
	}
	if st := s.State(); st != StateFailFast {
		t.Fatalf("state %v after fast_io_fail_tmo", st)
	}
	clk.Advance(devLoss - fastFail)
	waitFor(t, ctx, "dev_loss_tmo", func() bool { return s.State() == StateLost })
	if err := s.TestUnitReady(ctx, 0); !errors.Is(err, ErrDevLoss) {
		t.Fatalf("err %v, want ErrDevLoss", err)
	}
}

func TestDecodeSense(t *testing.T) {
	// Fixed format, VALID with INFORMATION 0x1234, MEDIUM ERROR 11h/00h.
	f := []byte{0xf0, 0, 0x03, 0, 0, 0x12, 0x34, 10, 0, 0, 0, 0, 0x11, 0x00, 0, 0, 0, 0}
	e := DecodeSense(sense.StatusCheckCondition, f)
	if e == nil || e.Key != 3 || e.ASC != 0x11 || !e.InfoValid || e.Info != 0x1234 {
		t.Errorf("fixed: %+v", e)
	}
	// Descriptor format, MISCOMPARE 1Dh/00h, information descriptor 0x20.
	d := []byte{0x72, 0x0e, 0x1d, 0x00, 0, 0, 0, 12, 0x00, 0x0a, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0x20}
	e = DecodeSense(sense.StatusCheckCondition, d)
	if e == nil || e.Key != sense.KeyMiscompare || e.ASC != 0x1d || !e.InfoValid || e.Info != 0x20 {
		t.Errorf("descriptor: %+v", e)
	}
	if !strings.Contains(e.Error(), "MISCOMPARE") {
		t.Errorf("message %q", e.Error())
	}
	for _, b := range [][]byte{nil, {0x70}, {0x72, 1}, {0x00, 0, 0}} {
		if DecodeSense(2, b) != nil {
			t.Errorf("decoded junk %x", b)
		}
	}
}

func TestLUNEncoding(t *testing.T) {
	if LUN(1) != 0x0001000000000000 || LUN(300) != 0x412c000000000000 || LUNNumber(LUN(300)) != 300 {
		t.Errorf("LUN(1)=%#x LUN(300)=%#x", LUN(1), LUN(300))
	}
}

func TestParseTarget(t *testing.T) {
	o, err := ParseTarget("id_ext=0002c903000e8acc,ioc_guid=0002c903000e8acd,dest=192.0.2.1:5555,initiator_ext=5,queue_size=30,ch_count=2,cmd_sg_entries=20,max_sect=256,max_it_iu_size=1000,transport=iwarp")
	if err != nil {
		t.Fatal(err)
	}
	want := Options{IDExt: 0x0002c903000e8acc, IOCGUID: 0x0002c903000e8acd, Dest: "192.0.2.1:5555", InitiatorExt: 5,
		QueueSize: 32, ChCount: 2, CmdSGEntries: 20, MaxSect: 256, MaxITIUSize: 1000, Transport: "iwarp"}
	if o != want {
		t.Errorf("got %+v\nwant %+v", o, want)
	}
	if _, err := ParseTarget("id_ext=1,ioc_guid=2,dgid=fe800000000000000002c903000e8acc,pkey=ffff,service_id=1"); err == nil {
		t.Error("IB CM path accepted")
	}
	if _, err := ParseTarget("id_ext=1,ioc_guid=2,dest=192.0.2.1:5555,bogus=1"); err == nil {
		t.Error("unknown key accepted")
	}
	// The range is given in queue_size's terms, not the channel's (two more).
	for _, q := range []string{"1", "65528"} {
		want := "srp initiator: queue_size " + q + " out of range 2..65527"
		if _, err := ParseTarget("id_ext=1,ioc_guid=2,dest=192.0.2.1:5555,queue_size=" + q); err == nil || err.Error() != want {
			t.Errorf("queue_size=%s: %v, want %q", q, err, want)
		}
	}
	if o, err := ParseTarget("id_ext=1,ioc_guid=2,dest=192.0.2.1:5555,queue_size=65527"); err != nil || o.QueueSize != 65529 {
		t.Errorf("queue_size=65527: %v, QueueSize %d", err, o.QueueSize)
	}
}

// TestParseTargetRefusesIBCM: the InfiniBand CM keys are refused with an
// error that names them and asks for dest=, whatever else the string holds
// (an incomplete set is not reported as a missing pkey).
func TestParseTargetRefusesIBCM(t *testing.T) {
	const gid = "fe800000000000000002c903000e8acc"
	for _, c := range []struct {
		s, keys, want string
	}{
		{"id_ext=1,ioc_guid=2,dgid=" + gid + ",pkey=ffff,service_id=1,transport=iwarp", "dgid, pkey, service_id", "iWARP/RDMA-CM addressing needs dest=IP:port"},
		{"id_ext=1,ioc_guid=2,dgid=" + gid + ",transport=iwarp", "dgid", "iWARP/RDMA-CM addressing needs dest=IP:port"},
		{"id_ext=1,ioc_guid=2,service_id=1,dest=192.0.2.1:5555,transport=iwarp", "service_id", "iWARP/RDMA-CM addressing needs dest=IP:port"},
		// No transport: srpctl's default is iwarp.
		{"id_ext=1,ioc_guid=2,pkey=ffff", "pkey", "iWARP/RDMA-CM addressing needs dest=IP:port"},
		{"id_ext=1,ioc_guid=2,dgid=" + gid + ",pkey=ffff,service_id=1,transport=verbs", "dgid, pkey, service_id", "InfiniBand CM path is not supported; gosrp connects through RDMA/CM, which needs dest=IP:port"},
	} {
		_, err := ParseTarget(c.s)
		if err == nil || !strings.Contains(err.Error(), c.keys+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q and %q", c.s, err, c.keys, c.want)
		}
		// The same refusal for a string parsed by package srp first.
		if to, perr := srp.ParseTargetOptions(c.s); perr == nil {
			if _, err := FromTargetOptions(to); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("FromTargetOptions(%s): %v, want %q", c.s, err, c.want)
			}
		}
	}
}

// TestParseTargetAutoChCount: without ch_count the channel count is
// min(4, CPUs), like ib_srp's min(4 * nodes, completion vectors) with one
// node and a vector per CPU; an explicit ch_count is kept.
func TestParseTargetAutoChCount(t *testing.T) {
	want := runtime.NumCPU()
	if want > 4 {
		want = 4
	}
	if AutoChCount() != want {
		t.Errorf("AutoChCount() = %d, want %d", AutoChCount(), want)
	}
	o, err := ParseTarget("id_ext=1,ioc_guid=2,dest=192.0.2.1:5555")
	if err != nil || o.ChCount != want {
		t.Errorf("no ch_count: %d, %v; want %d", o.ChCount, err, want)
	}
	for _, n := range []int{1, 7} {
		o, err := ParseTarget(fmt.Sprintf("id_ext=1,ioc_guid=2,dest=192.0.2.1:5555,ch_count=%d", n))
		if err != nil || o.ChCount != n {
			t.Errorf("ch_count=%d: %d, %v", n, o.ChCount, err)
		}
	}
}

// BenchmarkExecuteRead measures a 4 KiB READ(16) round trip through the
// initiator and the fake target over rdma/loopback, 32 goroutines.
func BenchmarkExecuteRead(b *testing.B) {
	net := loopback.NewNetwork()
	ft := newFakeTarget(b, net)
	dev := net.NewDevice("initiator")
	defer dev.Close()
	s, err := Dial(context.Background(), dev, Options{Dest: ft.addr(), ChCount: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.SetBytes(4096)
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		cmd := Command{CDB: rw16(opRead16, 0, 8, false), DataIn: [][]byte{buf}}
		for pb.Next() {
			if _, err := s.Execute(context.Background(), &cmd); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestAbortTimeoutReconnects: a target that answers neither the command nor
// its ABORT TASK gets the channel torn down (so it can no longer touch the
// command's memory), and the session reconnects.
func TestAbortTimeoutReconnects(t *testing.T) {
	clk := newManualClock()
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.Clock = clk; o.ReconnectDelay = 10 * time.Millisecond })
	ft.mu.Lock()
	ft.hold, ft.ignoreTMF = true, true
	ft.mu.Unlock()
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() { errc <- s.TestUnitReady(ctx, 0) }()
	waitFor(t, ctx, "the command's timer", func() bool { return clk.running() == 1 })
	clk.Advance(DefaultCommandTimeout)
	// The ABORT TASK's timer replaces the command's.
	waitFor(t, ctx, "the ABORT TASK's timer", func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		return len(ft.tmfs) == 1 && clk.running() == 1
	})
	clk.Advance(DefaultTMFTimeout)
	if err := <-errc; !errors.Is(err, ErrAborted) {
		t.Fatalf("err %v, want ErrAborted", err)
	}
	ft.mu.Lock()
	ft.hold, ft.ignoreTMF = false, false
	ft.mu.Unlock()
	// The channel went down with the abort: the reconnect waits for
	// reconnect_delay.
	errc2 := make(chan error, 1)
	go func() { errc2 <- s.TestUnitReady(ctx, 0) }()
	waitFor(t, ctx, "the session to block", func() bool { return s.State() == StateBlocked })
	waitFor(t, ctx, "reconnect_delay", func() bool { return clk.running() >= 1 })
	clk.Advance(10 * time.Millisecond)
	if err := <-errc2; err != nil {
		t.Fatalf("after the channel was replaced: %v", err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.logins) < 2 {
		t.Errorf("%d logins: the channel was not replaced", len(ft.logins))
	}
}

// TestCloseFailsOutstanding: Close ends commands waiting for a response.
func TestCloseFailsOutstanding(t *testing.T) {
	ft, s := setup(t, nil)
	ft.setHold(true)
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() { errc <- s.TestUnitReady(ctx, 0) }()
	for {
		ft.mu.Lock()
		n := len(ft.held)
		ft.mu.Unlock()
		if n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("command not held")
		case <-time.After(2 * time.Millisecond):
		}
	}
	s.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("outstanding command after Close: %v", err)
	}
	if _, err := s.Execute(testCtx(t), &Command{CDB: make([]byte, 6)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close: %v", err)
	}
}

func TestPutRW16(t *testing.T) {
	cdb := make([]byte, 16)
	PutRW16(cdb, true, 0x0102030405060708, 0x0a0b0c0d, true)
	want := []byte{0x8a, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0}
	if !bytes.Equal(cdb, want) {
		t.Errorf("WRITE(16) FUA: %x, want %x", cdb, want)
	}
	PutRW16(cdb, false, 1, 8, false)
	want = []byte{0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0}
	if !bytes.Equal(cdb, want) {
		t.Errorf("READ(16): %x, want %x", cdb, want)
	}
}

// BenchmarkRead1M measures 1 MiB READ(16)s through the initiator and the
// fake target over rdma/loopback at queue depths 1, 8 and 32.
func BenchmarkRead1M(b *testing.B) {
	for _, qd := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("qd%d", qd), func(b *testing.B) {
			net := loopback.NewNetwork()
			ft := newFakeTarget(b, net)
			dev := net.NewDevice("initiator")
			defer dev.Close()
			s, err := Dial(context.Background(), dev, Options{Dest: ft.addr(), MaxSect: 2048, QueueSize: 40})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(1 << 20)
			var wg sync.WaitGroup
			work := make(chan struct{})
			for w := 0; w < qd; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 1<<20)
					cmd := Command{CDB: rw16(opRead16, 0, 2048, false), DataIn: [][]byte{buf}}
					for range work {
						if _, err := s.Execute(context.Background(), &cmd); err != nil {
							b.Error(err)
						}
					}
				}()
			}
			for i := 0; i < b.N; i++ {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
		})
	}
}

func TestRegisteredBuffers(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.MaxSect = 2048 })
	ctx := testCtx(t)
	out, err := s.NewBuffer(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	in, err := s.NewBuffer(1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	if out.mr.Access() != rdma.AccessRemoteRead || in.mr.Access() != rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessPlaceAhead {
		t.Errorf("rights: data-out %v, data-in %v", out.mr.Access(), in.mr.Access())
	}
	rand.Read(out.Bytes())
	// 64 KiB at offset 4096 of the data-out buffer → LBA 10; then 512 bytes
	// (immediate data) → LBA 200.
	if _, err := s.run(ctx, &Command{CDB: rw16(opWrite16, 10, 128, false), Buffer: out, Offset: 4096, Length: 65536}); err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	raw := ft.rawIUs[len(ft.rawIUs)-1]
	ft.mu.Unlock()
	if raw[5] != 0x10 || binary.BigEndian.Uint64(raw[48:]) != out.mr.Addr()+4096 || binary.BigEndian.Uint32(raw[56:]) != out.mr.RKey() || binary.BigEndian.Uint32(raw[60:]) != 65536 {
		t.Errorf("direct descriptor %x", raw[48:64])
	}
	if _, err := s.run(ctx, &Command{CDB: rw16(opWrite16, 200, 1, false), Buffer: out, Offset: 0, Length: 512}); err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	raw = ft.rawIUs[len(ft.rawIUs)-1]
	ft.mu.Unlock()
	if raw[5] != 0x30 || !bytes.Equal(raw[68:], out.Bytes()[:512]) {
		t.Errorf("immediate from a Buffer: buf_fmt %#x", raw[5])
	}
	res, err := s.run(ctx, &Command{CDB: rw16(opRead16, 10, 128, false), Buffer: in, Offset: 8192, Length: 65536})
	if err != nil || res.DataInLen != 65536 || !bytes.Equal(in.Bytes()[8192:8192+65536], out.Bytes()[4096:4096+65536]) {
		t.Errorf("read into a Buffer: %v, %d bytes", err, res.DataInLen)
	}
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opRead16, 0, 1, false), Buffer: in, Offset: 1 << 20, Length: 512}); err == nil {
		t.Error("a range outside the Buffer was accepted")
	}
}

// TestSmallITIU: with max_it_iu_size=64 an SRP_CMD holds a 16-byte CDB and
// one 16-byte direct descriptor (48 + 16 = 64 bytes, T10 SRP r16a table 16),
// nothing more: one segment works, two segments (indirect: 48 + 20 + 32 =
// 100 bytes) and a 32-byte CDB with a descriptor (48 + 16 + 16 = 80 bytes)
// fail with ErrIUTooLong before anything is sent.
func TestSmallITIU(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.MaxITIUSize = 64 })
	ctx := testCtx(t)
	if got := s.Info().ReqITIULen; got != 64 {
		t.Fatalf("req_it_iu_len %d, want 64", got)
	}
	want := make([]byte, 1024)
	rand.Read(want)
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opWrite16, 4, 2, false), DataOut: [][]byte{want}}); err != nil {
		t.Fatalf("one-segment write: %v", err)
	}
	ft.mu.Lock()
	raw := ft.rawIUs[len(ft.rawIUs)-1]
	ft.mu.Unlock()
	if len(raw) != 64 || raw[5] != 0x10 || binary.BigEndian.Uint32(raw[60:]) != 1024 {
		t.Errorf("SRP_CMD %d bytes, buf_fmt %#x, want 64 bytes, DIRECT data-out of 1024", len(raw), raw[5])
	}
	got := make([]byte, 1024)
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opRead16, 4, 2, false), DataIn: [][]byte{got}}); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("one-segment read: %v, equal %v", err, bytes.Equal(got, want))
	}
	two := [][]byte{make([]byte, 512), make([]byte, 512)}
	if _, err := s.Execute(ctx, &Command{CDB: rw16(opRead16, 4, 2, false), DataIn: two}); !errors.Is(err, ErrIUTooLong) {
		t.Errorf("two segments in a 64-byte IU: %v, want ErrIUTooLong", err)
	}
	in, err := s.NewBuffer(4096, true)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	out, err := s.NewBuffer(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	cdb32 := make([]byte, 32)
	cdb32[0] = 0x7f // variable-length CDB
	for _, b := range []*Buffer{in, out} {
		if _, err := s.Execute(ctx, &Command{CDB: cdb32, Buffer: b, Length: 512}); !errors.Is(err, ErrIUTooLong) {
			t.Errorf("32-byte CDB with a Buffer (data-in %v) in a 64-byte IU: %v, want ErrIUTooLong", b.dataIn, err)
		}
	}
	// Credits and slots came back.
	for i := 0; i < 40; i++ {
		if err := s.TestUnitReady(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunReissuesUnitAttention: Run re-issues a command answered with UNIT
// ATTENTION (SPC-4 §5.14: the command was not processed) up to 3 times and
// reports the 4th; Execute reports the first as it came.
func TestRunReissuesUnitAttention(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	ft.mu.Lock()
	ft.unitAttentions = 3
	ft.mu.Unlock()
	buf := make([]byte, 512)
	res, err := s.Run(ctx, &Command{CDB: rw16(opRead16, 0, 1, false), DataIn: [][]byte{buf}})
	if err != nil || res.Status != sense.StatusGood || res.DataInLen != 512 {
		t.Fatalf("Run after 3 unit attentions: %v, status %#x, %d bytes", err, res.Status, res.DataInLen)
	}
	ft.mu.Lock()
	ft.unitAttentions = 4
	ft.mu.Unlock()
	var se *SenseError
	if _, err := s.Run(ctx, &Command{CDB: rw16(opRead16, 0, 1, false), DataIn: [][]byte{buf}}); !errors.As(err, &se) || se.Key != sense.KeyUnitAttention || se.ASC != 0x29 {
		t.Errorf("Run after 4 unit attentions: %v, want UNIT ATTENTION 29h/00h", err)
	}
	ft.mu.Lock()
	ft.unitAttentions = 1
	ft.mu.Unlock()
	res, err = s.Execute(ctx, &Command{CDB: rw16(opRead16, 0, 1, false), DataIn: [][]byte{buf}})
	if err != nil || res.Status != sense.StatusCheckCondition {
		t.Errorf("Execute with a unit attention pending: %v, status %#x, want CHECK CONDITION", err, res.Status)
	}
}

// TestLoginMulti: channel 0 logs in with SINGLE unless JoinNexus; every
// later channel with MULTI.
func TestLoginMulti(t *testing.T) {
	for _, c := range []struct {
		join bool
		idx  int
		want byte
	}{{false, 0, 0x80}, {false, 1, 0x81}, {true, 0, 0x81}, {true, 3, 0x81}} {
		o := Options{Dest: "x", JoinNexus: c.join}.withDefaults()
		if got := loginPrivateData(o, o.loginMulti(c.idx))[10]; got != c.want {
			t.Errorf("JoinNexus %v channel %d: req_flags %#x, want %#x", c.join, c.idx, got, c.want)
		}
	}
}

// Two sessions of one initiator port that share the I_T nexus (JoinNexus,
// as two srpctl processes on one host) must not send the same tags: the
// target refuses a tag another command of the nexus holds with
// OVERLAPPED COMMANDS ATTEMPTED.
func TestJoinedSessionsTagsDiffer(t *testing.T) {
	net := loopback.NewNetwork()
	ft := newFakeTarget(t, net)
	var ss []*Session
	for i, join := range []bool{false, true} {
		o := Options{Dest: ft.addr(), IDExt: 0x0002c90300a1b2c3, IOCGUID: 0x0002c90300a1b2c3, InitiatorExt: 1, InitiatorGUID: 0x1122334455667788, ChCount: 2, JoinNexus: join}
		dev := net.NewDevice(fmt.Sprintf("initiator%d", i))
		t.Cleanup(func() { dev.Close() })
		s, err := Dial(testCtx(t), dev, o)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		ss = append(ss, s)
	}
	ctx := testCtx(t)
	for range 8 {
		for _, s := range ss {
			if err := s.TestUnitReady(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	seen := map[uint64]bool{}
	for _, c := range ft.cmds {
		if seen[c.Tag] {
			t.Fatalf("tag %#x sent twice by the two sessions (%d commands)", c.Tag, len(ft.cmds))
		}
		seen[c.Tag] = true
	}
	if len(seen) != 16 {
		t.Fatalf("%d distinct tags, want 16", len(seen))
	}
}
