package hostile

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// readAll reads what the target sends until it closes, failing if it does
// not close before the connection deadline.
func readAll(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	b, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("target kept the connection open (%d bytes received)", len(b))
	}
	return b
}

// expectMPAReject checks that b is exactly one MPA reply with the R bit
// (RFC 5044 §7.1: a responder refusing a request answers with R set and
// closes), and no private data.
func expectMPAReject(t *testing.T, b []byte) {
	t.Helper()
	if len(b) < 20 {
		t.Fatalf("target answered %d bytes (% x), want an MPA reply with the R bit", len(b), b)
	}
	if string(b[:16]) != keyRep {
		t.Fatalf("reply key %q", b[:16])
	}
	if b[16]&flagR == 0 {
		t.Fatalf("reply flags %#x: R bit not set", b[16])
	}
	if n := int(binary.BigEndian.Uint16(b[18:])); len(b) != 20+n {
		t.Fatalf("reply of %d bytes with PD_Length %d: trailing bytes after the reject", len(b), n)
	}
}

// TestMPARequestRefused sends malformed MPA requests (RFC 5044 §7.1):
// the responder must answer with an MPA reply carrying R (or, for a frame
// that is not an MPA request at all, just close), never accept.
func TestMPARequestRefused(t *testing.T) {
	tg := startTarget(t, tgtOpts{})
	pd := append(irdOrd(16, 16), loginPD(nil)...)
	cases := []struct {
		name   string
		frame  []byte
		reject bool // an MPA reject is due; else a plain close
	}{
		{"markers", mpaFrame(keyReq, flagH|flagM, 2, pd), true},
		{"markers-crc", mpaFrame(keyReq, flagH|flagM|flagC, 2, pd), true},
		{"revision-0", mpaFrame(keyReq, flagH, 0, pd), true},
		{"revision-3", mpaFrame(keyReq, flagH, 3, pd), true},
		{"revision-255", mpaFrame(keyReq, 0, 255, loginPD(nil)), true},
		{"pd-length-513", mpaFrame(keyReq, flagH, 2, make([]byte, 513)), true},
		{"pd-length-65535", func() []byte {
			b := mpaFrame(keyReq, flagH, 2, pd)
			binary.BigEndian.PutUint16(b[18:], 0xffff)
			return b
		}(), true},
		{"reply-key", mpaFrame(keyRep, flagH, 2, pd), false},
		{"garbage-key", mpaFrame("GET / HTTP/1.1\r\n", flagH, 2, pd), false},
		{"enhanced-without-word", mpaFrame(keyReq, flagH, 2, []byte{1, 2}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := dialRaw(t, tg.addr)
			if err := p.write(c.frame); err != nil {
				t.Fatal(err)
			}
			b := readAll(t, p.nc)
			if c.reject {
				expectMPAReject(t, b)
			} else if len(b) >= 20 && b[16]&flagR == 0 {
				t.Fatalf("target accepted a malformed request: % x", b)
			}
		})
	}
	tg.waitSessions(t, 0)
	tg.wellBehavedRetry(t, true)
}

// TestMPAHalfOpen: connections that send nothing, a truncated request, or
// one byte at a time must be closed once the handshake timeout passes,
// while a well-behaved initiator logs in meanwhile.
func TestMPAHalfOpen(t *testing.T) {
	tg := startTarget(t, tgtOpts{})
	pd := append(irdOrd(16, 16), loginPD(nil)...)
	full := mpaFrame(keyReq, flagH, 2, pd)
	type peer struct {
		name string
		p    *rawPeer
	}
	var peers []peer
	for i := 0; i < 40; i++ {
		p := dialRaw(t, tg.addr)
		peers = append(peers, peer{"silent", p})
	}
	trunc := dialRaw(t, tg.addr)
	trunc.write(full[:20+10]) // PD_Length promises more
	peers = append(peers, peer{"truncated", trunc})
	hdrOnly := dialRaw(t, tg.addr)
	hdrOnly.write(full[:7])
	peers = append(peers, peer{"partial-header", hdrOnly})

	slow := dialRaw(t, tg.addr)
	stop := make(chan struct{})
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(full)-1; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if slow.write(full[i:i+1]) != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-slowDone }()

	// The target still serves while they hang.
	tg.wellBehaved(t)

	start := time.Now()
	for _, pp := range peers {
		b := readAll(t, pp.p.nc)
		if len(b) >= 20 && b[16]&flagR == 0 {
			t.Errorf("%s: target accepted: % x", pp.name, b)
		}
	}
	b := readAll(t, slow.nc)
	if len(b) >= 20 && b[16]&flagR == 0 {
		t.Errorf("slowloris: target accepted: % x", b)
	}
	t.Logf("half-open connections closed %v after the good login", time.Since(start))
	tg.waitSessions(t, 0)
}

// TestLoginRejects sends logins with malformed fields in the MPA private
// data; each must get an MPA reject carrying SRP_LOGIN_REJ (opcode C2h)
// with the T10 SRP r16a §6.4 table 11 reason and the request's tag.
func TestLoginRejects(t *testing.T) {
	tg := startTarget(t, tgtOpts{})
	cases := []struct {
		name   string
		pd     []byte
		reason srp.RejectReason
		tag    uint64
	}{
		{"wrong-target-port", loginPD(func(l *srp.LoginRequestRDMA) { l.TargetPortID = srp.NewPortID(guid, guid+1) }), srp.RejUnableAssociateChannel, 0x10a1},
		{"it-iu-len-huge", loginPD(func(l *srp.LoginRequestRDMA) { l.ReqITIULen = 1 << 31 }), srp.RejReqITIULenTooLarge, 0x10a1},
		{"it-iu-len-max-uint32", loginPD(func(l *srp.LoginRequestRDMA) { l.ReqITIULen = 0xffffffff }), srp.RejReqITIULenTooLarge, 0x10a1},
		{"it-iu-len-below-login", loginPD(func(l *srp.LoginRequestRDMA) { l.ReqITIULen = 63 }), srp.RejReqITIULenTooLarge, 0x10a1},
		{"buf-fmt-unknown", loginPD(func(l *srp.LoginRequestRDMA) { l.ReqBufFmt = 0x0008 }), srp.RejUnsupportedDescFmt, 0x10a1},
		{"multichannel-3", loginPD(func(l *srp.LoginRequestRDMA) { l.ReqFlags = 3 }), srp.RejMultiChannelUnsupported, 0x10a1},
		{"short-pd", loginPD(nil)[:20], srp.RejUnableEstablishChannel, 0},
		{"wrong-opcode", func() []byte { b := loginPD(nil); b[11] = 0x03; return b }(), srp.RejUnableEstablishChannel, 0},
		{"iu-form-wrong-target", func() []byte {
			lr := srp.LoginRequest{Tag: 7, ReqITIULen: 8260, ReqBufFmt: srp.BufFmtDirect, InitiatorPortID: initiatorID, TargetPortID: srp.NewPortID(1, 2)}
			b, _ := lr.Marshal()
			return b
		}(), srp.RejUnableAssociateChannel, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := dialRaw(t, tg.addr)
			rej, pd := p.login(c.pd, false)
			if !rej {
				t.Fatalf("login accepted: % x", pd)
			}
			if len(pd) < srp.LoginRejSize {
				t.Fatalf("reject private data % x: want a %d-byte SRP_LOGIN_REJ", pd, srp.LoginRejSize)
			}
			if pd[0] != 0xc2 {
				t.Fatalf("reject IU opcode %#x, want C2h (SRP_LOGIN_REJ)", pd[0])
			}
			if got := srp.RejectReason(binary.BigEndian.Uint32(pd[4:])); got != c.reason {
				t.Errorf("reason %v, want %v", got, c.reason)
			}
			if got := binary.BigEndian.Uint64(pd[8:]); got != c.tag {
				t.Errorf("tag %#x, want %#x", got, c.tag)
			}
			p.expectEOF()
		})
	}
	tg.waitSessions(t, 0)
	tg.wellBehavedRetry(t, true)
}

// TestChannelExhaustion: beyond MaxTotalChannels a login gets LOGIN_REJ
// 0x10001 (insufficient RDMA channel resources); once a channel goes, a
// login succeeds again.
func TestChannelExhaustion(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(3)})
	var held []*rawPeer
	for i := 0; i < 3; i++ {
		p := dialRaw(t, tg.addr)
		rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = srp.NewPortID(uint64(i+1), 0xabc) }), false)
		if rej {
			t.Fatalf("login %d rejected: % x", i, pd)
		}
		held = append(held, p)
	}
	for i := 0; i < 3; i++ {
		p := dialRaw(t, tg.addr)
		rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = srp.NewPortID(uint64(100+i), 0xabc) }), false)
		if !rej {
			t.Fatalf("login beyond max_total_channels accepted")
		}
		if got := srp.RejectReason(binary.BigEndian.Uint32(pd[4:])); got != srp.RejInsufficientResources {
			t.Fatalf("reason %v, want %v", got, srp.RejInsufficientResources)
		}
	}
	// IU-form connections (empty private data) count too.
	p := dialRaw(t, tg.addr)
	p.write(mpaFrame(keyReq, flagH, 2, irdOrd(16, 16)))
	flags, _, rpd, err := p.mpaReply()
	if err != nil {
		t.Fatal(err)
	}
	if flags&flagR == 0 {
		t.Fatalf("IU-form connection accepted beyond max_total_channels")
	}
	// rpd is the IRD/ORD word, then SRP_LOGIN_REJ (reason at IU bytes 4..7).
	if len(rpd) < 4+srp.LoginRejSize || rpd[4] != 0xc2 || srp.RejectReason(binary.BigEndian.Uint32(rpd[8:])) != srp.RejInsufficientResources {
		t.Errorf("IU-form reject private data % x, want LOGIN_REJ 0x10001", rpd)
	}
	held[0].nc.Close()
	tg.waitSessions(t, 2)
	// The closed channel's place frees once it has drained (it counts
	// until its rings are released): a login must succeed again soon.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := dialRaw(t, tg.addr)
		rej, pd := p.login(loginPD(func(l *srp.LoginRequestRDMA) { l.InitiatorPortID = srp.NewPortID(200, 0xabc) }), false)
		if !rej {
			held[0] = p
			break
		}
		p.nc.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a closed channel's place never came back: login still rejected (% x)", pd)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tg.waitSessions(t, 3)
	for _, h := range held {
		h.nc.Close()
	}
	tg.waitSessions(t, 0)
	tg.wellBehavedRetry(t, true)
}
