package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// TestLoginIUForm: with empty connect private data the login comes as the
// first IU (64-byte SRP_LOGIN_REQ) and the answer as a SEND.
func TestLoginIUForm(t *testing.T) {
	e := newEnv(t, nil)
	i, _, err := e.dialRaw(nil)
	if err != nil {
		t.Fatal(err)
	}
	lr := defaultLogin()
	i.sendIU(&lr)
	got := i.next()
	want := make([]byte, 52)
	want[0] = 0xc0
	binary.BigEndian.PutUint32(want[4:], 16)
	binary.BigEndian.PutUint64(want[8:], 0x5a5a0001)
	binary.BigEndian.PutUint32(want[16:], 8276)
	binary.BigEndian.PutUint32(want[20:], 8260)
	binary.BigEndian.PutUint16(want[24:], 6)
	want[26] = 0x80
	if !bytes.Equal(got, want) {
		t.Fatalf("LOGIN_RSP\n got % x\nwant % x", got, want)
	}
	_, d := i.buf(0, 4096)
	src, _ := i.buf(8192, 4096)
	fill(src, 3)
	_, s := i.buf(8192, 4096)
	i.sendIU(&srp.Cmd{Tag: 1, CDB: cdb10(0x2a, 0, 8), DataOut: direct(s)})
	checkGood(t, i.rspIU(), 1)
	i.sendIU(&srp.Cmd{Tag: 2, CDB: cdb10(0x28, 0, 8), DataIn: direct(d)})
	checkGood(t, i.rspIU(), 2)
	if dst, _ := i.buf(0, 4096); !bytes.Equal(dst, src) {
		t.Fatal("data differs")
	}

	// A rejected IU-form login gets SRP_LOGIN_REJ in a SEND, then the
	// connection closes.
	j, _, err := e.dialRaw(nil)
	if err != nil {
		t.Fatal(err)
	}
	lr.TargetPortID[0] ^= 0xff
	j.sendIU(&lr)
	ius := j.waitClosed()
	if len(ius) != 1 || len(ius[0]) != 32 || ius[0][0] != 0xc2 || binary.BigEndian.Uint32(ius[0][4:]) != 0x10003 {
		t.Fatalf("got % x", ius)
	}
}

// TestLUNMapping: the core opens the nexus's session with the ACL's LUN
// map as its view (the core applies it: scsi's TestViewMapping).
func TestLUNMapping(t *testing.T) {
	m, err := ParseInitiator(testInitiator.String())
	if err != nil {
		t.Fatal(err)
	}
	luns := map[uint64]uint64{0: 7, 3: 2}
	e := newEnv(t, func(c *Config) {
		c.DemoMode = false
		c.ACLs = []ACL{{Initiator: m, LUNs: luns}}
	})
	e.login(defaultLogin())
	if v := e.core.lastView(); !maps.Equal(v.LUNs, luns) || len(v.ReadOnly) != 0 {
		t.Fatalf("session view %+v, want LUNs %v", v, luns)
	}
}

// BenchmarkIO4K measures 4 KiB READ and WRITE commands (write data fetched
// by RDMA READ, or sent as immediate data) per second over the loopback
// provider, 16 commands in flight.
func BenchmarkIO4K(b *testing.B) {
	for _, op := range []struct {
		name string
		code byte
		imm  bool
	}{{"read", 0x28, false}, {"write", 0x2a, false}, {"write-imm", 0x2a, true}} {
		b.Run(op.name, func(b *testing.B) {
			e := newEnvB(b)
			i := e.login(defaultLogin())
			const depth = 16
			imm := make([]byte, 4096)
			descs := make([]srp.DirectBuf, depth)
			for k := range descs {
				_, descs[k] = i.buf(k*4096, 4096)
			}
			cmd := func(tag uint64) srp.IU {
				c := &srp.Cmd{Tag: tag, CDB: cdb10(op.code, uint32(tag%512)*8, 8)}
				switch {
				case op.code == 0x28:
					c.DataIn = direct(descs[tag%depth])
				case op.imm:
					c.DataOut = srp.DataBuf{Format: srp.DescImm}
					c.ImmData = imm
				default:
					c.DataOut = direct(descs[tag%depth])
				}
				return c
			}
			b.ResetTimer()
			sent := 0
			for ; sent < depth && sent < b.N; sent++ {
				i.sendIU(cmd(uint64(sent)))
			}
			for done := 0; done < b.N; done++ {
				r := i.rspIU()
				if r.Status != 0 {
					b.Fatalf("status %#x", r.Status)
				}
				if sent < b.N {
					i.sendIU(cmd(r.Tag + depth))
					sent++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
		})
	}
}

// TestMultiChannelConcurrent runs two MULTI channels of one I_T nexus (one
// SCSI session) and a second nexus side by side, each with commands in
// flight, and checks every byte.
func TestMultiChannelConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	a := e.login(defaultLogin())
	lr := defaultLogin()
	lr.ReqFlags |= srp.MultiChanMulti
	b := e.login(lr)
	lr = defaultLogin()
	lr.InitiatorPortID[0] ^= 0x80
	c := e.login(lr)
	inis := []*ini{a, b, c}
	errs := make(chan error, len(inis))
	for k, in := range inis {
		go func() {
			errs <- func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("%v", r)
					}
				}()
				base := uint32(k * 2048) // each channel its own 1 MiB of blocks
				for round := 0; round < 20; round++ {
					src, s := in.buf(0, 16<<10)
					fill(src, byte(round+k))
					_, d := in.buf(1<<20, 16<<10)
					lba := base + uint32(round)*32
					w, _ := (&srp.Cmd{Tag: uint64(2 * round), CDB: cdb10(0x2a, lba, 32), DataOut: direct(s)}).Marshal()
					r, _ := (&srp.Cmd{Tag: uint64(2*round + 1), CDB: cdb10(0x28, lba, 32), DataIn: direct(d)}).Marshal()
					if err := in.trySend(w); err != nil {
						return err
					}
					if rb, err := in.tryNext(e.ctx); err != nil || rb[19] != 0 {
						return fmt.Errorf("write: % x %v", rb, err)
					}
					if err := in.trySend(r); err != nil {
						return err
					}
					if rb, err := in.tryNext(e.ctx); err != nil || rb[19] != 0 {
						return fmt.Errorf("read: % x %v", rb, err)
					}
					if dst, _ := in.buf(1<<20, 16<<10); !bytes.Equal(dst, src) {
						return fmt.Errorf("channel %d round %d: data differs", k, round)
					}
				}
				return nil
			}()
		}()
	}
	for range inis {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	e.core.mu.Lock()
	defer e.core.mu.Unlock()
	if e.core.opened != 2 {
		t.Fatalf("%d SCSI sessions, want 2 (one per I_T nexus)", e.core.opened)
	}
}

// TestSetAccess: a new policy applies to the next login.
func TestSetAccess(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DemoMode = false })
	if _, pd, err := e.dial(defaultLogin()); err == nil || binary.BigEndian.Uint32(pd[4:]) != 0x10006 {
		t.Fatalf("login without ACL: % x %v", pd, err)
	}
	m, _ := ParseInitiator("0002:c903:0000:1234")
	e.port.SetAccess(false, []ACL{{Initiator: m}})
	e.login(defaultLogin())
	e.port.SetAccess(false, nil)
	lr := defaultLogin()
	lr.ReqFlags |= srp.MultiChanMulti
	if _, _, err := e.dial(lr); err == nil {
		t.Fatal("login accepted after the ACL was removed")
	}
}

// TestCredReq: a command the core aborts on its own (another nexus reset
// its LUN) ends without an SRP_RSP; with nothing else outstanding to carry
// its credit the target sends SRP_CRED_REQ (T10 SRP r16a §6.10).
func TestCredReq(t *testing.T) {
	e := newEnv(t, nil)
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if cmd.Tag == 1 {
			return scsi.Result{Aborted: true}, true
		}
		return scsi.Result{}, false
	})
	lr := defaultLogin()
	lr.ReqFlags |= srp.LoginCRSOLNT
	i := e.login(lr)
	i.sendIU(&srp.Cmd{Tag: 1, CDB: make([]byte, 16)})
	b := i.next()
	want := make([]byte, 16)
	want[0] = 0x81 // SRP_CRED_REQ
	want[1] = 1    // solicited notification requested at login (CRSOLNT)
	binary.BigEndian.PutUint32(want[4:], 1)
	if !bytes.Equal(b[:4], want[:4]) || !bytes.Equal(b[4:8], want[4:8]) || len(b) != 16 {
		t.Fatalf("CRED_REQ\n got % x\nwant % x (tag aside)", b, want)
	}
	i.sendIU(&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])})
	// The channel goes on; the CRED_RSP spent no credit.
	i.sendIU(&srp.Cmd{Tag: 2, CDB: make([]byte, 16)})
	if r := i.rspIU(); r.Tag != 2 || r.ReqLimDelta != 1 {
		t.Fatalf("rsp %+v", r)
	}
}

// recConn is an rdma.Conn that records posted work and completes nothing,
// so a test can step a channel by hand between a post and its completion.
type recConn struct {
	sends []rdma.SendWR
	done  chan struct{}
}

func (r *recConn) PostSend(wrs ...rdma.SendWR) error { r.sends = append(r.sends, wrs...); return nil }
func (r *recConn) PostRecv(...rdma.RecvWR) error     { return nil }
func (r *recConn) Poll(ctx context.Context, _ []rdma.Completion) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}
func (r *recConn) Caps() rdma.Caps       { return rdma.Caps{SendDepth: 64, RecvDepth: 64, MaxSGE: 1, ORD: 4} }
func (r *recConn) LocalAddr() net.Addr   { return nil }
func (r *recConn) RemoteAddr() net.Addr  { return nil }
func (r *recConn) Close() error          { return nil }
func (r *recConn) Done() <-chan struct{} { return r.done }
func (r *recConn) Err() error            { return nil }

// TestTagReuseAfterResponse: an initiator may reuse a tag as soon as it has
// the response, before the target has seen its SEND complete (Linux ib_srp
// reuses block layer tags at once); that is not an overlapped command.
func TestTagReuseAfterResponse(t *testing.T) {
	e := newEnv(t, nil)
	c, err := e.port.newChannel(nil, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.freeRings()
	rc := &recConn{done: make(chan struct{})}
	c.conn, c.state, c.sqAvail, c.ordAvail, c.maxTI = rc, stateLive, 64, 4, 8260
	c.nx = &nexus{key: "test", sess: &fakeSession{f: e.core}}
	tur, _ := (&srp.Cmd{Tag: 0x2000000000000000, CDB: make([]byte, 16)}).Marshal()
	for slot := 0; slot < 2; slot++ {
		n := copy(c.recvSlot(slot), tur)
		c.setRecvLen(slot, n)
		c.wait.push(slot)
		c.runWait()
		if len(rc.sends) == slot { // answered at once means refused
			select {
			case ev := <-c.events: // Execute returned: the SRP_RSP is posted
				c.handle(ev)
			case <-e.ctx.Done():
				t.Fatal("command never executed")
			}
		}
		if len(rc.sends) != slot+1 {
			t.Fatalf("%d sends posted, want %d", len(rc.sends), slot+1)
		}
		rsp := rc.sends[slot].Local[0].Bytes()
		if rsp[0] != 0xc1 || rsp[19] != 0 {
			t.Fatalf("response %d: % x, want SRP_RSP with GOOD status", slot, rsp)
		}
	}
}

// TestCoalesce: descriptors that continue one another (same key, adjacent
// addresses) merge; any gap, key change or overflow of the 32-bit length
// keeps them apart, and the total is unchanged.
func TestCoalesce(t *testing.T) {
	d := func(va uint64, key, n uint32) srp.DirectBuf { return srp.DirectBuf{VA: va, Key: key, Len: n} }
	for _, c := range []struct {
		in, want []srp.DirectBuf
	}{
		{nil, nil},
		{[]srp.DirectBuf{d(0x1000, 7, 4096)}, []srp.DirectBuf{d(0x1000, 7, 4096)}},
		{[]srp.DirectBuf{d(0x1000, 7, 4096), d(0x2000, 7, 4096), d(0x3000, 7, 512)}, []srp.DirectBuf{d(0x1000, 7, 8704)}},
		{[]srp.DirectBuf{d(0x1000, 7, 4096), d(0x2000, 8, 4096)}, []srp.DirectBuf{d(0x1000, 7, 4096), d(0x2000, 8, 4096)}},
		{[]srp.DirectBuf{d(0x1000, 7, 4096), d(0x2001, 7, 4096), d(0x3001, 7, 1)}, []srp.DirectBuf{d(0x1000, 7, 4096), d(0x2001, 7, 4097)}},
		{[]srp.DirectBuf{d(0, 7, 0xFFFFFFFF), d(0xFFFFFFFF, 7, 1)}, []srp.DirectBuf{d(0, 7, 0xFFFFFFFF), d(0xFFFFFFFF, 7, 1)}},
	} {
		got := coalesce(slices.Clone(c.in))
		if !slices.Equal(got, c.want) {
			t.Errorf("coalesce(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestCommandStateMachine: advance accepts the moves cmdNext lists and
// reports any other (the channel's bug catcher would fail the other tests
// of this package on one).
func TestCommandStateMachine(t *testing.T) {
	var bad int
	for from := cmdNew; from <= cmdRspSent; from++ {
		for to := cmdNew; to <= cmdRspSent; to++ {
			if !slices.Contains(cmdNext[from], to) {
				bad++
			}
		}
	}
	// Of the 25 moves, 9 are allowed: NEW and NEED_DATA to NEED_DATA, EXEC
	// or RSP_SENT, EXEC to EXEC_DATA or RSP_SENT, and EXEC_DATA to EXEC.
	if bad != 25-9 {
		t.Fatalf("%d moves refused, want 16", bad)
	}
	var logged []string
	c := &channel{log: slog.New(recordHandler{&logged})}
	cmd := &command{state: cmdExec}
	c.advance(cmd, cmdNeedData)
	if cmd.state != cmdNeedData || len(logged) != 1 || c.stats.errors.Load() != 1 {
		t.Fatalf("EXEC -> NEED_DATA: state %v, logged %q, errors %d", cmd.state, logged, c.stats.errors.Load())
	}
	logged = nil
	c.advance(cmd, cmdExec)
	c.advance(cmd, cmdRspSent)
	if len(logged) != 0 {
		t.Fatalf("NEED_DATA -> EXEC -> RSP_SENT logged %q", logged)
	}
}

// recordHandler keeps the messages of the records it handles.
type recordHandler struct{ msgs *[]string }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	*h.msgs = append(*h.msgs, r.Message)
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }
