package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// MPA request/reply frame (RFC 5044 §7.1, extended by RFC 6581 §5).
//
//	0..15  Key: "MPA ID Req Frame" or "MPA ID Rep Frame"
//	16     flags: M (0x80) markers, C (0x40) CRC, R (0x20) reject,
//	       H (0x10) enhanced (RFC 6581) IRD/ORD word leads the private data
//	17     Rev: MPA revision (1 or 2)
//	18..19 PD_Length: private data bytes (big endian), at most 512
//	20..   private data
const (
	mpaKeyRequest = "MPA ID Req Frame"
	mpaKeyReply   = "MPA ID Rep Frame"

	mpaFlagMarkers  = 0x80 // M: markers requested (refused by us, as by Linux siw)
	mpaFlagCRC      = 0x40 // C: CRC32c in every FPDU
	mpaFlagReject   = 0x20 // R: reply rejects the connection
	mpaFlagEnhanced = 0x10 // H: RFC 6581 enhanced parameters present

	// mpaHeaderLen is the fixed part of an MPA request or reply, in bytes.
	mpaHeaderLen = 20
	// MPAMaxPrivateData is the most private data an MPA request or reply
	// carries, in bytes, including the 4-byte RFC 6581 IRD/ORD word
	// (RFC 5044 §7.1: PD_Length "MUST NOT exceed 512").
	MPAMaxPrivateData = 512
	// mpaV2WordLen is the size of the RFC 6581 IRD/ORD word, in bytes.
	mpaV2WordLen = 4
)

// RFC 6581 §5 IRD/ORD word bits (the word is two big-endian 16-bit halves:
// IRD then ORD, each a 14-bit count under two control bits).
const (
	mpaV2PeerToPeer = 0x8000 // IRD half: peer-to-peer (RTR) mode
	mpaV2SendRTR    = 0x4000 // IRD half: zero-length Send RTR offered/chosen
	mpaV2WriteRTR   = 0x8000 // ORD half: zero-length RDMA Write RTR
	mpaV2ReadRTR    = 0x4000 // ORD half: zero-length RDMA Read Request RTR
	mpaV2CountMask  = 0x3fff
)

// ErrMPAFrame reports an MPA request or reply that breaks RFC 5044 §7.1.
var ErrMPAFrame = errors.New("iwarp: malformed MPA frame")

// mpaFrame is one MPA request or reply.
type mpaFrame struct {
	Reply    bool
	Markers  bool
	CRC      bool
	Reject   bool
	Enhanced bool  // H bit: PrivateData starts with the IRD/ORD word
	Revision uint8 // 1 or 2
	// PrivateData is everything after the 20-byte header, including the
	// IRD/ORD word when Enhanced.
	PrivateData []byte
}

// mpaV2Word is the RFC 6581 §5 enhanced connection parameters.
type mpaV2Word struct {
	IRD, ORD   uint16 // 14-bit counts
	PeerToPeer bool
	SendRTR    bool
	WriteRTR   bool
	ReadRTR    bool
}

func (w mpaV2Word) put(b []byte) {
	ird := w.IRD & mpaV2CountMask
	ord := w.ORD & mpaV2CountMask
	if w.PeerToPeer {
		ird |= mpaV2PeerToPeer
	}
	if w.SendRTR {
		ird |= mpaV2SendRTR
	}
	if w.WriteRTR {
		ord |= mpaV2WriteRTR
	}
	if w.ReadRTR {
		ord |= mpaV2ReadRTR
	}
	binary.BigEndian.PutUint16(b[0:], ird)
	binary.BigEndian.PutUint16(b[2:], ord)
}

func parseMPAV2Word(b []byte) mpaV2Word {
	ird := binary.BigEndian.Uint16(b[0:])
	ord := binary.BigEndian.Uint16(b[2:])
	return mpaV2Word{
		IRD: ird & mpaV2CountMask, ORD: ord & mpaV2CountMask,
		PeerToPeer: ird&mpaV2PeerToPeer != 0, SendRTR: ird&mpaV2SendRTR != 0,
		WriteRTR: ord&mpaV2WriteRTR != 0, ReadRTR: ord&mpaV2ReadRTR != 0,
	}
}

// marshal encodes the frame. PrivateData must not exceed MPAMaxPrivateData.
func (f *mpaFrame) marshal() []byte {
	b := make([]byte, mpaHeaderLen+len(f.PrivateData))
	if f.Reply {
		copy(b, mpaKeyReply)
	} else {
		copy(b, mpaKeyRequest)
	}
	var flags byte
	if f.Markers {
		flags |= mpaFlagMarkers
	}
	if f.CRC {
		flags |= mpaFlagCRC
	}
	if f.Reject {
		flags |= mpaFlagReject
	}
	if f.Enhanced {
		flags |= mpaFlagEnhanced
	}
	b[16] = flags
	b[17] = f.Revision
	binary.BigEndian.PutUint16(b[18:], uint16(len(f.PrivateData)))
	copy(b[20:], f.PrivateData)
	return b
}

// parseMPAHeader decodes the 20-byte fixed part of a frame and returns the
// private data length that follows. It checks the key (request or reply as
// wantReply says) and the PD_Length bound; flags and revision are returned
// for the caller's policy.
func parseMPAHeader(h []byte, wantReply bool) (f mpaFrame, pdLen int, err error) {
	if len(h) < mpaHeaderLen {
		return f, 0, fmt.Errorf("%w: %d-byte header", ErrMPAFrame, len(h))
	}
	key := mpaKeyRequest
	if wantReply {
		key = mpaKeyReply
	}
	if string(h[:16]) != key {
		return f, 0, fmt.Errorf("%w: key %q, want %q", ErrMPAFrame, h[:16], key)
	}
	f.Reply = wantReply
	f.Markers = h[16]&mpaFlagMarkers != 0
	f.CRC = h[16]&mpaFlagCRC != 0
	f.Reject = h[16]&mpaFlagReject != 0
	f.Enhanced = h[16]&mpaFlagEnhanced != 0
	f.Revision = h[17]
	pdLen = int(binary.BigEndian.Uint16(h[18:]))
	if pdLen > MPAMaxPrivateData {
		return f, pdLen, fmt.Errorf("%w: PD_Length %d exceeds %d", ErrMPAFrame, pdLen, MPAMaxPrivateData)
	}
	return f, pdLen, nil
}

// parseMPAFrame decodes a whole frame (header and private data).
func parseMPAFrame(b []byte, wantReply bool) (mpaFrame, error) {
	f, n, err := parseMPAHeader(b, wantReply)
	if err != nil {
		return f, err
	}
	if len(b) != mpaHeaderLen+n {
		return f, fmt.Errorf("%w: %d bytes of private data, PD_Length %d", ErrMPAFrame, len(b)-mpaHeaderLen, n)
	}
	f.PrivateData = b[mpaHeaderLen:]
	if f.Enhanced && f.Revision == 2 && n < mpaV2WordLen {
		return f, fmt.Errorf("%w: enhanced frame without the IRD/ORD word", ErrMPAFrame)
	}
	return f, nil
}

// describePeerBytes quotes the first bytes a peer sent in place of an MPA
// frame, with a guess at the protocol they begin (a server that speaks
// first, or answers the request with an error of its own).
func describePeerBytes(b []byte) string {
	guess := ""
	s := string(b)
	switch {
	case strings.HasPrefix(s, "HTTP/"):
		guess = "an HTTP server"
	case strings.HasPrefix(s, "SSH-"):
		guess = "an SSH server"
	case len(b) >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03:
		guess = "a TLS server"
	case strings.HasPrefix(s, "220"):
		guess = "an FTP or SMTP server"
	case strings.HasPrefix(s, "+OK"), strings.HasPrefix(s, "* OK"):
		guess = "a POP3 or IMAP server"
	case strings.HasPrefix(mpaKeyRequest, s) || strings.HasPrefix(s, mpaKeyRequest):
		guess = "an MPA request: an iWARP initiator, not a target"
	case strings.HasPrefix(mpaKeyReply, s) || strings.HasPrefix(s, mpaKeyReply):
		guess = "an MPA reply"
	}
	if guess == "" {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q (%s?)", b, guess)
}

// ulpPrivateData splits the private data of a frame into the IRD/ORD word
// (when the frame is an enhanced revision 2 frame) and the consumer's bytes.
func (f *mpaFrame) ulpPrivateData() (w mpaV2Word, enhanced bool, pd []byte) {
	if f.Revision == 2 && f.Enhanced && len(f.PrivateData) >= mpaV2WordLen {
		return parseMPAV2Word(f.PrivateData), true, f.PrivateData[mpaV2WordLen:]
	}
	return w, false, f.PrivateData
}

// crcTable is CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4, the
// iSCSI CRC of RFC 3720 §12.1).
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// putCRC stores an FPDU CRC as Linux siw puts it on the wire: the CRC32c
// value in little-endian byte order (as iSCSI digests; value 0x5f4cd3eb is
// sent eb d3 4c 5f).
func putCRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// getCRC reads an FPDU CRC field (see putCRC).
func getCRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// padLen is the number of pad bytes after an FPDU's ULPDU of ulpduLen bytes
// so that the 2-byte length field, the ULPDU and the pad fill whole 4-byte
// words (RFC 5044 §4.1).
func padLen(ulpduLen int) int { return (4 - (2+ulpduLen)&3) & 3 }
