package iwarp

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// FuzzMPARequest: the MPA request/reply decoder never panics, refuses a
// PD_Length over 512 and round-trips what it accepts.
func FuzzMPARequest(f *testing.F) {
	f.Add(unhex(f, hexKeyReq+"10 02 00 3c 00 04 00 00"+strings.Repeat("aa", 56)), false)
	f.Add(unhex(f, hexKeyRep+"10 02 00 38 00 04 00 04"+strings.Repeat("bb", 52)), true)
	f.Add(unhex(f, hexKeyReq+"00 01 00 02 01 02"), false)
	f.Add(unhex(f, hexKeyReq+"90 02 ff ff"), false)
	f.Add(unhex(f, hexKeyRep+"30 02 00 06 80 04 80 04 6e 6f"), true)
	f.Fuzz(func(t *testing.T, b []byte, reply bool) {
		fr, err := readMPAFrame(bytes.NewReader(b), reply)
		if err != nil {
			return
		}
		if len(fr.PrivateData) > MPAMaxPrivateData {
			t.Fatalf("accepted %d bytes of private data", len(fr.PrivateData))
		}
		_, _, pd := fr.ulpPrivateData()
		if len(pd) > len(fr.PrivateData) {
			t.Fatal("consumer private data longer than the frame's")
		}
		// Reserved flag bits are not kept, so compare the rest.
		out := fr.marshal()
		if !bytes.Equal(out[:16], b[:16]) || !bytes.Equal(out[17:], b[17:len(out)]) || out[16] != b[16]&0xf0 {
			t.Fatalf("round trip\n in %x\nout %x", b[:len(out)], out)
		}
	})
}

// FuzzFPDU feeds arbitrary bytes to a connection's FPDU reader (with a
// receive posted, an RDMA Read and a fence outstanding, and registered
// regions to aim at): it must never panic or place outside a region, only
// complete, Terminate or stop.
func FuzzFPDU(f *testing.F) {
	seed := func(crc bool, us ...[]byte) []byte {
		var b []byte
		for _, u := range us {
			b = append(b, fpduBytes(u, crc)...)
		}
		return b
	}
	f.Add(seed(false, untagged(0x41, 0x43, 0, 0, 1, 0, []byte("hello"))), false)
	f.Add(seed(false, untagged(0x01, 0x43, 0, 0, 1, 0, []byte("hel")), untagged(0x41, 0x43, 0, 0, 1, 3, []byte("lo"))), false)
	f.Add(seed(true, tagged(0xc1, 0x40, 0x100, 0x100000, []byte("data"))), true)
	f.Add(seed(false, tagged(0xc1, 0x42, 0x200, 0x200000, []byte("resp"))), false)
	f.Add(seed(false, readReq(1, 0x100, 0, 4, 0x100, 0x100000)), false)
	f.Add(seed(false, untagged(0x41, 0x47, 0, 2, 1, 0, []byte{0x12, 0x05, 0xc0, 0})), false)
	f.Add(seed(false, untagged(0x41, 0x46, 0x100, 0, 1, 0, nil)), false)
	f.Add([]byte{0xff, 0xff, 0xc1}, false)
	f.Fuzz(fuzzFPDUBody)
}

// fuzzFPDUBody is FuzzFPDU's check of one input.
func fuzzFPDUBody(t *testing.T, data []byte, crc bool) {
	d := NewDevice(Config{MaxFPDUPayload: 64})
	c := newConn(d, nopConn{}, d.qpDefaults(rdma.QPConfig{}), mpaOutcome{Caps: rdma.Caps{SendDepth: 8, RecvDepth: 8, MaxSGE: 4, IRD: 2, ORD: 2}, IRDLimit: 2, CRC: crc})
	c.br = newRxReader(bytes.NewReader(data), 4096)
	wr, _ := d.Register(make([]byte, 64), rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	rb, _ := d.Register(make([]byte, 16), rdma.AccessLocalWrite)
	sink, _ := d.Register(make([]byte, 32), rdma.AccessLocalWrite)
	if err := c.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rb, Length: 16}}); err != nil {
		t.Fatal(err)
	}
	if err := c.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpRDMARead, Local: []rdma.SGE{{MR: sink, Offset: 4, Length: 20}},
		Remote: rdma.RemoteAddr{Addr: 0x1000, RKey: 0x99}}); err != nil {
		t.Fatal(err)
	}
	// As if the writer had sent the Read and then a fence.
	c.mu.Lock()
	c.sqUntx = 0
	c.txSeq = 1
	c.orq[0] = orqEntry{idx: 0}
	c.orq[1] = orqEntry{idx: -1, fence: true, upTo: 1}
	c.orqLen = 2
	c.mu.Unlock()
	_ = wr
	for range 1000 {
		if err := c.readFPDU(); err != nil {
			break
		}
	}
	c.fail(rdma.ErrClosed, nil)
}

// nopConn is a net.Conn that discards writes and has nothing to read.
type nopConn struct{}

func (nopConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (nopConn) Write(b []byte) (int, error)      { return len(b), nil }
func (nopConn) Close() error                     { return nil }
func (nopConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (nopConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (nopConn) SetDeadline(time.Time) error      { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzDDPHeader: the DDP/RDMAP header decoders (RFC 5041 §5.1-5.2, RFC
// 5040 §4.3-4.4, §4.8 Terminate control word) never panic, refuse a header
// shorter than its model needs, and what they accept re-encodes to the
// same bytes (reserved bits and versions aside, which the encoder sets).
func FuzzDDPHeader(f *testing.F) {
	f.Add(untagged(0x41, 0x43, 0, 0, 1, 0, nil)[:ddpUntaggedHdrLen])
	f.Add(tagged(0xc1, 0x40, 0x100, 0x100000, nil)[:ddpTaggedHdrLen])
	f.Add(readReq(1, 0x100, 0, 4, 0x100, 0x100000))
	f.Add([]byte{0x12, 0x05, 0xc0, 0})
	f.Add([]byte{0x81})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseDDPHeader(b)
		need := ddpUntaggedHdrLen
		if len(b) >= 1 && b[0]&ddpFlagTagged != 0 {
			need = ddpTaggedHdrLen
		}
		if (err == nil) != (len(b) >= need) {
			t.Fatalf("%d bytes (need %d): err %v", len(b), need, err)
		}
		if te, err := parseTerminate(b); (err == nil) != (len(b) >= termCtrlLen) {
			t.Fatalf("Terminate of %d bytes: err %v", len(b), err)
		} else if err == nil && (te.Layer != b[0]>>4 || te.Type != b[0]&0x0f || te.Code != b[1]) {
			t.Fatalf("Terminate control % x decoded as %+v", b[:4], te)
		}
		if err != nil {
			return
		}
		out := make([]byte, need)
		if h.Tagged {
			putTagged(out, h.Last, h.Opcode, h.STag, h.TO)
		} else {
			putUntagged(out, h.Last, h.Opcode, h.InvalidateSTag, h.QN, h.MSN, h.MO)
		}
		ctl := byte(ddpFlagTagged | ddpFlagLast)
		if out[0]&ctl != b[0]&ctl || out[1]&rdmapOpcodeMask != b[1]&rdmapOpcodeMask || !bytes.Equal(out[2:], b[2:need]) {
			t.Fatalf("round trip\n in % x\nout % x", b[:need], out)
		}
		if !h.Tagged && h.Opcode == opReadRequest && len(b) >= readReqHdrLen {
			rr := parseReadRequest(b[ddpUntaggedHdrLen:])
			rb := make([]byte, rdmaReadReqLen)
			putReadRequest(rb, rr)
			if !bytes.Equal(rb, b[ddpUntaggedHdrLen:readReqHdrLen]) {
				t.Fatalf("Read Request round trip\n in % x\nout % x", b[ddpUntaggedHdrLen:readReqHdrLen], rb)
			}
		}
	})
}
