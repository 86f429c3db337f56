package iwarp

import (
	"bytes"
	"encoding/hex"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// unhex decodes hex with spaces and newlines.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crc32cBitwise is CRC32c computed bit by bit from its definition
// (reflected polynomial 0x82f63b78, initial and final XOR 0xffffffff), as an
// independent check of the table-driven one.
func crc32cBitwise(b []byte) uint32 {
	crc := ^uint32(0)
	for _, x := range b {
		crc ^= uint32(x)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

const (
	hexKeyReq = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65" // "MPA ID Req Frame"
	hexKeyRep = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65" // "MPA ID Rep Frame"
)

// TestMPAFrameGolden checks request and reply frames against the bytes
// Linux siw sends (iwarp-siw.md): revision 2 with the enhanced flag 0x10,
// the IRD/ORD word, then the SRP login (56 bytes) or response (52 bytes).
func TestMPAFrameGolden(t *testing.T) {
	login := bytes.Repeat([]byte{0xaa}, 56)
	req := mpaFrame{Enhanced: true, Revision: 2, PrivateData: append(unhex(t, "00 04 00 00"), login...)}
	want := unhex(t, hexKeyReq+"10 02 00 3c 00 04 00 00"+strings.Repeat("aa", 56))
	if got := req.marshal(); !bytes.Equal(got, want) {
		t.Fatalf("request\n got %x\nwant %x", got, want)
	}
	if len(want) != 80 {
		t.Fatalf("request is %d bytes, siw sends 80", len(want))
	}
	rsp := bytes.Repeat([]byte{0xbb}, 52)
	rep := mpaFrame{Reply: true, Enhanced: true, Revision: 2, PrivateData: append(unhex(t, "00 04 00 04"), rsp...)}
	want = unhex(t, hexKeyRep+"10 02 00 38 00 04 00 04"+strings.Repeat("bb", 52))
	if got := rep.marshal(); !bytes.Equal(got, want) || len(got) != 76 {
		t.Fatalf("reply\n got %x\nwant %x", got, want)
	}
	// With CRC: flags 0x50.
	crcReq := mpaFrame{CRC: true, Enhanced: true, Revision: 2, PrivateData: unhex(t, "00 04 00 00")}
	if got := crcReq.marshal(); !bytes.Equal(got[16:20], unhex(t, "50 02 00 04")) {
		t.Fatalf("CRC request header %x", got[16:20])
	}
	// Revision 1: no enhanced flag, no word.
	v1 := mpaFrame{Revision: 1, PrivateData: login}
	if got := v1.marshal(); !bytes.Equal(got[16:20], unhex(t, "00 01 00 38")) || len(got) != 76 {
		t.Fatalf("v1 request %x", got)
	}
	// Reject flag 0x20.
	rej := mpaFrame{Reply: true, Reject: true, Enhanced: true, Revision: 2, PrivateData: unhex(t, "00 04 00 04 01 02")}
	if got := rej.marshal(); !bytes.Equal(got[16:], unhex(t, "30 02 00 06 00 04 00 04 01 02")) {
		t.Fatalf("reject %x", got[16:])
	}

	// Decoding the siw request.
	f, err := parseMPAFrame(unhex(t, hexKeyReq+"10 02 00 3c 00 04 00 00"+strings.Repeat("aa", 56)), false)
	if err != nil {
		t.Fatal(err)
	}
	w, enh, pd := f.ulpPrivateData()
	if !enh || w.IRD != 4 || w.ORD != 0 || w.PeerToPeer || !bytes.Equal(pd, login) || f.CRC || f.Markers {
		t.Fatalf("decoded %+v word %+v pd %d bytes", f, w, len(pd))
	}
	// Peer-to-peer words: request offers Write and Read RTR, reply picks Write.
	w = parseMPAV2Word(unhex(t, "80 04 c0 01"))
	if w != (mpaV2Word{IRD: 4, ORD: 1, PeerToPeer: true, WriteRTR: true, ReadRTR: true}) {
		t.Fatalf("p2p request word %+v", w)
	}
	var b [4]byte
	(mpaV2Word{IRD: 4, ORD: 4, PeerToPeer: true, WriteRTR: true}).put(b[:])
	if !bytes.Equal(b[:], unhex(t, "80 04 80 04")) {
		t.Fatalf("p2p reply word %x", b)
	}
}

// TestMPAFrameDecodeErrors: wrong key, PD_Length over 512, truncation.
func TestMPAFrameDecodeErrors(t *testing.T) {
	good := unhex(t, hexKeyReq+"10 02 00 04 00 04 00 00")
	for i := range good {
		if _, err := parseMPAFrame(good[:i], false); err == nil {
			t.Fatalf("%d-byte prefix decoded", i)
		}
	}
	if _, err := parseMPAFrame(good, true); err == nil {
		t.Fatal("request key accepted as a reply")
	}
	if _, _, err := parseMPAHeader(unhex(t, hexKeyReq+"00 02 02 01"), false); err == nil {
		t.Fatal("PD_Length 513 accepted")
	}
	if _, _, err := parseMPAHeader(unhex(t, hexKeyReq+"00 02 02 00"), false); err != nil {
		t.Fatalf("PD_Length 512 refused: %v", err)
	}
}

// TestCRC32cVectors: RFC 3720 appendix B.4 iSCSI CRC32c test vectors, and
// the wire byte order (the CRC value little endian, as iSCSI digests and
// Linux siw: 0x5f4cd3eb goes out eb d3 4c 5f).
func TestCRC32cVectors(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
	}
	for _, v := range []struct {
		name string
		in   []byte
		want uint32
	}{
		{"32 zeros", make([]byte, 32), 0x8a9136aa},
		{"32 0xff", bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43},
		{"incrementing", inc, 0x46dd794e},
		{"decrementing", dec, 0x113fdb5c},
	} {
		if got := crc32cBitwise(v.in); got != v.want {
			t.Errorf("bitwise %s: %#08x, want %#08x", v.name, got, v.want)
		}
		var b [4]byte
		putCRC(b[:], crc32cOf(v.in))
		if getCRC(b[:]) != v.want {
			t.Errorf("table %s: %#08x, want %#08x", v.name, getCRC(b[:]), v.want)
		}
	}
	// RFC 3720 B.4 lists the 32-zero digest as bytes aa 36 91 8a.
	var b [4]byte
	putCRC(b[:], 0x8a9136aa)
	if !bytes.Equal(b[:], unhex(t, "aa 36 91 8a")) {
		t.Fatalf("CRC bytes %x", b)
	}
	putCRC(b[:], 0x5f4cd3eb)
	if !bytes.Equal(b[:], unhex(t, "eb d3 4c 5f")) {
		t.Fatalf("CRC bytes %x", b)
	}
}

// fpduBytes frames a ULPDU by hand: length, ULPDU, pad to 4, CRC (zero
// without CRC), per RFC 5044 §4.1.
func fpduBytes(ulpdu []byte, crc bool) []byte {
	b := []byte{byte(len(ulpdu) >> 8), byte(len(ulpdu))}
	b = append(b, ulpdu...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	var c [4]byte
	if crc {
		v := crc32cBitwise(b)
		c = [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
	}
	return append(b, c[:]...)
}

// TestFPDUGolden builds FPDUs with the writer's builder and compares them
// with bytes written by hand from the RFC 5040/5041/5044 layouts.
func TestFPDUGolden(t *testing.T) {
	for _, crc := range []bool{false, true} {
		c := &conn{crc: crc, maxPayload: 1 << 15}
		var out bytes.Buffer
		c.tx.init(c)
		c.tx.w = &out

		// Send "abc", MSN 1, MO 0, last: DDP 0x41 (L, DV 1), RDMAP 0x43
		// (RV 1, opcode 3), RsvdULP 0, QN 0, MSN 1, MO 0; ULPDU 21 bytes,
		// one pad byte.
		sendULPDU := unhex(t, "41 43 00000000 00000000 00000001 00000000 616263")
		// RDMA Write "wxyz" to STag 0x12345678 TO 0x0102030405060708:
		// DDP 0xc1 (T, L, DV 1), RDMAP 0x40 (RV 1, opcode 0).
		writeULPDU := unhex(t, "c1 40 12345678 0102030405060708 7778797a")
		// RDMA Read Request, MSN 1, 0x100 bytes from STag 0xaabbccdd TO
		// 0x2000 into sink STag 0x11223344 TO 0x1000: DDP 0x41, RDMAP 0x41,
		// QN 1.
		readULPDU := unhex(t, "41 41 00000000 00000001 00000001 00000000"+
			"11223344 0000000000001000 00000100 aabbccdd 0000000000002000")
		// Send with Solicited Event and Invalidate of STag 0xcafe0001,
		// zero length: RDMAP opcode 6.
		invULPDU := unhex(t, "41 46 cafe0001 00000000 00000002 00000000")
		// Terminate: DDP untagged buffer error (layer 1, type 2), no buffer
		// (0x02), M and D set, carrying the terminated Send header.
		termULPDU := unhex(t, "41 47 00000000 00000002 00000001 00000000"+
			"12 02 c0 00"+"0015 41 43 00000000 00000000 00000001 00000000")

		mr := &memoryRegion{buf: []byte("abcwxyz"), stag: 1}
		h := c.tx.begin(ddpUntaggedHdrLen, 3)
		putUntagged(h, true, opSend, 0, qnSend, 1, 0)
		c.tx.payload(mr.buf[:3])
		c.tx.end()
		c.tx.emitTagged(opRDMAWrite, 0x12345678, 0x0102030405060708, nil, []byte("wxyz"), 4)
		c.tx.emitReadRequest(1, readRequest{SinkSTag: 0x11223344, SinkTO: 0x1000, Size: 0x100, SourceSTag: 0xaabbccdd, SourceTO: 0x2000})
		c.tx.emitSend(&sqEntry{wr: rdmaSendInv(0xcafe0001), msn: 2})
		c.tx.emitTerminate(&termInfo{Layer: LayerDDP, Type: DDPUntaggedBuffer, Code: DDPUNoBuffer,
			Hdr: unhex(t, "0015 41 43 00000000 00000000 00000001 00000000")})
		c.tx.flush()
		if c.tx.err != nil {
			t.Fatal(c.tx.err)
		}
		var want []byte
		for _, u := range [][]byte{sendULPDU, writeULPDU, readULPDU, invULPDU, termULPDU} {
			want = append(want, fpduBytes(u, crc)...)
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("crc %v\n got %x\nwant %x", crc, out.Bytes(), want)
		}
	}
}

// TestSegmentation: a message over MaxFPDUPayload becomes several FPDUs
// with one MSN, increasing MO and L on the last only.
func TestSegmentation(t *testing.T) {
	c := &conn{maxPayload: 64}
	var out bytes.Buffer
	c.tx.init(c)
	c.tx.w = &out
	d := NewDevice(Config{})
	buf := make([]byte, 150)
	for i := range buf {
		buf[i] = byte(i)
	}
	mr, _ := d.Register(buf, 0)
	e := &sqEntry{wr: rdmaSend(), sgl: sgeList(mr, 0, 100, 100, 50), length: 150, msn: 7}
	c.tx.emitSend(e)
	c.tx.flush()
	b := out.Bytes()
	var got []byte
	for i, want := range []struct {
		mo   uint32
		n    int
		last bool
	}{{0, 64, false}, {64, 64, false}, {128, 22, true}} {
		ulpdu := int(b[0])<<8 | int(b[1])
		h, err := parseDDPHeader(b[2:])
		if err != nil || ulpdu != ddpUntaggedHdrLen+want.n || h.MO != want.mo || h.Last != want.last || h.MSN != 7 || h.QN != 0 || h.Opcode != opSend {
			t.Fatalf("segment %d: ulpdu %d header %+v err %v", i, ulpdu, h, err)
		}
		got = append(got, b[2+ddpUntaggedHdrLen:2+ulpdu]...)
		b = b[2+ulpdu+padLen(ulpdu)+crcSize:]
	}
	if len(b) != 0 || !bytes.Equal(got, buf) {
		t.Fatalf("payload %x, %d bytes left", got, len(b))
	}
}

func crc32cOf(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

func rdmaSend() rdma.SendWR { return rdma.SendWR{Op: rdma.OpSend} }

func rdmaSendInv(stag uint32) rdma.SendWR {
	return rdma.SendWR{Op: rdma.OpSendInvalidate, Solicited: true, InvalidateRKey: stag}
}

// sgeList makes SGEs of mr from (offset, length) pairs.
func sgeList(mr rdma.MemoryRegion, ol ...int) []rdma.SGE {
	var s []rdma.SGE
	for i := 0; i+1 < len(ol); i += 2 {
		s = append(s, rdma.SGE{MR: mr, Offset: ol[i], Length: ol[i+1]})
	}
	return s
}
