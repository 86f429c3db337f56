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
