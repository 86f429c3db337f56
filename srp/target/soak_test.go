package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// scsiCore adapts the SCSI target core to Core.
type scsiCore struct{ t *scsi.Target }

func (c scsiCore) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return c.t.OpenSession(n, v), nil
}

// Soak geometry: each channel owns soakSlots regions of soakSlotBlocks
// 512-byte blocks; a command owns one region while in flight.
const (
	soakNexuses     = 4
	soakPerNexus    = 4
	soakSlots       = 12
	soakSlotBlocks  = 16
	soakDepth       = 8 // commands in flight per channel
	soakRQSize      = 16
	soakSlotBufSize = 64 << 10 // initiator buffer spacing per slot
)

// TestSoak runs 16 channels over 4 I_T nexuses against the real SCSI core
// on an asynchronous loopback device (data placed after the post returns,
// so -race sees buffer misuse): each channel keeps soakDepth reads and
// writes in flight (direct, indirect and immediate descriptors) and mixes
// in ABORT TASKs of its in-flight reads; every read is checked against a
// model of what was written, and req_lim must come back whole. Then every
// channel closes (half by SRP_I_LOGOUT, half by Port.Close) and the test
// checks that no goroutine and no memory region outlives the port. It runs
// once with per-channel receive rings and once with a shared receive queue.
func TestSoak(t *testing.T) {
	for _, srq := range []bool{false, true} {
		name := "rings"
		if srq {
			name = "srq"
		}
		t.Run(name, func(t *testing.T) { soak(t, srq) })
	}
}

func soak(t *testing.T, useSRQ bool) {
	ops := 250
	if testing.Short() {
		ops = 60
	}
	timeout := 120 * time.Second
	if dl, ok := t.Deadline(); ok {
		timeout = time.Until(dl) - 10*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	baseline := runtime.NumGoroutine()

	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(16 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	nw := loopback.NewNetwork()
	tdev := nw.NewDevice("target", loopback.WithAsyncExecution())
	dev := &trackDev{Device: tdev}
	port, err := NewPort(Config{ServiceGUID: testGUID, DemoMode: true, RQSize: soakRQSize, SQSize: 64,
		UseSRQ: useSRQ, SRQSize: 256, Logger: testLogger(t)}, dev, scsiCore{st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tdev.Listen(ctx, "srpt")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { _ = port.Serve(serveCtx, l); close(served) }()
	e := &env{t: t, nw: nw, tdev: tdev, dev: dev, port: port, addr: "srpt", ctx: ctx}

	var inis []*ini
	for n := range soakNexuses {
		for k := range soakPerNexus {
			lr := defaultLogin()
			lr.InitiatorPortID[0] = byte(n + 1)
			if k > 0 {
				lr.ReqFlags |= srp.MultiChanMulti
			}
			inis = append(inis, e.login(lr))
		}
	}
	waitFor(t, e, func() bool { return len(port.Sessions()) == soakNexuses*soakPerNexus })
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	errs := make([]error, len(inis))
	for k, in := range inis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Tags are unique per I_T nexus (SAM-5 §4.6.1), as ib_srp's
			// per-channel tags are: the channel number in the high bits.
			d := &soakDriver{in: in, ctx: ctx, base: uint32(k * soakSlots * soakSlotBlocks), tag: uint64(k) << 32,
				rng: rand.New(rand.NewPCG(seed, uint64(k))), reqLim: int(binary.BigEndian.Uint32(in.rsp[4:]))}
			errs[k] = d.run(ops)
			if errs[k] != nil {
				cancel() // unblock the others
			}
		}()
	}
	wg.Wait()
	failed := false
	for k, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("channel %d: %v", k, err)
			failed = true
		}
	}
	if failed || ctx.Err() != nil {
		t.FailNow()
	}
	// The last responses' SENDs complete after the initiators saw them.
	waitFor(t, e, func() bool {
		for _, s := range port.Sessions() {
			if s.Outstanding != 0 {
				return false
			}
		}
		return true
	})
	var cmds, tmfs, checks uint64
	for _, s := range port.Sessions() {
		cmds += s.Commands
		tmfs += s.TMFs
		checks += s.CheckConditions
		// Requests in progress never exceed the response contexts
		// (RQSize): more wait parked.
		if s.ReqLim != soakRQSize || s.Errors != 0 || s.MaxOutstanding > soakRQSize || s.MaxOutstanding < 2 {
			t.Errorf("after the soak: %+v", s)
		}
	}
	// One CHECK CONDITION per I_T nexus: the power-on unit attention.
	if checks != soakNexuses {
		t.Errorf("%d CHECK CONDITIONs, want %d", checks, soakNexuses)
	}
	t.Logf("%d commands, %d TMFs", cmds, tmfs)
	if tmfs == 0 {
		t.Error("no TMF was exercised")
	}

	// Close: half the channels log out, the port logs out the rest.
	for k, in := range inis {
		if k%2 == 0 {
			in.sendIU(&srp.ILogout{Tag: 1})
			in.waitClosed()
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if err := port.Close(cctx); err != nil {
		t.Fatalf("port close: %v", err)
	}
	for k, in := range inis {
		if k%2 == 1 {
			ius := in.waitClosed()
			if len(ius) != 1 || ius[0][0] != 0x80 {
				t.Errorf("channel %d: want one SRP_T_LOGOUT at close, got % x", k, ius)
			}
		}
	}
	stopServe()
	_ = l.Close()
	<-served
	if n := dev.leaked(); n != 0 {
		t.Errorf("%d memory regions still registered after Port.Close", n)
	}
	for _, in := range inis {
		_ = in.dev.Close()
	}
	_ = tdev.Close()
	waitGoroutines(t, ctx, baseline)
}

// waitGoroutines waits (bounded by ctx) until no more goroutines run than
// at baseline, and dumps them if some stay.
func waitGoroutines(t *testing.T, ctx context.Context, baseline int) {
	t.Helper()
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			return
		}
		select {
		case <-ctx.Done():
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines still running, %d before the test:\n%s", n, baseline, buf)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// soakOp is one command or TMF in flight.
type soakOp struct {
	write bool
	tmf   bool
	slot  int
	data  []byte // bytes written (write) or expected (read)
	abort uint64 // the read an ABORT TASK targets
}

// soakDriver is one channel's initiator in the soak: it keeps up to
// soakDepth commands in flight and checks each answer against its model.
type soakDriver struct {
	in      *ini
	ctx     context.Context
	rng     *rand.Rand
	base    uint32 // first LBA of the channel's area
	reqLim  int
	tag     uint64
	model   [soakSlots][]byte // bytes each slot holds (nil: never written, zeros)
	busy    [soakSlots]bool
	out     map[uint64]*soakOp
	aborted map[uint64]bool // reads an ABORT TASK completed before their response
}

func (d *soakDriver) run(ops int) error {
	d.out = map[uint64]*soakOp{}
	d.aborted = map[uint64]bool{}
	// The nexus's first command gets the power-on unit attention; clear it
	// with TEST UNIT READY.
	for k := 0; ; k++ {
		d.tag++
		if err := d.send(&srp.Cmd{Tag: d.tag, CDB: make([]byte, 16)}); err != nil {
			return err
		}
		b, err := d.in.tryNext(d.ctx)
		if err != nil {
			return err
		}
		r, err := srp.UnmarshalRsp(b)
		if err != nil {
			return fmt.Errorf("TEST UNIT READY: % x: %v", b, err)
		}
		d.reqLim += int(r.ReqLimDelta)
		if r.Status == 0 {
			break
		}
		if k == 3 {
			return fmt.Errorf("TEST UNIT READY: status %#x sense % x", r.Status, r.Sense)
		}
	}
	issued := 0
	for issued < ops || len(d.out) > 0 {
		for issued < ops && d.reqLim > 0 && len(d.out) < soakDepth {
			if err := d.issue(); err != nil {
				return err
			}
			issued++
		}
		if err := d.receive(); err != nil {
			return err
		}
	}
	// Credits of aborted reads come back in SRP_CRED_REQs or later deltas.
	for d.reqLim < soakRQSize {
		if err := d.receive(); err != nil {
			return fmt.Errorf("req_lim %d of %d: %w", d.reqLim, soakRQSize, err)
		}
	}
	if d.reqLim != soakRQSize {
		return fmt.Errorf("req_lim %d after the soak, want %d", d.reqLim, soakRQSize)
	}
	// Read every slot back once more.
	for s := range soakSlots {
		if err := d.issueRead(s); err != nil {
			return err
		}
		for len(d.out) > 0 {
			if err := d.receive(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *soakDriver) send(iu srp.IU) error {
	b, err := iu.Marshal()
	if err != nil {
		return err
	}
	d.reqLim--
	return d.in.trySend(b)
}

func (d *soakDriver) freeSlot() int {
	start := d.rng.IntN(soakSlots)
	for k := range soakSlots {
		if s := (start + k) % soakSlots; !d.busy[s] {
			return s
		}
	}
	return -1
}

// issue sends a write, a read, or an ABORT TASK of an in-flight read.
func (d *soakDriver) issue() error {
	if d.rng.IntN(10) == 0 {
		var victims []uint64
		for tag, op := range d.out {
			if !op.write && !op.tmf {
				victims = append(victims, tag)
			}
		}
		if len(victims) > 0 {
			victim := victims[d.rng.IntN(len(victims))]
			d.tag++
			d.out[d.tag] = &soakOp{tmf: true, abort: victim}
			return d.send(&srp.TaskMgmt{Tag: d.tag, Func: srp.TMFAbortTask, TaskTag: victim})
		}
	}
	s := d.freeSlot()
	if s < 0 {
		return errors.New("no free slot")
	}
	if d.rng.IntN(2) == 0 {
		return d.issueRead(s)
	}
	blocks := 1 + d.rng.IntN(soakSlotBlocks)
	data := make([]byte, blocks*512)
	for k := range data {
		data[k] = byte(d.rng.Uint32())
	}
	d.tag++
	cmd := &srp.Cmd{Tag: d.tag, CDB: cdb10(0x2a, d.base+uint32(s*soakSlotBlocks), uint16(blocks))}
	if d.rng.IntN(3) == 0 {
		cmd.DataOut = srp.DataBuf{Format: srp.DescImm}
		cmd.ImmData = data
	} else {
		buf, desc := d.in.buf(s*soakSlotBufSize, len(data))
		copy(buf, data)
		cmd.DataOut = direct(desc)
	}
	d.busy[s] = true
	d.out[d.tag] = &soakOp{write: true, slot: s, data: data}
	return d.send(cmd)
}

func (d *soakDriver) issueRead(s int) error {
	n := soakSlotBlocks * 512
	want := make([]byte, n)
	copy(want, d.model[s])
	buf, desc := d.in.buf(2<<20+s*soakSlotBufSize, n)
	clear(buf)
	d.tag++
	cmd := &srp.Cmd{Tag: d.tag, CDB: cdb10(0x28, d.base+uint32(s*soakSlotBlocks), soakSlotBlocks)}
	if d.rng.IntN(4) == 0 {
		ds := d.in.split(2<<20+s*soakSlotBufSize, n, 4)
		cmd.DataIn = indirect(ds, 4, srp.DirectBuf{Len: 16 * 4})
	} else {
		cmd.DataIn = direct(desc)
	}
	d.busy[s] = true
	d.out[d.tag] = &soakOp{slot: s, data: want}
	return d.send(cmd)
}

// receive handles the next IU from the target.
func (d *soakDriver) receive() error {
	b, err := d.in.tryNext(d.ctx)
	if err != nil {
		return fmt.Errorf("waiting for an IU (%d in flight): %w", len(d.out), err)
	}
	switch b[0] {
	case 0x81: // SRP_CRED_REQ
		cr, err := srp.UnmarshalCredReq(b)
		if err != nil {
			return err
		}
		d.reqLim += int(cr.ReqLimDelta)
		rsp, _ := (&srp.CredRsp{Tag: cr.Tag}).Marshal()
		return d.in.trySend(rsp)
	case 0xc1:
	default:
		return fmt.Errorf("unexpected IU % x", b)
	}
	r, err := srp.UnmarshalRsp(b)
	if err != nil {
		return err
	}
	d.reqLim += int(r.ReqLimDelta)
	if d.reqLim > soakRQSize {
		return fmt.Errorf("req_lim %d above the login's %d", d.reqLim, soakRQSize)
	}
	op := d.out[r.Tag]
	if op == nil {
		if d.aborted[r.Tag] {
			return fmt.Errorf("response for tag %d after its ABORT TASK completed", r.Tag)
		}
		return fmt.Errorf("response for unknown tag %d", r.Tag)
	}
	delete(d.out, r.Tag)
	if op.tmf {
		code, ok := r.TMFCode()
		if !ok {
			return fmt.Errorf("TMF response % x", b)
		}
		switch code {
		case 0: // FUNCTION COMPLETE: the read is aborted unless it already answered
			if v := d.out[op.abort]; v != nil {
				delete(d.out, op.abort)
				d.busy[v.slot] = false
				d.aborted[op.abort] = true
			}
		case 5: // FUNCTION FAILED: the read was not (or no longer) in the core
		default:
			return fmt.Errorf("ABORT TASK response code %d", code)
		}
		return nil
	}
	d.busy[op.slot] = false
	if r.Status != 0 {
		return fmt.Errorf("tag %d: status %#x sense % x", r.Tag, r.Status, r.Sense)
	}
	if op.write {
		if r.Flags != 0 {
			return fmt.Errorf("write tag %d: flags %#x", r.Tag, r.Flags)
		}
		m := d.model[op.slot]
		if len(m) < len(op.data) {
			m = append(m, make([]byte, len(op.data)-len(m))...)
		}
		copy(m, op.data)
		d.model[op.slot] = m
		return nil
	}
	got, _ := d.in.buf(2<<20+op.slot*soakSlotBufSize, len(op.data))
	if !bytes.Equal(got, op.data) {
		k := 0
		for got[k] == op.data[k] {
			k++
		}
		return fmt.Errorf("read tag %d slot %d: data differs from the model at byte %d: % x, want % x", r.Tag, op.slot, k, got[k:k+8], op.data[k:k+8])
	}
	return nil
}
