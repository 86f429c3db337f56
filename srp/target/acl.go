package target

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// InitiatorMatch names the initiators an ACL admits. It is parsed from the
// ACL name forms Linux ib_srpt accepts (srpt_parse_i_port_id,
// srpt_parse_guid):
//
//   - a port GUID "xxxx:xxxx:xxxx:xxxx" (16 hex digits in 4 groups): matches
//     an initiator port ID whose low 8 bytes (the port GUID half) are equal;
//   - an initiator port ID in hex, optional "0x" prefix, an even number of
//     digits, at most 32 (16 bytes), right-aligned and zero-padded: matches
//     the whole 16-byte ID;
//   - an IPv4 or IPv6 address: matches the initiator's address on an RDMA/CM
//     or iWARP connection.
type InitiatorMatch struct {
	kind matchKind
	id   [16]byte
	ip   netip.Addr
	text string
}

type matchKind uint8

const (
	matchPortID matchKind = iota + 1
	matchGUID
	matchIP
)

// ParseInitiator parses an ACL name. The error names the accepted forms.
func ParseInitiator(s string) (InitiatorMatch, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return InitiatorMatch{}, fmt.Errorf("initiator %q: empty", s)
	}
	if parts := strings.Split(t, ":"); len(parts) == 4 && allHexN(parts, 4) {
		var m InitiatorMatch
		b, _ := hex.DecodeString(strings.Join(parts, ""))
		copy(m.id[8:], b)
		m.kind, m.text = matchGUID, strings.ToLower(t)
		return m, nil
	}
	if ip, err := netip.ParseAddr(t); err == nil {
		return InitiatorMatch{kind: matchIP, ip: ip.Unmap(), text: ip.String()}, nil
	}
	h := t
	if strings.HasPrefix(h, "0x") || strings.HasPrefix(h, "0X") {
		h = h[2:]
	}
	b, err := hex.DecodeString(h)
	if h == "" || len(h) > 32 || err != nil {
		return InitiatorMatch{}, fmt.Errorf("initiator %q: want a port GUID xxxx:xxxx:xxxx:xxxx, an initiator port ID of up to 32 hex digits (even count, optional 0x), or an IP address", s)
	}
	var m InitiatorMatch
	copy(m.id[16-len(b):], b)
	m.kind, m.text = matchPortID, "0x"+hex.EncodeToString(m.id[:])
	return m, nil
}

func allHexN(parts []string, n int) bool {
	for _, p := range parts {
		if len(p) != n {
			return false
		}
		if _, err := hex.DecodeString(p); err != nil {
			return false
		}
	}
	return true
}

// Matches reports whether the initiator with 16-byte port ID id, connecting
// from remote (may be nil), is named by m.
func (m InitiatorMatch) Matches(id [16]byte, remote net.Addr) bool {
	switch m.kind {
	case matchPortID:
		return m.id == id
	case matchGUID:
		return binary.BigEndian.Uint64(m.id[8:]) == binary.BigEndian.Uint64(id[8:])
	case matchIP:
		ip, ok := addrIP(remote)
		return ok && ip == m.ip
	}
	return false
}

// String is the canonical form: "xxxx:xxxx:xxxx:xxxx", "0x" + 32 hex digits,
// or the IP address.
func (m InitiatorMatch) String() string { return m.text }

func addrIP(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.IPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case nil:
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// ACL admits initiators to a target port and maps the LUNs they see.
type ACL struct {
	// Initiator names the admitted initiator port(s).
	Initiator InitiatorMatch
	// LUNs maps the LUN numbers the initiator sees (0..16383, SAM-5 §4.7
	// single level addressing) to the target's LUN numbers. Nil exposes
	// every logical unit under the target's own numbering.
	LUNs map[uint64]uint64
	// ReadOnly write-protects LUNs, keyed by the LUN number the initiator
	// sees (a key of LUNs, or the target's number when LUNs is nil), as
	// LIO's mapped LUN write_protect: medium writes get CHECK CONDITION,
	// DATA PROTECT, WRITE PROTECTED (07/27/00) and MODE SENSE sets WP
	// (SBC-3 §6.5.1). SYNCHRONIZE CACHE, MODE SELECT and reservations are
	// not medium writes (see scsi.WritesMedium).
	ReadOnly map[uint64]bool
}

// FormatGUID formats an 8-byte GUID as ib_srpt names ACLs and sessions:
// "xxxx:xxxx:xxxx:xxxx" (lowercase).
func FormatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, (g>>32)&0xffff, (g>>16)&0xffff, g&0xffff)
}
