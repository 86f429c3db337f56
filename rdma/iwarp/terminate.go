package iwarp

import (
	"encoding/binary"
	"fmt"

	"github.com/gosrp/gosrp/rdma"
)

// Terminate error layers (RFC 5040 §7.1, Terminate Control "Layer").
const (
	LayerRDMAP = 0x0
	LayerDDP   = 0x1
	LayerLLP   = 0x2 // MPA
)

// RDMAP error types and codes (RFC 5040 §7.1).
const (
	RDMAPLocalCatastrophic = 0x0
	RDMAPRemoteProtection  = 0x1
	RDMAPRemoteOperation   = 0x2

	RDMAPInvalidSTag        = 0x00
	RDMAPBaseBounds         = 0x01
	RDMAPAccessRights       = 0x02
	RDMAPSTagNotAssociated  = 0x03
	RDMAPTOWrap             = 0x04
	RDMAPInvalidVersion     = 0x05
	RDMAPUnexpectedOpcode   = 0x06
	RDMAPCatastrophicStream = 0x07
	RDMAPCatastrophicGlobal = 0x08
	RDMAPCannotInvalidate   = 0x09
	RDMAPUnspecified        = 0xff
)

// DDP error types and codes (RFC 5041 §7.2).
const (
	DDPLocalCatastrophic = 0x0
	DDPTaggedBuffer      = 0x1
	DDPUntaggedBuffer    = 0x2

	// Tagged buffer error codes.
	DDPTInvalidSTag       = 0x00
	DDPTBaseBounds        = 0x01
	DDPTSTagNotAssociated = 0x02
	DDPTTOWrap            = 0x03
	DDPTInvalidVersion    = 0x04

	// Untagged buffer error codes.
	DDPUInvalidQN       = 0x01
	DDPUNoBuffer        = 0x02 // invalid MSN: no buffer available
	DDPUMSNRange        = 0x03 // invalid MSN: MSN range is not valid
	DDPUInvalidMO       = 0x04
	DDPUMessageTooLong  = 0x05 // DDP message too long for available buffer
	DDPUInvalidVersion  = 0x06
	ddpCatastrophicCode = 0x00
)

// MPA (LLP) error type and codes (RFC 5044 §8, RFC 6581 §7).
const (
	LLPTypeMPA = 0x0

	LLPStreamLost        = 0x01
	LLPCRCError          = 0x02
	LLPMarkerMismatch    = 0x03
	LLPInvalidFrame      = 0x04 // invalid MPA request or reply frame
	LLPLocalCatastrophic = 0x05
	LLPInsufficientIRD   = 0x06
	LLPNoMatchingRTR     = 0x07
)

// Terminate Control hdrct flags (RFC 5040 §4.8).
const (
	termFlagM = 0x80 // DDP Segment Length valid (byte 2 of the control word)
	termFlagD = 0x40 // terminated DDP header included
	termFlagR = 0x20 // terminated RDMA header included
)

// termInfo describes a Terminate to send: the error and the offending FPDU
// header (the MPA length field onwards) to copy.
type termInfo struct {
	Layer, Type, Code uint8
	Detail            string
	// Hdr is the offending segment from its ULPDU_Length field: 2 + DDP
	// header (+ RDMA Read Request header). Nil when the header is not known.
	Hdr []byte
	// RDMAHdr says Hdr includes the RDMA Read Request header (R flag).
	RDMAHdr bool
	// recvStatus, when not success, completes the receive the offending
	// Send consumed (e.g. StatusLocalLength) instead of StatusFlushed.
	recvStatus rdma.Status
}

func (t *termInfo) err(local bool) *rdma.TerminateError {
	return &rdma.TerminateError{Local: local, Layer: t.Layer, Type: t.Type, Code: t.Code, Detail: t.Detail}
}

// terminatePayload encodes the Terminate message body (RFC 5040 §4.8): the
// 4-byte Terminate Control, then, when known, the terminated DDP segment
// length (the offending FPDU's ULPDU_Length), its DDP header and, for an RDMA
// Read Request, its RDMA header.
func (t *termInfo) payload() []byte {
	n := termCtrlLen
	if t.Hdr != nil {
		n += len(t.Hdr)
	}
	b := make([]byte, n)
	b[0] = t.Layer<<4 | t.Type&0x0f
	b[1] = t.Code
	if t.Hdr != nil {
		b[2] = termFlagM | termFlagD
		if t.RDMAHdr {
			b[2] |= termFlagR
		}
		copy(b[termCtrlLen:], t.Hdr)
	}
	return b
}

// parseTerminate decodes a received Terminate body's control word.
func parseTerminate(b []byte) (*rdma.TerminateError, error) {
	if len(b) < termCtrlLen {
		return nil, fmt.Errorf("iwarp: %d-byte Terminate", len(b))
	}
	ctl := binary.BigEndian.Uint32(b)
	te := &rdma.TerminateError{
		Layer: uint8(ctl >> 28), Type: uint8(ctl>>24) & 0x0f, Code: uint8(ctl >> 16),
	}
	te.Detail = termName(te.Layer, te.Type, te.Code)
	return te, nil
}

// termName names a Terminate error from the RFC 5040/5041/5044 tables.
func termName(layer, typ, code uint8) string {
	switch layer {
	case LayerRDMAP:
		switch typ {
		case RDMAPLocalCatastrophic:
			return "RDMAP local catastrophic error"
		case RDMAPRemoteProtection, RDMAPRemoteOperation:
			kind := "remote protection error"
			if typ == RDMAPRemoteOperation {
				kind = "remote operation error"
			}
			names := map[uint8]string{
				RDMAPInvalidSTag: "invalid STag", RDMAPBaseBounds: "base or bounds violation",
				RDMAPAccessRights: "access rights violation", RDMAPSTagNotAssociated: "STag not associated with RDMAP stream",
				RDMAPTOWrap: "TO wrap", RDMAPInvalidVersion: "invalid RDMAP version",
				RDMAPUnexpectedOpcode: "unexpected opcode", RDMAPCatastrophicStream: "catastrophic error, localized to RDMAP stream",
				RDMAPCatastrophicGlobal: "catastrophic error, global", RDMAPCannotInvalidate: "STag cannot be invalidated",
				RDMAPUnspecified: "unspecified",
			}
			if n, ok := names[code]; ok {
				return "RDMAP " + kind + ": " + n
			}
			return fmt.Sprintf("RDMAP %s code %#02x", kind, code)
		}
	case LayerDDP:
		switch typ {
		case DDPLocalCatastrophic:
			return "DDP local catastrophic error"
		case DDPTaggedBuffer:
			names := map[uint8]string{
				DDPTInvalidSTag: "invalid STag", DDPTBaseBounds: "base or bounds violation",
				DDPTSTagNotAssociated: "STag not associated with DDP stream", DDPTTOWrap: "TO wrap",
				DDPTInvalidVersion: "invalid DDP version",
			}
			if n, ok := names[code]; ok {
				return "DDP tagged buffer error: " + n
			}
		case DDPUntaggedBuffer:
			names := map[uint8]string{
				DDPUInvalidQN: "invalid QN", DDPUNoBuffer: "invalid MSN, no buffer available",
				DDPUMSNRange: "invalid MSN, MSN range is not valid", DDPUInvalidMO: "invalid MO",
				DDPUMessageTooLong: "DDP message too long for available buffer", DDPUInvalidVersion: "invalid DDP version",
			}
			if n, ok := names[code]; ok {
				return "DDP untagged buffer error: " + n
			}
		}
	case LayerLLP:
		names := map[uint8]string{
			LLPStreamLost: "TCP connection lost", LLPCRCError: "MPA CRC error",
			LLPMarkerMismatch: "MPA marker and ULPDU length mismatch", LLPInvalidFrame: "invalid MPA request or reply frame",
			LLPLocalCatastrophic: "local catastrophic error", LLPInsufficientIRD: "insufficient IRD",
			LLPNoMatchingRTR: "no matching RTR",
		}
		if n, ok := names[code]; ok {
			return "MPA error: " + n
		}
	}
	return fmt.Sprintf("layer %d type %d code %#02x", layer, typ, code)
}
