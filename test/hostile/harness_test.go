package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

// guid is the target port's service GUID: the target port ID is
// guid || guid (id_ext || ioc_guid).
const guid = 0x0002c90300a0b1c2

const (
	lunBytes  = 1 << 20
	blockSize = 512
)

var initiatorID = srp.NewPortID(0x1122334455667788, 0x0002c90300001234)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("HOSTILE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// core opens SCSI core sessions for the port.
type core struct{ t *scsi.Target }

func (c core) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return c.t.OpenSession(n, v), nil
}

// tgt is one in-process target: an iWARP device listening on 127.0.0.1:0,
// an SRP target port serving it, the SCSI core with one RAM LUN (LUN 0).
type tgt struct {
	addr string
	port *target.Port
	dev  *iwarp.Device
}

type tgtOpts struct {
	iw   iwarp.Config
	port target.Config
	// aclOnly turns demo mode off: only the well-behaved initiator's port
	// GUID has an ACL.
	aclOnly bool
}

// ctxFor returns a context ending before the test's deadline (at most d).
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startTarget starts a target, and registers cleanups that stop it and then
// check that no goroutine it started is left.
func startTarget(t *testing.T, o tgtOpts) *tgt {
	t.Helper()
	checkLeaks(t)
	log := testLogger(t)
	if o.iw.HandshakeTimeout == 0 {
		o.iw.HandshakeTimeout = 2 * time.Second
	}
	if !o.iw.CRC {
		// srptd's default: SEND and WRITE complete on transmit, as siw.
		o.iw.CompleteOnTransmit = true
	}
	o.iw.Logger = log.With("side", "target")
	dev := iwarp.NewDevice(o.iw)
	st := scsi.NewTarget(scsi.TargetConfig{Logger: log})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(lunBytes), BlockSize: blockSize, Serial: "hostile0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	pc := o.port
	pc.ServiceGUID = guid
	pc.DemoMode = !o.aclOnly
	if o.aclOnly {
		m, err := target.ParseInitiator("0000:0000:0000:600d")
		if err != nil {
			t.Fatal(err)
		}
		pc.ACLs = []target.ACL{{Initiator: m}}
	}
	if pc.LogoutTimeout == 0 {
		pc.LogoutTimeout = 500 * time.Millisecond
	}
	pc.Logger = log
	p, err := target.NewPort(pc, dev, core{st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := dev.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = p.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-served
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		if err := p.Close(cctx); err != nil {
			t.Errorf("port Close: %v (channels did not drain)", err)
		}
		l.Close()
		dev.Close()
	})
	return &tgt{addr: l.Addr().String(), port: p, dev: dev}
}

// checkLeaks fails the test when, after every later cleanup ran, more
// goroutines run than before it started (waiting up to 15 s for them to
// wind down).
func checkLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d running, %d before the test\n%s", n, base, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// wellBehaved logs in with the real initiator, writes a pattern and reads
// it back: the target must still serve after an attack.
func (tg *tgt) wellBehaved(t *testing.T) { tg.wellBehavedRetry(t, false) }

// wellBehavedRetry is wellBehaved; with drain, a login refused for
// insufficient resources (0x10001) is retried for up to 10 s, for channels
// that were closed just before and still drain (they count against
// MaxTotalChannels until released).
func (tg *tgt) wellBehavedRetry(t *testing.T, drain bool) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	dev := iwarp.NewDevice(iwarp.Config{Logger: testLogger(t).With("side", "good")})
	defer dev.Close()
	var s *initiator.Session
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err = initiator.Dial(ctx, dev, initiator.Options{
			IDExt: guid, IOCGUID: guid, Dest: tg.addr, InitiatorExt: 0x600d, InitiatorGUID: 0x600d,
			ChCount: 1, ReconnectDelay: -1, CommandTimeout: 20 * time.Second, Logger: testLogger(t),
		})
		var le *initiator.LoginRejectError
		if drain && errors.As(err, &le) && le.Reason == srp.RejInsufficientResources && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("well-behaved initiator: login: %v", err)
	}
	defer s.Close()
	w := bytes.Repeat([]byte("good initiator! "), 8192/16)
	if err := s.Write16(ctx, initiator.LUN(0), 64, w, blockSize, false); err != nil {
		t.Fatalf("well-behaved initiator: WRITE(16): %v", err)
	}
	r := make([]byte, len(w))
	if err := s.Read16(ctx, initiator.LUN(0), 64, r, blockSize, false); err != nil {
		t.Fatalf("well-behaved initiator: READ(16): %v", err)
	}
	if !bytes.Equal(r, w) {
		t.Fatal("well-behaved initiator: read back differs from what was written")
	}
}

// waitSessions waits until the port lists n channels.
func (tg *tgt) waitSessions(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := len(tg.port.Sessions())
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port lists %d channels, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- raw MPA / FPDU peer ----

const (
	keyReq = "MPA ID Req Frame"
	keyRep = "MPA ID Rep Frame"

	flagM = 0x80
	flagC = 0x40
	flagR = 0x20
	flagH = 0x10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rawPeer speaks TCP, MPA and FPDUs byte by byte (RFC 5044 §4.1, §7.1;
// RFC 5041 §4; RFC 5040 §4).
type rawPeer struct {
	t   *testing.T
	nc  net.Conn
	crc bool
	msn [3]uint32 // next MSN to send on untagged queues 0, 1, 2
	// rxMSN is the MSN of the next Send expected from the target.
	rxMSN uint32
	mu    sync.Mutex
	// holdReads leaves the target's RDMA Read Requests unanswered (they
	// collect in heldReads); else they are answered with readData.
	holdReads bool
	heldReads []readRequest
	// readData gives the bytes of an RDMA READ of the peer's memory; nil
	// answers with a repeating pattern.
	readData func(r readRequest) []byte
	// writes records every tagged RDMA WRITE segment the target sent.
	writes []writeSeg
	// id is the initiator port ID mustLogin logs in with: unique per peer
	// unless a test sets it (peers sharing one are one I_T nexus, and a
	// SINGLE login of one logs the others out).
	id srp.PortID
}

var peerSeq atomic.Uint64

// readRequest is an RDMA Read Request received from the target (RFC 5040
// §4.4).
type readRequest struct {
	SinkSTag   uint32
	SinkTO     uint64
	Size       uint32
	SourceSTag uint32
	SourceTO   uint64
}

// writeSeg is one RDMA WRITE segment received from the target.
type writeSeg struct {
	STag uint32
	TO   uint64
	N    int
}

// answerRead sends the Read Response to r (RFC 5040 §4.5), in segments of
// at most 32 KiB.
func (p *rawPeer) answerRead(r readRequest) error {
	var data []byte
	if p.readData != nil {
		data = p.readData(r)
	} else {
		data = make([]byte, r.Size)
		for i := range data {
			data[i] = byte(i*7 + 3)
		}
	}
	off := 0
	for {
		n := min(len(data)-off, 32<<10)
		last := off+n == len(data)
		u := append(tagged(last, 2, r.SinkSTag, r.SinkTO+uint64(off)), data[off:off+n]...)
		if err := p.write(p.fpdu(u)); err != nil {
			return err
		}
		off += n
		if last {
			return nil
		}
	}
}

func dialRaw(t *testing.T, addr string) *rawPeer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawPeer{t: t, nc: nc, msn: [3]uint32{1, 1, 1}, rxMSN: 1, id: srp.NewPortID(0x4057111e, peerSeq.Add(1))}
}

// mpaFrame builds an MPA request: key, flags, revision, PD_Length and the
// private data (for an H frame the IRD/ORD word must lead pd).
func mpaFrame(key string, flags, rev byte, pd []byte) []byte {
	b := make([]byte, 20+len(pd))
	copy(b, key)
	b[16], b[17] = flags, rev
	binary.BigEndian.PutUint16(b[18:], uint16(len(pd)))
	copy(b[20:], pd)
	return b
}

// irdOrd is the RFC 6581 §5 IRD/ORD word (no peer-to-peer).
func irdOrd(ird, ord uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, ird)
	binary.BigEndian.PutUint16(b[2:], ord)
	return b
}

// loginPD is a valid 56-byte srp_login_req_rdma for the target.
func loginPD(mod func(*srp.LoginRequestRDMA)) []byte {
	lr := srp.LoginRequestRDMA{
		Tag: 0x10a1, ReqITIULen: 8260, ReqBufFmt: srp.BufFmtDirect | srp.BufFmtIndirect,
		ReqFlags: srp.MultiChanSingle, InitiatorPortID: initiatorID,
		TargetPortID: srp.NewPortID(guid, guid),
	}
	if mod != nil {
		mod(&lr)
	}
	b, _ := lr.Marshal()
	return b
}

func (p *rawPeer) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.nc.Write(b)
	return err
}

// mpaReply reads the 20-byte reply header and its private data.
func (p *rawPeer) mpaReply() (flags, rev byte, pd []byte, err error) {
	h := make([]byte, 20)
	if _, err = io.ReadFull(p.nc, h); err != nil {
		return 0, 0, nil, err
	}
	if string(h[:16]) != keyRep {
		p.t.Fatalf("MPA reply key %q, want %q", h[:16], keyRep)
	}
	n := int(binary.BigEndian.Uint16(h[18:]))
	pd = make([]byte, n)
	if _, err = io.ReadFull(p.nc, pd); err != nil {
		return 0, 0, nil, err
	}
	return h[16], h[17], pd, nil
}

// login sends a revision 2 request (IRD/ORD 16/16) carrying pd and returns
// the reply's consumer private data and whether it was a reject.
func (p *rawPeer) login(pd []byte, crc bool) (rejected bool, rpd []byte) {
	p.t.Helper()
	var fl byte = flagH
	if crc {
		fl |= flagC
	}
	if err := p.write(mpaFrame(keyReq, fl, 2, append(irdOrd(16, 16), pd...))); err != nil {
		p.t.Fatal(err)
	}
	flags, rev, rp, err := p.mpaReply()
	if err != nil {
		p.t.Fatalf("MPA reply: %v", err)
	}
	if rev != 2 {
		p.t.Fatalf("MPA reply revision %d, want 2", rev)
	}
	if flags&flagH == 0 || len(rp) < 4 {
		p.t.Fatalf("MPA reply flags %#x, %d bytes private data: want the RFC 6581 IRD/ORD word", flags, len(rp))
	}
	p.crc = crc || flags&flagC != 0
	return flags&flagR != 0, rp[4:]
}

// mustLogin logs in and checks the SRP_LOGIN_RSP.
func (p *rawPeer) mustLogin(crc bool) *srp.LoginResponse {
	p.t.Helper()
	rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = p.id }), crc)
	if rej {
		p.t.Fatalf("login rejected: % x", pd)
	}
	rsp, err := srp.UnmarshalLoginResponse(pd)
	if err != nil {
		p.t.Fatalf("LOGIN_RSP: %v", err)
	}
	return rsp
}

// fpdu frames a ULPDU: length field, ULPDU, pad, CRC field.
func (p *rawPeer) fpdu(ulpdu []byte) []byte {
	pad := (4 - (2+len(ulpdu))&3) & 3
	b := make([]byte, 2+len(ulpdu)+pad+4)
	binary.BigEndian.PutUint16(b, uint16(len(ulpdu)))
	copy(b[2:], ulpdu)
	if p.crc {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	}
	return b
}

// untagged is a DDP untagged header (RFC 5041 §4.3) with RDMAP control.
func untagged(last bool, opcode byte, inv, qn, msn, mo uint32) []byte {
	b := make([]byte, 18)
	b[0] = 0x01
	if last {
		b[0] |= 0x40
	}
	b[1] = 0x40 | opcode
	binary.BigEndian.PutUint32(b[2:], inv)
	binary.BigEndian.PutUint32(b[6:], qn)
	binary.BigEndian.PutUint32(b[10:], msn)
	binary.BigEndian.PutUint32(b[14:], mo)
	return b
}

// tagged is a DDP tagged header (RFC 5041 §4.2) with RDMAP control.
func tagged(last bool, opcode byte, stag uint32, to uint64) []byte {
	b := make([]byte, 14)
	b[0] = 0x81
	if last {
		b[0] |= 0x40
	}
	b[1] = 0x40 | opcode
	binary.BigEndian.PutUint32(b[2:], stag)
	binary.BigEndian.PutUint64(b[6:], to)
	return b
}

// send sends iu as one RDMAP Send FPDU with the next MSN of queue 0.
func (p *rawPeer) send(iu []byte) error {
	u := append(untagged(true, 3, 0, 0, p.msn[0], 0), iu...)
	p.msn[0]++
	return p.write(p.fpdu(u))
}

// rxFPDU is one FPDU received from the target.
type rxFPDU struct {
	ulpdu  []byte
	tagged bool
	opcode byte
	qn     uint32
	msn    uint32
	stag   uint32
	to     uint64
	// payload is after the DDP (and RDMA Read Request) header.
	payload []byte
}

func (p *rawPeer) readFPDU() (*rxFPDU, error) {
	var l [2]byte
	if _, err := io.ReadFull(p.nc, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	pad := (4 - (2+n)&3) & 3
	b := make([]byte, n+pad+4)
	if _, err := io.ReadFull(p.nc, b); err != nil {
		return nil, err
	}
	if p.crc {
		want := crc32.Update(crc32.Checksum(l[:], castagnoli), castagnoli, b[:n+pad])
		if got := binary.LittleEndian.Uint32(b[n+pad:]); got != want {
			p.t.Errorf("target FPDU CRC %#x, computed %#x", got, want)
		}
	}
	f := &rxFPDU{ulpdu: b[:n]}
	if n < 2 {
		p.t.Fatalf("target sent a %d-byte ULPDU", n)
	}
	f.tagged = b[0]&0x80 != 0
	f.opcode = b[1] & 0x0f
	if f.tagged {
		f.stag = binary.BigEndian.Uint32(b[2:])
		f.to = binary.BigEndian.Uint64(b[6:])
		f.payload = b[14:n]
	} else {
		f.qn = binary.BigEndian.Uint32(b[6:])
		f.msn = binary.BigEndian.Uint32(b[10:])
		hl := 18
		if f.opcode == 1 {
			hl += 28
		}
		f.payload = b[hl:n]
	}
	return f, nil
}

// terminate is a received Terminate's control word and copied header.
type terminate struct {
	layer, typ, code byte
	flags            byte
	hdr              []byte // the copied ULPDU_Length and DDP header
}

// expectTerminate reads FPDUs (skipping the target's Sends and Writes) until
// a Terminate arrives, checks its layer/type/code (RFC 5040 §4.8, §7), and
// then expects the stream to end.
func (p *rawPeer) expectTerminate(layer, typ, code byte) terminate {
	p.t.Helper()
	for {
		f, err := p.readFPDU()
		if err != nil {
			p.t.Fatalf("stream ended (%v) without the Terminate %d/%d/%#02x", err, layer, typ, code)
		}
		if f.tagged || f.opcode != 7 {
			continue
		}
		if f.qn != 2 {
			p.t.Errorf("Terminate on QN %d, want 2", f.qn)
		}
		if len(f.payload) < 4 {
			p.t.Fatalf("%d-byte Terminate", len(f.payload))
		}
		tm := terminate{layer: f.payload[0] >> 4, typ: f.payload[0] & 0xf, code: f.payload[1], flags: f.payload[2], hdr: f.payload[4:]}
		if tm.layer != layer || tm.typ != typ || tm.code != code {
			p.t.Errorf("Terminate %d/%d/%#02x, want %d/%d/%#02x", tm.layer, tm.typ, tm.code, layer, typ, code)
		}
		p.expectEOF()
		return tm
	}
}

// expectEOF reads until the target closes the stream (bounded by the
// connection deadline).
func (p *rawPeer) expectEOF() {
	p.t.Helper()
	_, err := io.Copy(io.Discard, p.nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.t.Fatalf("target did not close the connection: %v", err)
	}
}

// recvIU reads FPDUs until a whole Send arrives and returns its payload,
// answering nothing (the target must not need an answer to send it).
func (p *rawPeer) recvIU() ([]byte, error) {
	var msg []byte
	for {
		f, err := p.readFPDU()
		if err != nil {
			return nil, err
		}
		if f.tagged {
			if f.opcode == 0 {
				p.writes = append(p.writes, writeSeg{STag: f.stag, TO: f.to, N: len(f.payload)})
			}
			continue
		}
		if f.opcode == 1 && f.qn == 1 {
			h := f.ulpdu[18:]
			r := readRequest{
				SinkSTag: binary.BigEndian.Uint32(h[0:]), SinkTO: binary.BigEndian.Uint64(h[4:]),
				Size: binary.BigEndian.Uint32(h[12:]), SourceSTag: binary.BigEndian.Uint32(h[16:]),
				SourceTO: binary.BigEndian.Uint64(h[20:]),
			}
			if p.holdReads {
				p.heldReads = append(p.heldReads, r)
			} else if err := p.answerRead(r); err != nil {
				return nil, err
			}
			continue
		}
		switch f.opcode {
		case 3, 4, 5, 6:
			msg = append(msg, f.payload...)
			if f.ulpdu[0]&0x40 != 0 {
				if f.msn != p.rxMSN {
					p.t.Errorf("target Send MSN %d, want %d", f.msn, p.rxMSN)
				}
				p.rxMSN++
				return msg, nil
			}
		case 7:
			return nil, fmt.Errorf("target sent a Terminate: % x", f.payload)
		}
	}
}

// targetCfgSmall is a port configuration with small rings and at most
// maxTotal channels.
func targetCfgSmall(maxTotal int) target.Config {
	return target.Config{RQSize: 16, MaxTotalChannels: maxTotal}
}

// iwarpCRC is a target device configuration that asks for the MPA CRC.
func iwarpCRC() iwarp.Config { return iwarp.Config{CRC: true} }
