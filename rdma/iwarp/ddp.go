package iwarp

import (
	"encoding/binary"
	"fmt"
)

// FPDU layout (RFC 5044 §4.1) with the DDP (RFC 5041 §4) and RDMAP
// (RFC 5040 §4) headers. Offsets below are from the start of the ULPDU, i.e.
// after the 2-byte MPA ULPDU_Length field.
//
//	0      DDP control: T (0x80) tagged, L (0x40) last, 4 reserved bits,
//	       DV (0x03) DDP version = 1
//	1      RDMAP control: RV (0xc0) RDMAP version = 1, 2 reserved bits,
//	       opcode (0x0f)
//	tagged buffer (RFC 5041 §4.2):   2..5 STag, 6..13 tagged offset (TO)
//	untagged buffer (RFC 5041 §4.3): 2..5 RsvdULP (RDMAP: Invalidate STag),
//	       6..9 QN, 10..13 MSN, 14..17 MO
//	RDMA Read Request (RFC 5040 §4.4), untagged QN 1: 18..21 Data Sink STag,
//	       22..29 Data Sink TO, 30..33 RDMA Read Message Size,
//	       34..37 Data Source STag, 38..45 Data Source TO
//	Terminate (RFC 5040 §4.8), untagged QN 2: 18..21 Terminate Control,
//	       then the terminated DDP segment length and headers
//
// After the ULPDU: 0-3 pad bytes, then the 4-byte CRC field.
const (
	mpaLenSize = 2 // ULPDU_Length field
	crcSize    = 4 // CRC field, present (zero) even without CRC

	ddpTaggedHdrLen   = 14
	ddpUntaggedHdrLen = 18
	rdmaReadReqLen    = 28 // RDMA Read Request header after the untagged DDP header
	readReqHdrLen     = ddpUntaggedHdrLen + rdmaReadReqLen
	termCtrlLen       = 4

	// maxULPDU is the largest ULPDU an MPA length field can describe.
	maxULPDU = 0xffff

	ddpFlagTagged  = 0x80
	ddpFlagLast    = 0x40
	ddpRsvdMask    = 0x3c
	ddpVersionMask = 0x03
	ddpVersion     = 1

	rdmapVersionShift = 6
	rdmapRsvdMask     = 0x30
	rdmapOpcodeMask   = 0x0f
	rdmapVersion      = 1
)

// RDMAP opcodes (RFC 5040 §4.3, table).
const (
	opRDMAWrite      = 0x0
	opReadRequest    = 0x1
	opReadResponse   = 0x2
	opSend           = 0x3
	opSendInvalidate = 0x4
	opSendSE         = 0x5
	opSendSEInvalid  = 0x6
	opTerminate      = 0x7
)

// Untagged queue numbers RDMAP uses (RFC 5040 §5.1).
const (
	qnSend      = 0 // Send messages
	qnReadReq   = 1 // RDMA Read Request messages
	qnTerminate = 2 // Terminate messages
	numQueues   = 3
)

// ddpHeader is a decoded DDP + RDMAP header of one DDP segment.
type ddpHeader struct {
	Tagged, Last bool
	DDPVersion   uint8
	RDMAPVersion uint8
	Opcode       uint8
	Reserved     bool // reserved DDP/RDMAP control bits set (ignored on receive)

	// Tagged buffer model.
	STag uint32
	TO   uint64

	// Untagged buffer model.
	InvalidateSTag uint32 // the RsvdULP field; Send with Invalidate's STag
	QN, MSN, MO    uint32
}

// readRequest is the RDMA Read Request header (RFC 5040 §4.4).
type readRequest struct {
	SinkSTag   uint32
	SinkTO     uint64
	Size       uint32 // RDMA Read Message Size, bytes
	SourceSTag uint32
	SourceTO   uint64
}

// hdrLen is the header length of the segment, in bytes from the start of the
// ULPDU (DDP header plus the RDMA Read Request header where one follows).
func (h *ddpHeader) hdrLen() int {
	if h.Tagged {
		return ddpTaggedHdrLen
	}
	if h.Opcode == opReadRequest {
		return readReqHdrLen
	}
	return ddpUntaggedHdrLen
}

// putControl fills the two control bytes.
func putControl(b []byte, tagged, last bool, opcode uint8) {
	c := byte(ddpVersion)
	if tagged {
		c |= ddpFlagTagged
	}
	if last {
		c |= ddpFlagLast
	}
	b[0] = c
	b[1] = rdmapVersion<<rdmapVersionShift | opcode&rdmapOpcodeMask
}

// putTagged encodes a tagged DDP header (14 bytes) into b.
func putTagged(b []byte, last bool, opcode uint8, stag uint32, to uint64) {
	_ = b[ddpTaggedHdrLen-1]
	putControl(b, true, last, opcode)
	binary.BigEndian.PutUint32(b[2:], stag)
	binary.BigEndian.PutUint64(b[6:], to)
}

// putUntagged encodes an untagged DDP header (18 bytes) into b.
func putUntagged(b []byte, last bool, opcode uint8, rsvdULP, qn, msn, mo uint32) {
	_ = b[ddpUntaggedHdrLen-1]
	putControl(b, false, last, opcode)
	binary.BigEndian.PutUint32(b[2:], rsvdULP)
	binary.BigEndian.PutUint32(b[6:], qn)
	binary.BigEndian.PutUint32(b[10:], msn)
	binary.BigEndian.PutUint32(b[14:], mo)
}

// putReadRequest encodes the 28-byte RDMA Read Request header into b.
func putReadRequest(b []byte, r readRequest) {
	_ = b[rdmaReadReqLen-1]
	binary.BigEndian.PutUint32(b[0:], r.SinkSTag)
	binary.BigEndian.PutUint64(b[4:], r.SinkTO)
	binary.BigEndian.PutUint32(b[12:], r.Size)
	binary.BigEndian.PutUint32(b[16:], r.SourceSTag)
	binary.BigEndian.PutUint64(b[20:], r.SourceTO)
}

func parseReadRequest(b []byte) readRequest {
	_ = b[rdmaReadReqLen-1]
	return readRequest{
		SinkSTag:   binary.BigEndian.Uint32(b[0:]),
		SinkTO:     binary.BigEndian.Uint64(b[4:]),
		Size:       binary.BigEndian.Uint32(b[12:]),
		SourceSTag: binary.BigEndian.Uint32(b[16:]),
		SourceTO:   binary.BigEndian.Uint64(b[20:]),
	}
}

// parseControl decodes the two control bytes.
func parseControl(b []byte) ddpHeader {
	return ddpHeader{
		Tagged:       b[0]&ddpFlagTagged != 0,
		Last:         b[0]&ddpFlagLast != 0,
		DDPVersion:   b[0] & ddpVersionMask,
		RDMAPVersion: b[1] >> rdmapVersionShift,
		Opcode:       b[1] & rdmapOpcodeMask,
		Reserved:     b[0]&ddpRsvdMask != 0 || b[1]&rdmapRsvdMask != 0,
	}
}

// parseDDPHeader decodes the DDP header at the start of a ULPDU. b must hold
// at least the header the control bytes announce (14 tagged, 18 untagged).
func parseDDPHeader(b []byte) (ddpHeader, error) {
	if len(b) < 2 {
		return ddpHeader{}, fmt.Errorf("iwarp: %d-byte DDP header", len(b))
	}
	h := parseControl(b)
	if h.Tagged {
		if len(b) < ddpTaggedHdrLen {
			return h, fmt.Errorf("iwarp: %d-byte tagged DDP header", len(b))
		}
		h.STag = binary.BigEndian.Uint32(b[2:])
		h.TO = binary.BigEndian.Uint64(b[6:])
		return h, nil
	}
	if len(b) < ddpUntaggedHdrLen {
		return h, fmt.Errorf("iwarp: %d-byte untagged DDP header", len(b))
	}
	h.InvalidateSTag = binary.BigEndian.Uint32(b[2:])
	h.QN = binary.BigEndian.Uint32(b[6:])
	h.MSN = binary.BigEndian.Uint32(b[10:])
	h.MO = binary.BigEndian.Uint32(b[14:])
	return h, nil
}
