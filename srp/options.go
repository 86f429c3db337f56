package srp

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// TargetOptions is the target description written to Linux ib_srp's
// add_target sysfs attribute (ib_srp srp_parse_options), e.g.
//
//	id_ext=000000fffe000001,ioc_guid=000000fffe000001,dest=192.0.2.1:5555
//
// Either the InfiniBand CM keys (dgid, pkey, service_id) or dest (RDMA/CM)
// select the path; id_ext and ioc_guid are always required. Fields hold
// Linux's units; a zero field means "not given" (Linux's default applies)
// unless the key was given explicitly, see Has.
type TargetOptions struct {
	IDExt        uint64         // id_ext: identifier extension of the target port ID (hex)
	IOCGUID      uint64         // ioc_guid: I/O controller GUID, the other half of the target port ID (hex)
	DGID         [16]byte       // dgid: destination GID (32 hex digits), IB CM path
	PKey         uint16         // pkey: partition key (hex), IB CM path
	ServiceID    uint64         // service_id: IB CM service ID (hex), IB CM path
	Dest         netip.AddrPort // dest: target address and port, RDMA/CM path
	Src          netip.AddrPort // src: source address; port 0 means none given
	InitiatorExt uint64         // initiator_ext: identifier extension of the initiator port ID (hex)
	MaxSect      int            // max_sect: largest request, in 512-byte sectors
	MaxCmdPerLUN int            // max_cmd_per_lun: SCSI commands queued per LUN
	// TargetCanQueue is target_can_queue: commands queued to the target
	// port over all channels.
	TargetCanQueue int
	IOClass        uint16 // io_class: 0x0100 (SRP r16a, Linux default) or 0xff00 (SRP r10)
	CmdSGEntries   int    // cmd_sg_entries: inline descriptors per SRP_CMD, 1..255
	AllowExtSG     bool   // allow_ext_sg: allow external (non-inline) descriptor tables
	SGTablesize    int    // sg_tablesize: scatter/gather entries per command, 1..2048
	CompVector     int    // comp_vector: first completion vector, >= 0
	TLRetryCount   int    // tl_retry_count: transport layer retries, 2..7
	QueueSize      int    // queue_size: SCSI commands per channel, >= 1 (Linux default 62 + 2)
	MaxITIUSize    int    // max_it_iu_size: cap on req_it_iu_len in bytes, >= 0 (0: no cap)
	ChCount        int    // ch_count: RDMA channels, >= 1 (0: Linux chooses)
	// Transport is a gosrp extension, not understood by Linux: "iwarp"
	// (gosrp's software iWARP over TCP) or "verbs" (kernel RDMA devices).
	// Empty means the program's default.
	Transport string

	given uint32
}

// optKey describes one add_target key.
type optKey struct {
	name  string
	parse func(o *TargetOptions, v string) error
	// format returns the value to render, or "" to omit the key.
	format func(o *TargetOptions, given bool) string
}

// SG_MAX_SEGMENTS on Linux: the largest sg_tablesize ib_srp accepts.
const maxSGTablesize = 2048

// maxChCount is the largest ch_count taken, in RDMA channels: Linux takes
// any positive count (and uses at most one channel per CPU); gosrp's
// initiator logs in at most 255.
const maxChCount = 255

// optKeys lists the keys in rendering order.
var optKeys = []optKey{
	{"id_ext", func(o *TargetOptions, v string) (err error) { o.IDExt, err = parseHex64(v); return },
		func(o *TargetOptions, _ bool) string { return fmt.Sprintf("%016x", o.IDExt) }},
	{"ioc_guid", func(o *TargetOptions, v string) (err error) { o.IOCGUID, err = parseHex64(v); return },
		func(o *TargetOptions, _ bool) string { return fmt.Sprintf("%016x", o.IOCGUID) }},
	{"dgid", func(o *TargetOptions, v string) error {
		if len(v) != 32 {
			return fmt.Errorf("want 32 hex digits, got %d characters", len(v))
		}
		_, err := hex.Decode(o.DGID[:], []byte(v))
		if err != nil {
			return fmt.Errorf("not hex")
		}
		return nil
	}, func(o *TargetOptions, g bool) string {
		if g || o.DGID != [16]byte{} || o.ibPath() {
			return hex.EncodeToString(o.DGID[:])
		}
		return ""
	}},
	{"pkey", func(o *TargetOptions, v string) error {
		n, err := parseLinuxHexInt(v)
		if errors.Is(err, errIntRange) || err == nil && (n < 0 || n > 0xffff) {
			return fmt.Errorf("%s is outside 0..ffff", v)
		}
		if err != nil {
			return err
		}
		o.PKey = uint16(n)
		return nil
	}, func(o *TargetOptions, g bool) string {
		if g || o.PKey != 0 || o.ibPath() {
			return fmt.Sprintf("%04x", o.PKey)
		}
		return ""
	}},
	{"service_id", func(o *TargetOptions, v string) (err error) { o.ServiceID, err = parseHex64(v); return },
		func(o *TargetOptions, g bool) string {
			if g || o.ServiceID != 0 || o.ibPath() {
				return fmt.Sprintf("%016x", o.ServiceID)
			}
			return ""
		}},
	{"dest", func(o *TargetOptions, v string) error {
		ap, hasPort, err := parseAddrPort(v)
		if err != nil {
			return err
		}
		if !hasPort {
			return fmt.Errorf("missing :port")
		}
		o.Dest = ap
		return nil
	}, func(o *TargetOptions, g bool) string {
		if o.Dest.Addr().IsValid() {
			return o.Dest.String()
		}
		return ""
	}},
	{"src", func(o *TargetOptions, v string) (err error) { o.Src, _, err = parseAddrPort(v); return },
		func(o *TargetOptions, g bool) string {
			if !o.Src.Addr().IsValid() {
				return ""
			}
			if o.Src.Port() == 0 {
				return bracket(o.Src.Addr())
			}
			return o.Src.String()
		}},
	{"max_sect", intParser(func(o *TargetOptions) *int { return &o.MaxSect }, true, 1, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.MaxSect })},
	{"max_cmd_per_lun", intParser(func(o *TargetOptions) *int { return &o.MaxCmdPerLUN }, true, 1, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.MaxCmdPerLUN })},
	{"target_can_queue", intParser(func(o *TargetOptions) *int { return &o.TargetCanQueue }, true, 1, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.TargetCanQueue })},
	{"io_class", func(o *TargetOptions, v string) error {
		n, err := parseLinuxHexInt(v)
		if errors.Is(err, errIntRange) || err == nil && n != IOClassSRPRev10 && n != IOClassSRPRev16A {
			return fmt.Errorf("%s is neither ff00 (SRP r10) nor 100 (SRP r16a)", v)
		}
		if err != nil {
			return err
		}
		o.IOClass = uint16(n)
		return nil
	}, func(o *TargetOptions, g bool) string {
		if g || o.IOClass != 0 {
			return fmt.Sprintf("%04x", o.IOClass)
		}
		return ""
	}},
	{"initiator_ext", func(o *TargetOptions, v string) (err error) { o.InitiatorExt, err = parseHex64(v); return },
		func(o *TargetOptions, g bool) string {
			if g || o.InitiatorExt != 0 {
				return fmt.Sprintf("%016x", o.InitiatorExt)
			}
			return ""
		}},
	{"cmd_sg_entries", intParser(func(o *TargetOptions) *int { return &o.CmdSGEntries }, false, 1, 255),
		intFormatter(func(o *TargetOptions) int { return o.CmdSGEntries })},
	{"allow_ext_sg", func(o *TargetOptions, v string) error {
		n, err := parseIntIn(v, false, 0, 1<<31-1)
		if err != nil {
			return err
		}
		o.AllowExtSG = n != 0
		return nil
	}, func(o *TargetOptions, g bool) string {
		if g || o.AllowExtSG {
			if o.AllowExtSG {
				return "1"
			}
			return "0"
		}
		return ""
	}},
	{"sg_tablesize", intParser(func(o *TargetOptions) *int { return &o.SGTablesize }, false, 1, maxSGTablesize),
		intFormatter(func(o *TargetOptions) int { return o.SGTablesize })},
	{"comp_vector", intParser(func(o *TargetOptions) *int { return &o.CompVector }, false, 0, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.CompVector })},
	{"tl_retry_count", intParser(func(o *TargetOptions) *int { return &o.TLRetryCount }, false, 2, 7),
		intFormatter(func(o *TargetOptions) int { return o.TLRetryCount })},
	{"queue_size", intParser(func(o *TargetOptions) *int { return &o.QueueSize }, true, 1, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.QueueSize })},
	{"max_it_iu_size", intParser(func(o *TargetOptions) *int { return &o.MaxITIUSize }, true, 0, 1<<31-1),
		intFormatter(func(o *TargetOptions) int { return o.MaxITIUSize })},
	{"ch_count", intParser(func(o *TargetOptions) *int { return &o.ChCount }, false, 1, maxChCount),
		intFormatter(func(o *TargetOptions) int { return o.ChCount })},
	{"transport", func(o *TargetOptions, v string) error {
		if v != "iwarp" && v != "verbs" {
			return fmt.Errorf("%q is neither iwarp nor verbs", v)
		}
		o.Transport = v
		return nil
	}, func(o *TargetOptions, _ bool) string { return o.Transport }},
}

// IO class values of the IOControllerProfile and the io_class option
// (include/scsi/srp.h).
const (
	IOClassSRPRev10  = 0xff00 // SRP_REV10_IB_IO_CLASS
	IOClassSRPRev16A = 0x0100 // SRP_REV16A_IB_IO_CLASS
)

// ibPath reports whether o selects the IB CM path: no dest, and some IB CM
// field set. String then renders all three IB CM keys, which Linux needs.
func (o *TargetOptions) ibPath() bool {
	return !o.Dest.IsValid() && (o.DGID != [16]byte{} || o.ServiceID != 0 || o.PKey != 0)
}

func intParser(field func(*TargetOptions) *int, signed bool, lo, hi int64) func(*TargetOptions, string) error {
	return func(o *TargetOptions, v string) error {
		n, err := parseIntIn(v, signed, lo, hi)
		if err != nil {
			return err
		}
		*field(o) = int(n)
		return nil
	}
}

// parseIntIn parses a "%d" (signed) or "%u" token's value with
// parseLinuxInt and checks it is within lo..hi. Any number outside,
// negative ones and ones past the C int range included, is reported as
// outside lo..hi; only text that is no number is called so.
func parseIntIn(v string, signed bool, lo, hi int64) (int64, error) {
	n, err := parseLinuxInt(v, signed)
	if errors.Is(err, errIntRange) || err == nil && (n < lo || n > hi) {
		return 0, fmt.Errorf("%s is outside %d..%d", v, lo, hi)
	}
	return n, err
}

func intFormatter(field func(*TargetOptions) int) func(*TargetOptions, bool) string {
	return func(o *TargetOptions, g bool) string {
		if g || field(o) != 0 {
			return strconv.Itoa(field(o))
		}
		return ""
	}
}

// parseHex64 parses like the kernel's kstrtoull(s, 16): hex digits with an
// optional 0x prefix, at most 64 bits. A negative number or one of more
// than 64 bits is reported as outside 0..ffffffffffffffff.
func parseHex64(s string) (uint64, error) {
	n, err := parseHex(s, 64)
	if err != nil {
		return 0, err
	}
	if n.neg || n.over {
		return 0, fmt.Errorf("%s is outside 0..ffffffffffffffff", s)
	}
	return n.v, nil
}

// parseLinuxHexInt parses the value of a "%x" token (match_hex): hex
// digits with an optional 0x prefix, within int range. A leading minus is
// taken (the number is negative: outside every hex key's range, which
// the caller reports); a number past the int range is errIntRange.
func parseLinuxHexInt(s string) (int64, error) {
	n, err := parseHex(s, 31)
	if err != nil {
		return 0, err
	}
	if n.over {
		return 0, fmt.Errorf("%q: %w", s, errIntRange)
	}
	if n.neg {
		return -int64(n.v), nil
	}
	return int64(n.v), nil
}

// hexNumber is a hex number as parseHex read it.
type hexNumber struct {
	v    uint64 // magnitude, when within bits
	neg  bool   // a leading minus
	over bool   // magnitude beyond bits
}

// parseHex reads an optionally negative hex number with an optional 0x
// prefix; over reports a magnitude of more than bits bits. Text that is no
// hex number is an error.
func parseHex(s string, bits int) (hexNumber, error) {
	var n hexNumber
	h := s
	if strings.HasPrefix(h, "-") {
		h, n.neg = h[1:], true
	}
	h = strings.TrimPrefix(strings.TrimPrefix(h, "0x"), "0X")
	if h == "" || strings.ContainsAny(h, "+-_") {
		return n, fmt.Errorf("%q is not a hex number", s)
	}
	v, err := strconv.ParseUint(h, 16, bits)
	switch {
	case errors.Is(err, strconv.ErrRange):
		n.over = true
	case err != nil:
		return n, fmt.Errorf("%q is not a hex number", s)
	case n.neg && v == 0:
		return n, fmt.Errorf("%q: a minus sign before 0", s)
	}
	n.v = v
	return n, nil
}

// errIntRange: a number outside the C int range of a "%d" or "%u" token.
var errIntRange = errors.New("out of int range")

// parseLinuxInt parses the value of a "%d" (signed) or "%u" token
// (match_int): C base-0 syntax (0x hex, leading 0 octal, else decimal),
// within int range; only %d accepts a leading minus. A number past the
// int range, or a negative one for %u (which Linux does not match at all),
// is errIntRange: the caller names the key's range.
func parseLinuxInt(s string, signed bool) (int64, error) {
	v, neg := s, false
	if strings.HasPrefix(v, "-") {
		v, neg = v[1:], true
	}
	base := 10
	switch {
	case strings.HasPrefix(v, "0x") || strings.HasPrefix(v, "0X"):
		v, base = v[2:], 16
	case len(v) > 1 && v[0] == '0':
		v, base = v[1:], 8
	}
	if v == "" || strings.ContainsAny(v, "+-_") {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, err := strconv.ParseUint(v, base, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%q: %w", s, errIntRange)
	case err != nil:
		return 0, fmt.Errorf("%q is not a number", s)
	case neg && !signed && n == 0:
		return 0, fmt.Errorf("%q: a minus sign before 0", s)
	case neg && !signed, neg && n > 1<<31, !neg && n > 1<<31-1:
		return 0, fmt.Errorf("%q: %w", s, errIntRange)
	case neg:
		return -int64(n), nil
	}
	return int64(n), nil
}

// parseAddrPort parses srp_parse_in's forms: IPv4 "a.b.c.d" or
// "a.b.c.d:port", IPv6 "[addr]" or "[addr]:port" (with an optional %zone).
// The port is a 16-bit number in C base-0 syntax.
func parseAddrPort(s string) (netip.AddrPort, bool, error) {
	host, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 && !strings.Contains(s[i:], "]") {
		host, port = s[:i], s[i+1:]
	}
	var a netip.Addr
	var err error
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err = netip.ParseAddr(host[1 : len(host)-1])
		if err == nil && !a.Is6() {
			err = fmt.Errorf("not IPv6")
		}
	} else {
		a, err = netip.ParseAddr(host)
		if err == nil && !a.Is4() {
			err = fmt.Errorf("IPv6 needs brackets: [addr]:port")
		}
	}
	if err != nil {
		return netip.AddrPort{}, false, fmt.Errorf("%q: bad address: %v", s, err)
	}
	if port == "" {
		if strings.HasSuffix(s, ":") {
			return netip.AddrPort{}, false, fmt.Errorf("%q: empty port", s)
		}
		return netip.AddrPortFrom(a, 0), false, nil
	}
	p, err := parseLinuxInt(port, false)
	if err != nil || p < 0 || p > 0xffff {
		return netip.AddrPort{}, false, fmt.Errorf("%q: bad port %q", s, port)
	}
	return netip.AddrPortFrom(a, uint16(p)), true, nil
}

func bracket(a netip.Addr) string {
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

func optError(key, format string, args ...any) error {
	return &DecodeError{IU: "add_target", Field: key, Offset: -1, Msg: fmt.Sprintf(format, args...)}
}

// ParseTargetOptions parses an add_target string with ib_srp's rules
// (srp_parse_options): options are separated by ',' or newlines, empty
// options are skipped; each is key=value with a non-empty value; hex keys
// (id_ext, ioc_guid, service_id, initiator_ext) take up to 64 bits with an
// optional 0x; pkey and io_class are hex; the other numbers use C syntax
// (0x hex, 0 octal, decimal). Ranges: cmd_sg_entries 1..255, sg_tablesize
// 1..2048, tl_retry_count 2..7, ch_count 1..255, queue_size,
// max_cmd_per_lun and target_can_queue >= 1, comp_vector and
// max_it_iu_size >= 0, all within the C int range, pkey 0..ffff, io_class
// 0xff00 or 0x0100; dgid is exactly 32 hex digits; dest is IPv4:port or
// [IPv6]:port (port required), src the same with the port optional.
// id_ext and ioc_guid are required, with either dgid, pkey and service_id,
// or dest. A number outside its key's range, a negative one included, is
// reported with the range ("ch_count: -1 is outside 1..255"); "not a
// number" is only said of text that is none.
//
// Stricter than Linux (which lets a later value win, truncates pkey, does
// not check max_sect and takes any positive ch_count): a repeated key, a
// pkey over 16 bits, a max_sect below 1 and a ch_count over 255 are
// errors. transport= (iwarp|verbs) is a gosrp extension.
//
// Errors are *DecodeError with IU "add_target" and Field the key.
func ParseTargetOptions(s string) (*TargetOptions, error) {
	o := new(TargetOptions)
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		key, val, ok := strings.Cut(tok, "=")
		if err := o.set(key, val, ok); err != nil {
			return nil, err
		}
	}
	if !o.Has("id_ext") {
		return nil, optError("id_ext", "missing (required)")
	}
	if !o.Has("ioc_guid") {
		return nil, optError("ioc_guid", "missing (required)")
	}
	if !o.Has("dest") {
		for _, k := range []string{"dgid", "pkey", "service_id"} {
			if !o.Has(k) {
				return nil, optError(k, "missing: give dgid, pkey and service_id (IB CM) or dest (RDMA/CM)")
			}
		}
	}
	return o, nil
}

// Set parses one key=value into o with the rules of ParseTargetOptions,
// replacing any earlier value of the key.
func (o *TargetOptions) Set(key, value string) error {
	for i, k := range optKeys {
		if k.name == key {
			o.given &^= 1 << i
		}
	}
	return o.set(key, value, true)
}

func (o *TargetOptions) set(key, val string, hasVal bool) error {
	for i, k := range optKeys {
		if k.name != key {
			continue
		}
		if !hasVal || val == "" {
			return optError(key, "missing value")
		}
		if o.given&(1<<i) != 0 {
			return optError(key, "given more than once")
		}
		if err := k.parse(o, val); err != nil {
			return optError(key, "%v", err)
		}
		o.given |= 1 << i
		return nil
	}
	if key == "" {
		return optError(key, "empty key")
	}
	return optError(key, "unknown key")
}

// Has reports whether key was given to ParseTargetOptions or Set.
func (o *TargetOptions) Has(key string) bool {
	for i, k := range optKeys {
		if k.name == key {
			return o.given&(1<<i) != 0
		}
	}
	return false
}

// String renders o as an add_target string: every key that was given or
// whose field is non-zero, in the order id_ext, ioc_guid, dgid, pkey,
// service_id, dest, src, then Linux's token order, transport last. 64-bit hex values
// are 16 digits, as srp_daemon prints them. ParseTargetOptions(o.String())
// yields o again.
func (o *TargetOptions) String() string {
	var sb strings.Builder
	for i, k := range optKeys {
		v := k.format(o, o.given&(1<<i) != 0)
		if v == "" {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(k.name)
		sb.WriteByte('=')
		sb.WriteString(v)
	}
	return sb.String()
}

// TargetPortID returns the target port ID ib_srp puts in its login request:
// id_ext || ioc_guid, or ioc_guid || id_ext when io_class is 0xff00 (SRP
// r10 order) (ib_srp srp_send_req).
func (o *TargetOptions) TargetPortID() PortID {
	if o.IOClass == IOClassSRPRev10 {
		return NewPortID(o.IOCGUID, o.IDExt)
	}
	return NewPortID(o.IDExt, o.IOCGUID)
}

// InitiatorPortID returns the initiator port ID ib_srp sends for this
// target: initiator_ext || interfaceID (the interface ID, i.e. the low 8
// bytes, of the local port's GID), swapped when io_class is 0xff00 (ib_srp
// srp_send_req). The Topspin/Cisco workaround of ib_srp is not applied.
func (o *TargetOptions) InitiatorPortID(interfaceID uint64) PortID {
	if o.IOClass == IOClassSRPRev10 {
		return NewPortID(interfaceID, o.InitiatorExt)
	}
	return NewPortID(o.InitiatorExt, interfaceID)
}
