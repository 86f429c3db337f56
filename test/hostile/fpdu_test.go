package hostile

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// firstSTag is the STag of the first region an iWARP device registers
// (index 1, key 0x9d): the target's own ring, registered for local access
// only. A hostile peer can guess it.
const firstSTag = 0x0000019d

// tur is an SRP_CMD carrying TEST UNIT READY for LUN 0 with tag.
func tur(tag uint64) []byte {
	c := srp.Cmd{Tag: tag, CDB: []byte{0x00, 0, 0, 0, 0, 0}}
	b, _ := c.Marshal()
	return b
}

// TestFPDUViolations logs in with a raw peer, then sends one FPDU breaking
// a DDP or RDMAP rule; the target must answer with the Terminate RFC 5041
// §7.2 / RFC 5040 §7.2 name (copying the offending length field and DDP
// header, M and D flags set, RFC 5040 §4.8) and close the stream, and drop
// the channel.
func TestFPDUViolations(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	iu := tur(1)
	cases := []struct {
		name             string
		ulpdu            []byte
		layer, typ, code byte
		hdrLen           int // DDP header bytes the Terminate copies; 0: none
		rdmaHdr          bool
		// fresh runs the case on a target of its own, so that firstSTag
		// names the live receive ring of this peer's channel.
		fresh bool
	}{
		{"send-qn-3", append(untagged(true, 3, 0, 3, 1, 0), iu...), 1, 2, 0x01, 18, false, false},
		{"send-qn-max", append(untagged(true, 3, 0, 0xffffffff, 1, 0), iu...), 1, 2, 0x01, 18, false, false},
		{"send-msn-ahead", append(untagged(true, 3, 0, 0, 2, 0), iu...), 1, 2, 0x03, 18, false, false},
		{"send-msn-zero", append(untagged(true, 3, 0, 0, 0, 0), iu...), 1, 2, 0x03, 18, false, false},
		{"send-mo-first", append(untagged(true, 3, 0, 0, 1, 16), iu...), 1, 2, 0x04, 18, false, false},
		{"send-ddp-version-0", func() []byte { b := append(untagged(true, 3, 0, 0, 1, 0), iu...); b[0] &^= 3; return b }(), 1, 2, 0x06, 18, false, false},
		{"write-ddp-version-2", func() []byte { b := append(tagged(true, 0, firstSTag, 0), iu...); b[0] = b[0]&^3 | 2; return b }(), 1, 1, 0x04, 14, false, false},
		{"send-rdmap-version-0", func() []byte { b := append(untagged(true, 3, 0, 0, 1, 0), iu...); b[1] &^= 0xc0; return b }(), 0, 2, 0x05, 18, false, false},
		{"send-rdmap-version-3", func() []byte { b := append(untagged(true, 3, 0, 0, 1, 0), iu...); b[1] |= 0xc0; return b }(), 0, 2, 0x05, 18, false, false},
		{"opcode-8-untagged", append(untagged(true, 8, 0, 0, 1, 0), iu...), 0, 2, 0x06, 18, false, false},
		{"opcode-15-untagged", append(untagged(true, 15, 0, 0, 1, 0), iu...), 0, 2, 0x06, 18, false, false},
		{"send-on-readreq-queue", append(untagged(true, 3, 0, 1, 1, 0), iu...), 0, 2, 0x06, 18, false, false},
		{"send-tagged", append(tagged(true, 3, firstSTag, 0), iu...), 0, 2, 0x06, 14, false, false},
		{"read-response-unsolicited", append(tagged(true, 2, firstSTag, 0), iu...), 0, 2, 0x06, 14, false, false},
		{"write-unknown-stag", append(tagged(true, 0, 0xdead0001, 0), iu...), 1, 1, 0x00, 14, false, false},
		{"write-local-only-region", append(tagged(true, 0, firstSTag, 0), iu...), 0, 1, 0x02, 14, false, true},
		// A wrapping TO into a local-only region: the rights are violated
		// whatever the offset.
		{"write-local-only-wrapping", append(tagged(true, 0, firstSTag, 0xfffffffffffffff0), make([]byte, 64)...), 0, 1, 0x02, 14, false, true},
		{"readreq-unknown-stag", readReq(1, 0x1234, 0, 4096, 0xdead0001, 0), 0, 1, 0x00, 46, true, false},
		{"readreq-local-only-region", readReq(1, 0x1234, 0, 64, firstSTag, 0), 0, 1, 0x02, 46, true, true},
		{"readreq-size-max", readReq(1, 0x1234, 0, 0xffffffff, firstSTag, 0), 0, 1, 0x02, 46, true, true},
		{"readreq-msn-ahead", readReq(5, 0x1234, 0, 0, 0, 0), 1, 2, 0x03, 18, false, false},
		{"send-invalidate-unknown", append(untagged(true, 4, 0xdead0001, 0, 1, 0), iu...), 0, 2, 0x09, 18, false, false},
		{"send-too-long", append(untagged(true, 3, 0, 0, 1, 0), make([]byte, 0xffff-18)...), 1, 2, 0x05, 18, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := tg.addr
			if c.fresh {
				addr = startTarget(t, tgtOpts{port: targetCfgSmall(0)}).addr
			}
			p := dialRaw(t, addr)
			p.mustLogin(false)
			if err := p.write(p.fpdu(c.ulpdu)); err != nil {
				t.Fatal(err)
			}
			tm := p.expectTerminate(c.layer, c.typ, c.code)
			if c.hdrLen == 0 {
				return
			}
			wantFlags := byte(0xc0) // M and D
			if c.rdmaHdr {
				wantFlags |= 0x20
			}
			if tm.flags&0xe0 != wantFlags {
				t.Errorf("Terminate flags %#x, want %#x (M, D%s)", tm.flags&0xe0, wantFlags, map[bool]string{true: ", R"}[c.rdmaHdr])
			}
			want := make([]byte, 2+c.hdrLen)
			binary.BigEndian.PutUint16(want, uint16(len(c.ulpdu)))
			copy(want[2:], c.ulpdu)
			if !bytes.HasPrefix(tm.hdr, want) {
				t.Errorf("Terminate copies % x, want % x", tm.hdr, want)
			}
		})
	}
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}

// readReq is an RDMA Read Request ULPDU (RFC 5040 §4.4) on queue 1.
func readReq(msn, sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) []byte {
	b := untagged(true, 1, 0, 1, msn, 0)
	r := make([]byte, 28)
	binary.BigEndian.PutUint32(r[0:], sinkSTag)
	binary.BigEndian.PutUint64(r[4:], sinkTO)
	binary.BigEndian.PutUint32(r[12:], size)
	binary.BigEndian.PutUint32(r[16:], srcSTag)
	binary.BigEndian.PutUint64(r[20:], srcTO)
	return append(b, r...)
}

// TestFPDUFraming: a ULPDU too short for its DDP header is a DDP local
// catastrophic error (RFC 5041 §7.2: 1/0/0); a CRC mismatch on a CRC
// connection is an MPA CRC error (RFC 5044 §8: 2/0/2), also when the peer
// sends no CRC though the target asked for one.
func TestFPDUFraming(t *testing.T) {
	t.Run("short-ulpdu", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{})
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		p.write([]byte{0, 4, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0})
		p.expectTerminate(1, 0, 0)
		tg.waitSessions(t, 0)
		tg.wellBehaved(t)
	})
	t.Run("ulpdu-zero", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{})
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		p.write(make([]byte, 64))
		p.expectTerminate(1, 0, 0)
	})
	t.Run("crc-wrong", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{})
		p := dialRaw(t, tg.addr)
		p.mustLogin(true)
		f := p.fpdu(append(untagged(true, 3, 0, 0, 1, 0), tur(1)...))
		f[len(f)-1] ^= 1
		p.write(f)
		tm := p.expectTerminate(2, 0, 2)
		_ = tm
		tg.waitSessions(t, 0)
		tg.wellBehaved(t)
	})
	t.Run("crc-corrupt-header", func(t *testing.T) {
		// A corrupted header (here the QN) with a CRC is a CRC error, not a
		// DDP error: the CRC is checked first (RFC 5044 §8).
		tg := startTarget(t, tgtOpts{})
		p := dialRaw(t, tg.addr)
		p.mustLogin(true)
		f := p.fpdu(append(untagged(true, 3, 0, 0, 1, 0), tur(1)...))
		f[2+9] = 7
		p.write(f)
		p.expectTerminate(2, 0, 2)
	})
	t.Run("crc-required-not-sent", func(t *testing.T) {
		tg := startTarget(t, tgtOpts{iw: iwarpCRC()})
		p := dialRaw(t, tg.addr)
		rej, pd := p.login(loginPD(nil), false)
		if rej {
			t.Fatalf("rejected: % x", pd)
		}
		if !p.crc {
			t.Fatal("target configured for CRC did not set C in its reply")
		}
		p.crc = false
		p.write(p.fpdu(append(untagged(true, 3, 0, 0, 1, 0), tur(1)...)))
		p.crc = true
		p.expectTerminate(2, 0, 2)
		tg.waitSessions(t, 0)
	})
	t.Run("crc-offered-good", func(t *testing.T) {
		// With CRC on both sides a well-formed TEST UNIT READY is served.
		tg := startTarget(t, tgtOpts{iw: iwarpCRC()})
		p := dialRaw(t, tg.addr)
		p.mustLogin(true)
		// The first command of a new I_T nexus reports the power on
		// (SPC-4 §5.14: UNIT ATTENTION, 29h/00h); the second is GOOD.
		p.send(tur(0x77))
		rsp := p.expectRsp(t, 0x77)
		if rsp.Status != 2 || len(rsp.Sense) < 14 || rsp.Sense[2]&0xf != 6 || rsp.Sense[12] != 0x29 {
			t.Fatalf("first TEST UNIT READY: status %#x sense % x, want UNIT ATTENTION 29h", rsp.Status, rsp.Sense)
		}
		p.send(tur(0x78))
		if rsp := p.expectRsp(t, 0x78); rsp.Status != 0 {
			t.Fatalf("TEST UNIT READY status %#x sense % x", rsp.Status, rsp.Sense)
		}
	})
}

// TestPeerTerminateAndReset: a peer's Terminate, a FIN or an RST in the
// middle of an FPDU take the channel down without disturbing the target.
func TestPeerTerminateAndReset(t *testing.T) {
	tg := startTarget(t, tgtOpts{port: targetCfgSmall(0)})
	full := append(untagged(true, 3, 0, 0, 1, 0), tur(1)...)
	t.Run("terminate", func(t *testing.T) {
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		term := append(untagged(true, 7, 0, 2, 1, 0), 0x12, 0x03, 0, 0)
		p.write(p.fpdu(term))
		p.expectEOF()
	})
	t.Run("fin-mid-fpdu", func(t *testing.T) {
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		f := p.fpdu(full)
		p.write(f[:len(f)/2])
		p.nc.(interface{ CloseWrite() error }).CloseWrite()
		p.expectEOF()
	})
	t.Run("rst-mid-fpdu", func(t *testing.T) {
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		f := p.fpdu(full)
		p.write(f[:5])
		rst(p)
	})
	t.Run("rst-after-login", func(t *testing.T) {
		p := dialRaw(t, tg.addr)
		p.mustLogin(false)
		rst(p)
	})
	tg.waitSessions(t, 0)
	tg.wellBehaved(t)
}

// rst closes the peer's TCP connection with an RST (SO_LINGER 0).
func rst(p *rawPeer) {
	type linger interface{ SetLinger(int) error }
	p.nc.(linger).SetLinger(0)
	p.nc.Close()
}

// expectRsp reads IUs until an SRP_RSP arrives and checks its tag.
func (p *rawPeer) expectRsp(t *testing.T, tag uint64) *srp.Rsp {
	t.Helper()
	for {
		iu, err := p.recvIU()
		if err != nil {
			t.Fatalf("waiting for SRP_RSP tag %#x: %v", tag, err)
		}
		if len(iu) == 0 || srp.Opcode(iu[0]) != srp.OpRsp {
			continue
		}
		rsp, err := srp.UnmarshalRsp(iu)
		if err != nil {
			t.Fatalf("SRP_RSP: %v", err)
		}
		if rsp.Tag != tag {
			t.Fatalf("SRP_RSP tag %#x, want %#x", rsp.Tag, tag)
		}
		_ = time.Now
		return rsp
	}
}
