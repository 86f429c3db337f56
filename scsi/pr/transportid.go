package pr

import "encoding/hex"

// ProtocolSRP is the SRP protocol identifier (SPC-4 §7.6.1, table 444).
const ProtocolSRP = 0x4

// SRPTransportIDLen is the length of an SRP TransportID in bytes.
const SRPTransportIDLen = 24

// SRPTransportID returns the SRP TransportID (SPC-4 §7.6.4.5, table 453) of
// an initiator port: byte 0 FORMAT CODE 00b and PROTOCOL IDENTIFIER 4h,
// bytes 1–7 reserved, bytes 8–23 the 16-byte initiator port identifier.
func SRPTransportID(initiatorPortID [16]byte) []byte {
	b := make([]byte, SRPTransportIDLen)
	b[0] = ProtocolSRP
	copy(b[8:], initiatorPortID[:])
	return b
}

// ParseSRPTransportID decodes an SRP TransportID into the initiator port ID
// text of Nexus (32 lowercase hex digits). b must hold at least 24 bytes
// with FORMAT CODE 00b and PROTOCOL IDENTIFIER 4h; bytes past 24 are ignored.
func ParseSRPTransportID(b []byte) (string, bool) {
	if len(b) < SRPTransportIDLen || b[0] != ProtocolSRP {
		return "", false
	}
	return hex.EncodeToString(b[8:24]), true
}

// ProtocolISCSI is the iSCSI protocol identifier (SPC-4 §7.6.1, table 444),
// whose TransportIDs are the only variable-length ones.
const ProtocolISCSI = 0x5

// transportIDLen returns the length in bytes of the TransportID at the start
// of b (SPC-4 §7.6.4): iSCSI TransportIDs (FORMAT CODE 00b or 01b) are 4 +
// ADDITIONAL LENGTH (bytes 2–3) long, every other protocol's are 24. It
// returns 0 if b is shorter than that, or the iSCSI ADDITIONAL LENGTH is
// below 20 or not a multiple of 4, or the FORMAT CODE is reserved.
func transportIDLen(b []byte) int {
	if len(b) < 24 {
		return 0
	}
	n := 24
	switch format := b[0] >> 6; {
	case b[0]&0x0f == ProtocolISCSI && format <= 1:
		add := int(b[2])<<8 | int(b[3])
		if add < 20 || add%4 != 0 {
			return 0
		}
		n = 4 + add
	case format != 0:
		return 0
	}
	if n > len(b) {
		return 0
	}
	return n
}
