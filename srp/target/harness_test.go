package target

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

const testGUID = 0x0002c90300a0b1c2

var testInitiator = srp.NewPortID(0x1122334455667788, 0x0002c90300001234)

// trackDev records every region the target registers, so tests can check
// that a released channel deregistered all of them.
type trackDev struct {
	rdma.Device
	mu   sync.Mutex
	mrs  []rdma.MemoryRegion
	srqs []rdma.SRQ
}

func (d *trackDev) Register(buf []byte, acc rdma.Access) (rdma.MemoryRegion, error) {
	mr, err := d.Device.Register(buf, acc)
	if err == nil {
		d.mu.Lock()
		d.mrs = append(d.mrs, mr)
		d.mu.Unlock()
	}
	return mr, err
}

// CreateSRQ forwards to the device's shared receive queues and records
// them, so tests can check the port destroyed them.
func (d *trackDev) CreateSRQ(depth int) (rdma.SRQ, error) {
	sd, ok := d.Device.(rdma.SRQDevice)
	if !ok {
		return nil, errors.New("trackDev: device has no shared receive queues")
	}
	q, err := sd.CreateSRQ(depth)
	if err == nil {
		d.mu.Lock()
		d.srqs = append(d.srqs, q)
		d.mu.Unlock()
	}
	return q, err
}

// leaked counts regions still registered (a second Deregister returns
// ErrDeregistered; a first one returns nil and means a leak).
func (d *trackDev) leaked() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, mr := range d.mrs {
		if err := mr.Deregister(); err == nil {
			n++
		}
	}
	return n
}

// fakeCore is a SCSI core for the fabric tests: READ(10)/WRITE(10) on a
// RAM disk of 512-byte blocks, TEST UNIT READY, and hooks.
type fakeCore struct {
	mu       sync.Mutex
	mem      []byte
	opened   int
	closed   int
	executed int
	tmfs     []scsi.TMF
	running  map[uint64]context.CancelFunc
	hook     func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool)
	nexus    []scsi.Nexus
	views    []scsi.View // the view of each OpenSession, in order
}

// lastView returns the view of the most recent OpenSession.
func (f *fakeCore) lastView() scsi.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.views) == 0 {
		return scsi.View{}
	}
	return f.views[len(f.views)-1]
}

func (f *fakeCore) setHook(h func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool)) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func newFakeCore() *fakeCore {
	return &fakeCore{mem: make([]byte, 4<<20), running: map[uint64]context.CancelFunc{}}
}

func (f *fakeCore) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened++
	f.nexus = append(f.nexus, n)
	f.views = append(f.views, v)
	return &fakeSession{f: f}, nil
}

type fakeSession struct{ f *fakeCore }

// Check accepts every command; the fake core knows no transfer lengths.
func (s *fakeSession) Check(*scsi.Command) (scsi.Result, bool) {
	return scsi.Result{DataOutWanted: -1, DataInWanted: -1}, true
}

// Refuse answers with the core's fixed-format sense for r.
func (s *fakeSession) Refuse(_ *scsi.Command, r scsi.Reason) scsi.Result {
	return scsi.ResultFor(r, false)
}

// Abandon does nothing: the fake core cancels through the context.
func (s *fakeSession) Abandon(*scsi.Command) {}

// Submit runs every command on a goroutine of its own.
func (s *fakeSession) Submit(ctx context.Context, cmd *scsi.Command, c scsi.Completer) (scsi.Result, bool) {
	go func() { c.Complete(cmd, s.Execute(ctx, cmd)) }()
	return scsi.Result{}, false
}

func (s *fakeSession) Execute(ctx context.Context, cmd *scsi.Command) scsi.Result {
	f := s.f
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.executed++
	f.running[cmd.Tag] = cancel
	hook := f.hook
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.running, cmd.Tag)
		f.mu.Unlock()
	}()
	if hook != nil {
		if r, ok := hook(ctx, cmd); ok {
			return r
		}
	}
	cdb := cmd.CDB
	switch cdb[0] {
	case 0x00:
		return scsi.Result{}
	case 0x28, 0x2a:
		lba := int(binary.BigEndian.Uint32(cdb[2:6]))
		n := int(binary.BigEndian.Uint16(cdb[7:9])) * 512
		off := lba * 512
		if off+n > len(f.mem) {
			return scsi.ResultFor(scsi.ReasonLBAOutOfRange, false)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if cdb[0] == 0x28 {
			k := copy(cmd.DataIn, f.mem[off:off+n])
			return scsi.Result{DataInLen: k, DataInWanted: n}
		}
		k := copy(f.mem[off:off+n], cmd.DataOut)
		return scsi.Result{DataOutUsed: k, DataOutWanted: n}
	}
	return scsi.ResultFor(scsi.ReasonInvalidOpcode, false)
}

func (s *fakeSession) TaskManagement(ctx context.Context, fn scsi.TMF, lun, tag uint64) scsi.TMFResponse {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tmfs = append(f.tmfs, fn)
	switch fn {
	case scsi.TMFAbortTask:
		if c := f.running[tag]; c != nil {
			c()
			return scsi.TMFComplete
		}
		return scsi.TMFFailed
	case scsi.TMFLUNReset, scsi.TMFAbortTaskSet, scsi.TMFClearTaskSet:
		for _, c := range f.running {
			c()
		}
	}
	return scsi.TMFComplete
}

func (s *fakeSession) Close() {
	s.f.mu.Lock()
	s.f.closed++
	s.f.mu.Unlock()
}

// env is one target port on a loopback network.
type env struct {
	t    testing.TB
	nw   *loopback.Network
	tdev *loopback.Device
	dev  *trackDev
	port *Port
	core *fakeCore
	addr string
	ctx  context.Context
}

func testLogger(t testing.TB) *slog.Logger {
	var h slog.Handler = slog.DiscardHandler
	if testing.Verbose() && os.Getenv("SRPT_LOG") != "" {
		h = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return slog.New(bugCatcher{Handler: h, t: t})
}

// bugCatcher fails the test on a log record that reports a bug in the
// target rather than in its peer: a command moving between states the
// command state machine (cmdNext) does not allow.
type bugCatcher struct {
	slog.Handler
	t testing.TB
}

func (b bugCatcher) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || b.Handler.Enabled(ctx, l)
}

func (b bugCatcher) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "command state machine:") {
		b.t.Errorf("target bug logged: %s", r.Message)
	}
	if b.Handler.Enabled(ctx, r.Level) {
		return b.Handler.Handle(ctx, r)
	}
	return nil
}

func (b bugCatcher) WithAttrs(as []slog.Attr) slog.Handler {
	return bugCatcher{Handler: b.Handler.WithAttrs(as), t: b.t}
}

func (b bugCatcher) WithGroup(g string) slog.Handler {
	return bugCatcher{Handler: b.Handler.WithGroup(g), t: b.t}
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-5*time.Second))
	}
	return setupEnv(t, ctx, cancel, mod, nil, nil)
}

// newEnvCore is newEnv over core instead of the fake core.
func newEnvCore(t *testing.T, mod func(*Config), core Core) *env {
	t.Helper()
	return newEnvDev(t, mod, core, nil)
}

// newEnvDev is newEnvCore with the port on wrap's device (the tracked
// loopback device and the loopback device under it), if wrap is not nil.
func newEnvDev(t *testing.T, mod func(*Config), core Core, wrap func(*trackDev, *loopback.Device) rdma.Device) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-5*time.Second))
	}
	return setupEnv(t, ctx, cancel, mod, core, wrap)
}

func newEnvB(b *testing.B) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	return setupEnv(b, ctx, cancel, nil, nil, nil)
}

func setupEnv(t testing.TB, ctx context.Context, cancel context.CancelFunc, mod func(*Config), core Core, wrap func(*trackDev, *loopback.Device) rdma.Device) *env {
	nw := loopback.NewNetwork()
	tdev := nw.NewDevice("target")
	e := &env{t: t, nw: nw, tdev: tdev, dev: &trackDev{Device: tdev}, addr: "srpt", ctx: ctx}
	if core == nil {
		e.core = newFakeCore()
		core = e.core
	}
	cfg := Config{ServiceGUID: testGUID, DemoMode: true, RQSize: 16, SQSize: 64, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	var dev rdma.Device = e.dev
	if wrap != nil {
		dev = wrap(e.dev, tdev)
	}
	p, err := NewPort(cfg, dev, core)
	if err != nil {
		t.Fatal(err)
	}
	e.port = p
	l, err := tdev.Listen(ctx, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = p.Serve(ctx, l); close(served) }()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		if err := p.Close(cctx); err != nil {
			t.Errorf("port close: %v", err)
		}
		_ = l.Close()
		<-served
		cancel()
		p.mu.Lock()
		nch, nnx := len(p.channels), len(p.nexuses)
		p.mu.Unlock()
		if nch != 0 || nnx != 0 {
			t.Errorf("after close: %d channels, %d nexuses left", nch, nnx)
		}
		if n := e.dev.leaked(); n != 0 {
			t.Errorf("%d memory regions leaked", n)
		}
		_ = tdev.Close()
	})
	return e
}

// ini is a fake SRP initiator: it encodes IUs with package srp and reads
// the target's IUs back raw.
type ini struct {
	t      testing.TB
	e      *env
	dev    *loopback.Device
	conn   rdma.Conn
	mem    rdma.MemoryRegion // data buffers the target reads and writes
	recvMR rdma.MemoryRegion
	sendMR rdma.MemoryRegion
	nrecv  int
	rsp    []byte // raw login reply
	sends  int
	queued [][]byte
	// sendBusy marks send slots whose SEND has not completed: a slot is
	// reused only after its completion (asynchronous providers read the
	// buffer after PostSend returns).
	sendBusy [iniSendSlots]bool
}

// Send slots: iniSendSlots buffers of iniSendSize bytes, room for an
// SRP_CMD with 8192 bytes of immediate data at offset 68.
const (
	iniSendSlots = 64
	iniSendSize  = 8448
)

const iniRecvSize = 1024

func defaultLogin() srp.LoginRequest {
	return srp.LoginRequest{
		Tag:             0x5a5a0001,
		ReqITIULen:      8260,
		ReqBufFmt:       srp.BufFmtDirect | srp.BufFmtIndirect,
		ReqFlags:        srp.MultiChanSingle | srp.LoginImmRequested,
		ImmDataOffset:   srp.DefaultImmDataOffset,
		InitiatorPortID: testInitiator,
		TargetPortID:    srp.NewPortID(testGUID, testGUID),
	}
}

// dial logs in with lr in the RDMA/CM 56-byte private data form. It
// returns the initiator, or the reject private data.
func (e *env) dial(lr srp.LoginRequest) (*ini, []byte, error) {
	pd, err := (*srp.LoginRequestRDMA)(&lr).Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	return e.dialRaw(pd)
}

func (e *env) dialRaw(pd []byte) (*ini, []byte, error) {
	t := e.t
	t.Helper()
	dev := e.nw.NewDevice("ini")
	t.Cleanup(func() { _ = dev.Close() })
	i := &ini{t: t, e: e, dev: dev, nrecv: 32}
	var err error
	if i.mem, err = dev.Register(make([]byte, 4<<20), rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if i.recvMR, err = dev.Register(make([]byte, i.nrecv*iniRecvSize), rdma.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if i.sendMR, err = dev.Register(make([]byte, iniSendSlots*iniSendSize), rdma.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	conn, rsp, err := dev.Dial(e.ctx, e.addr, rdma.QPConfig{SendDepth: 256, RecvDepth: i.nrecv}, pd)
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			return nil, rej.PrivateData, err
		}
		t.Fatal(err)
	}
	i.conn, i.rsp = conn, rsp
	for s := range i.nrecv {
		if err := conn.PostRecv(rdma.RecvWR{ID: uint64(s), Local: rdma.SGE{MR: i.recvMR, Offset: s * iniRecvSize, Length: iniRecvSize}}); err != nil {
			t.Fatal(err)
		}
	}
	return i, rsp, nil
}

// login dials with lr and fails the test unless the login is accepted.
func (e *env) login(lr srp.LoginRequest) *ini {
	e.t.Helper()
	i, pd, err := e.dial(lr)
	if err != nil {
		e.t.Fatalf("login rejected: %v (% x)", err, pd)
	}
	return i
}

// send posts one IU as a SEND.
func (i *ini) send(iu []byte) {
	i.t.Helper()
	if err := i.trySend(iu); err != nil {
		i.t.Fatalf("post send: %v", err)
	}
}

func (i *ini) trySend(iu []byte) error {
	slot := i.sends % iniSendSlots
	for i.sendBusy[slot] {
		if err := i.pollOnce(i.e.ctx); err != nil {
			return err
		}
	}
	i.sends++
	n := copy(i.sendMR.Bytes()[slot*iniSendSize:(slot+1)*iniSendSize], iu)
	if err := i.conn.PostSend(rdma.SendWR{ID: 1<<32 | uint64(slot), Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: i.sendMR, Offset: slot * iniSendSize, Length: n}}}); err != nil {
		return err
	}
	i.sendBusy[slot] = true
	return nil
}

func (i *ini) sendIU(iu srp.IU) {
	i.t.Helper()
	b, err := iu.Marshal()
	if err != nil {
		i.t.Fatal(err)
	}
	i.send(b)
}

// next returns the next IU the target sent, or fails the test after the
// deadline.
func (i *ini) next() []byte {
	i.t.Helper()
	b, err := i.tryNext(i.e.ctx)
	if err != nil {
		i.t.Fatalf("waiting for an IU: %v", err)
	}
	return b
}

func (i *ini) tryNext(ctx context.Context) ([]byte, error) {
	for len(i.queued) == 0 {
		if err := i.pollOnce(ctx); err != nil {
			if len(i.queued) > 0 {
				break
			}
			return nil, err
		}
	}
	b := i.queued[0]
	i.queued = i.queued[1:]
	return b, nil
}

// pollOnce waits for completions: received IUs are queued (and their
// buffers reposted), completed SENDs free their slots.
func (i *ini) pollOnce(ctx context.Context) error {
	{
		var comps [16]rdma.Completion
		n, err := i.conn.Poll(ctx, comps[:])
		for _, c := range comps[:n] {
			if c.Op != rdma.OpRecv {
				if c.ID>>32 == 1 {
					i.sendBusy[c.ID&0xffffffff%iniSendSlots] = false
				}
				if c.Status != rdma.StatusSuccess && c.Status != rdma.StatusFlushed {
					return errors.New("send failed: " + c.Status.String())
				}
				continue
			}
			if c.Status != rdma.StatusSuccess {
				continue
			}
			s := int(c.ID)
			b := append([]byte(nil), i.recvMR.Bytes()[s*iniRecvSize:s*iniRecvSize+c.ByteLen]...)
			i.queued = append(i.queued, b)
			if err := i.conn.PostRecv(rdma.RecvWR{ID: c.ID, Local: rdma.SGE{MR: i.recvMR, Offset: s * iniRecvSize, Length: iniRecvSize}}); err != nil && !errors.Is(err, rdma.ErrClosed) {
				return err
			}
		}
		return err
	}
}

// rsp returns the next IU, which must be an SRP_RSP.
func (i *ini) rspIU() *srp.Rsp {
	i.t.Helper()
	b := i.next()
	r, err := srp.UnmarshalRsp(b)
	if err != nil {
		i.t.Fatalf("want SRP_RSP, got % x: %v", b, err)
	}
	return r
}

// waitClosed waits until the connection is down and returns the IUs the
// target sent before.
func (i *ini) waitClosed() [][]byte {
	i.t.Helper()
	var got [][]byte
	for {
		b, err := i.tryNext(i.e.ctx)
		if err != nil {
			if i.e.ctx.Err() != nil {
				i.t.Fatalf("connection not closed: %v", err)
			}
			return got
		}
		got = append(got, b)
	}
}

// buf returns the initiator memory [off, off+n) and its direct descriptor.
func (i *ini) buf(off, n int) ([]byte, srp.DirectBuf) {
	return i.mem.Bytes()[off : off+n], srp.DirectBuf{VA: i.mem.Addr() + uint64(off), Key: i.mem.RKey(), Len: uint32(n)}
}

func cdb10(op byte, lba uint32, blocks uint16) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], blocks)
	return c
}

func fill(b []byte, seed byte) {
	for k := range b {
		b[k] = seed + byte(k*7) + byte(k>>9)
	}
}
