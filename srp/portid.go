package srp

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// PortID is a 16-byte SRP port identifier (T10 SRP r16a): an
// 8-byte identifier extension followed by an 8-byte EUI-64. For an initiator
// port Linux sends initiator_ext || port GUID; for a target port id_ext ||
// ioc_guid.
type PortID [16]byte

// NewPortID builds a port ID from its two big-endian halves.
func NewPortID(ext, guid uint64) PortID {
	var p PortID
	binary.BigEndian.PutUint64(p[:8], ext)
	binary.BigEndian.PutUint64(p[8:], guid)
	return p
}

// Ext returns the identifier extension (bytes 0..7).
func (p PortID) Ext() uint64 { return binary.BigEndian.Uint64(p[:8]) }

// GUID returns the EUI-64 half (bytes 8..15).
func (p PortID) GUID() uint64 { return binary.BigEndian.Uint64(p[8:]) }

// String returns the port ID as 32 lowercase hex digits, the form Linux
// uses in sysfs (srp_remote_ports port_id shows it with colons; ib_srpt
// session names use "0x" + 32 hex).
func (p PortID) String() string { return hex.EncodeToString(p[:]) }

// MarshalText implements encoding.TextMarshaler (32 lowercase hex digits).
func (p PortID) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePortID.
func (p *PortID) UnmarshalText(b []byte) error {
	v, err := ParsePortID(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePortID parses the forms users type:
//   - 32 hex digits, optionally prefixed with 0x or 0X: all 16 bytes;
//   - a GUID "xxxx:xxxx:xxxx:xxxx" (four groups of 1-4 hex digits, as
//     ib_srpt names ports): the GUID half, with a zero extension;
//   - a GID "xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx" (eight groups): all 16
//     bytes.
//
// Upper- and lowercase hex digits are accepted. Errors are *DecodeError
// with IU "port ID".
func ParsePortID(s string) (PortID, error) {
	var p PortID
	fail := func(format string, args ...any) (PortID, error) {
		return PortID{}, errInvalid("port ID", "port_id", -1, format, args...)
	}
	if strings.Contains(s, ":") {
		groups := strings.Split(s, ":")
		if len(groups) != 4 && len(groups) != 8 {
			return fail("%q: want 4 (GUID) or 8 (GID) colon-separated groups, got %d", s, len(groups))
		}
		at := 16 - 2*len(groups)
		for _, g := range groups {
			if len(g) == 0 || len(g) > 4 {
				return fail("%q: group %q is not 1-4 hex digits", s, g)
			}
			v, err := strconv.ParseUint(g, 16, 16)
			if err != nil {
				return fail("%q: group %q is not hex", s, g)
			}
			binary.BigEndian.PutUint16(p[at:], uint16(v))
			at += 2
		}
		return p, nil
	}
	h := s
	if strings.HasPrefix(h, "0x") || strings.HasPrefix(h, "0X") {
		h = h[2:]
	}
	if len(h) != 32 {
		return fail("%q: want 32 hex digits (optionally 0x-prefixed) or a GUID xxxx:xxxx:xxxx:xxxx, got %d characters", s, len(h))
	}
	if _, err := hex.Decode(p[:], []byte(h)); err != nil {
		return fail("%q: not hex", s)
	}
	return p, nil
}

// FormatGUID formats a 64-bit GUID as "xxxx:xxxx:xxxx:xxxx", the form of
// ib_srpt port names (srpt_format_guid).
func FormatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// TargetName returns the SCSI target name Linux ib_srp gives a target port:
// "SRP.T10:" followed by id_ext as 16 uppercase hex digits.
func TargetName(idExt uint64) string { return fmt.Sprintf("SRP.T10:%016X", idExt) }
