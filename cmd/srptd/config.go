package main

import (
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gosrp/gosrp/srp/target"
)

//go:embed default.toml
var defaultConfig string

// Config is the srptd configuration file (TOML). See docs/srptd.md.
type Config struct {
	Target TargetSection `toml:"target"`
	Ports  []PortSection `toml:"port"`
	LUNs   []LUNSection  `toml:"lun"`
	ACLs   []ACLSection  `toml:"acl"`
	Admin  AdminSection  `toml:"admin"`
}

// TargetSection holds the tunables shared by every port.
type TargetSection struct {
	MaxReqSize      Size     `toml:"max_req_size"`     // bytes, LOGIN_RSP max_it_iu_len
	MaxRspSize      Size     `toml:"max_rsp_size"`     // bytes, largest IU sent
	SQSize          int      `toml:"sq_size"`          // send queue, work requests
	RQSize          int      `toml:"rq_size"`          // receive ring, IUs (initial credit)
	MaxRDMASize     Size     `toml:"max_rdma_size"`    // bytes per RDMA READ/WRITE
	MaxDataLen      Size     `toml:"max_data_len"`     // bytes per command
	MaxChannels     int      `toml:"max_channels"`     // per I_T nexus
	DemoMode        *bool    `toml:"demo_mode"`        // admit every initiator
	Multichannel    *bool    `toml:"multichannel"`     // accept MULTI logins
	ImmediateData   *bool    `toml:"immediate_data"`   // accept SRP-2 immediate data
	ShutdownTimeout Duration `toml:"shutdown_timeout"` // graceful shutdown bound
}

// PortSection is one SRP target port.
type PortSection struct {
	Name        string   `toml:"name"`
	Transport   string   `toml:"transport"`    // "iwarp" or "verbs"
	Listen      []string `toml:"listen"`       // host:port addresses
	ServiceGUID string   `toml:"service_guid"` // 16 hex digits (id_ext = ioc_guid)
	Device      string   `toml:"device"`       // verbs device name
	DevicePort  int      `toml:"device_port"`  // verbs port, 1-based
	BusyPoll    bool     `toml:"busy_poll"`    // verbs: spin on the CQ instead of sleeping
	MPACRC      bool     `toml:"mpa_crc"`      // iWARP: ask for the MPA CRC32c
	// CompletionFences (iWARP) completes SEND and RDMA WRITE work only once
	// the peer proved it placed it (zero-length Read fences); off by
	// default: completion at transmit, as Linux siw.
	CompletionFences bool `toml:"completion_fences"`
}

// LUNSection is one logical unit.
type LUNSection struct {
	LUN        *uint64 `toml:"lun"`        // LUN number 0..16383
	Name       string  `toml:"name"`       // for logs and ACLs
	Backstore  string  `toml:"backstore"`  // "ram", "file" or "block"
	Path       string  `toml:"path"`       // file or block device
	Size       Size    `toml:"size"`       // bytes; ram: required; file: creates/extends
	BlockSize  int     `toml:"block_size"` // 512, 1024, 2048, 4096
	ReadOnly   bool    `toml:"read_only"`
	WriteCache bool    `toml:"write_cache"`
	Serial     string  `toml:"serial"`
	WWN        string  `toml:"wwn"` // NAA 6 designator, 32 hex digits
}

// ACLSection admits one initiator.
type ACLSection struct {
	Initiator string            `toml:"initiator"` // GUID, port ID hex or IP
	LUNs      map[string]uint64 `toml:"luns"`      // initiator LUN → target LUN
}

// AdminSection configures the admin API.
type AdminSection struct {
	Socket string `toml:"socket"` // unix socket path; empty: no admin API
}

// Size is a byte count written as an integer or a string with a unit:
// "8276", "64KiB", "1GiB", "1M" (powers of 1024).
type Size int64

// UnmarshalTOML implements toml.Unmarshaler.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("negative size %d", x)
		}
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		*s = Size(n)
		return err
	}
	return fmt.Errorf("size must be an integer (bytes) or a string like \"64KiB\", got %T", v)
}

// ParseSize parses "4096", "64K", "64KiB", "1GiB", "1.5MiB" into bytes.
func ParseSize(str string) (int64, error) {
	t := strings.TrimSpace(str)
	units := []struct {
		suf string
		mul int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}
	mul := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suf) {
			t, mul = strings.TrimSpace(strings.TrimSuffix(t, u.suf)), u.mul
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mul) > 1<<62 {
		return 0, fmt.Errorf("bad size %q (want bytes or a number with KiB, MiB, GiB, TiB)", str)
	}
	return int64(f * float64(mul)), nil
}

// Duration is a time.Duration written as "10s", "1m30s".
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. \"10s\")", b)
	}
	*d = Duration(v)
	return nil
}

// LoadConfig parses a TOML configuration. Unknown keys are errors naming
// the key; then the configuration is validated (Validate).
func LoadConfig(text, source string) (*Config, error) {
	var c Config
	md, err := toml.Decode(text, &c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %s", source, pe.ErrorWithPosition())
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%s: unknown key %s", source, strings.Join(keys, ", "))
	}
	return &c, nil
}

// Validate checks the configuration; errors name the field, e.g.
// "lun[1].size: ...".
func (c *Config) Validate() error {
	if len(c.Ports) == 0 {
		return errors.New("port: at least one [[port]] is required")
	}
	names := map[string]bool{}
	for i, p := range c.Ports {
		f := fmt.Sprintf("port[%d]", i)
		switch p.Transport {
		case "", "iwarp", "verbs":
		default:
			return fmt.Errorf("%s.transport: %q is not iwarp or verbs", f, p.Transport)
		}
		if len(p.Listen) == 0 && p.Transport != "verbs" {
			return fmt.Errorf("%s.listen: at least one host:port is required", f)
		}
		for _, a := range p.Listen {
			if _, _, err := splitHostPort(a); err != nil {
				return fmt.Errorf("%s.listen: %v", f, err)
			}
		}
		if p.ServiceGUID != "" {
			if _, err := parseGUID(p.ServiceGUID); err != nil {
				return fmt.Errorf("%s.service_guid: %v", f, err)
			}
		}
		if p.DevicePort < 0 {
			return fmt.Errorf("%s.device_port: %d must be 1 or more", f, p.DevicePort)
		}
		if p.Name != "" && names[p.Name] {
			return fmt.Errorf("%s.name: %q used twice", f, p.Name)
		}
		names[p.Name] = true
	}
	luns := map[uint64]bool{}
	for i, l := range c.LUNs {
		f := fmt.Sprintf("lun[%d]", i)
		if l.LUN == nil {
			return fmt.Errorf("%s.lun: LUN number required", f)
		}
		if *l.LUN > 16383 {
			return fmt.Errorf("%s.lun: %d out of range 0..16383", f, *l.LUN)
		}
		if luns[*l.LUN] {
			return fmt.Errorf("%s.lun: LUN %d used twice", f, *l.LUN)
		}
		luns[*l.LUN] = true
		switch l.Backstore {
		case "ram":
			if l.Size <= 0 {
				return fmt.Errorf("%s.size: a ram backstore needs a size", f)
			}
			if l.Path != "" {
				return fmt.Errorf("%s.path: a ram backstore has no path", f)
			}
		case "file", "block":
			if l.Path == "" {
				return fmt.Errorf("%s.path: a %s backstore needs a path", f, l.Backstore)
			}
			if l.Backstore == "block" && l.Size != 0 {
				return fmt.Errorf("%s.size: a block device is sized by the device", f)
			}
		case "":
			return fmt.Errorf("%s.backstore: required (ram, file or block)", f)
		default:
			return fmt.Errorf("%s.backstore: %q is not ram, file or block", f, l.Backstore)
		}
		switch l.BlockSize {
		case 0, 512, 1024, 2048, 4096:
		default:
			return fmt.Errorf("%s.block_size: %d is not 512, 1024, 2048 or 4096", f, l.BlockSize)
		}
		if l.Size > 0 && l.BlockSize > 0 && int64(l.Size)%int64(l.BlockSize) != 0 {
			return fmt.Errorf("%s.size: %d bytes is not a multiple of block_size %d", f, l.Size, l.BlockSize)
		}
		if l.WWN != "" {
			if _, err := parseWWN(l.WWN); err != nil {
				return fmt.Errorf("%s.wwn: %v", f, err)
			}
		}
		if len(l.Serial) > 64 {
			return fmt.Errorf("%s.serial: longer than 64 bytes", f)
		}
	}
	for i, a := range c.ACLs {
		f := fmt.Sprintf("acl[%d]", i)
		if _, err := target.ParseInitiator(a.Initiator); err != nil {
			return fmt.Errorf("%s.initiator: %v", f, err)
		}
		for k, v := range a.LUNs {
			n, err := strconv.ParseUint(k, 10, 64)
			if err != nil || n > 16383 {
				return fmt.Errorf("%s.luns: key %q is not a LUN number 0..16383", f, k)
			}
			if !luns[v] {
				return fmt.Errorf("%s.luns.%s: target LUN %d is not configured", f, k, v)
			}
		}
	}
	if err := c.targetConfig(0).Validate(); err != nil {
		return fmt.Errorf("target.%v", err)
	}
	return nil
}

// targetConfig builds the SRP target port configuration (without the
// service GUID, name and logger).
func (c *Config) targetConfig(guid uint64) target.Config {
	t := c.Target
	tc := target.Config{
		ServiceGUID:     guid,
		MaxReqSize:      int(t.MaxReqSize),
		MaxRspSize:      int(t.MaxRspSize),
		SQSize:          t.SQSize,
		RQSize:          t.RQSize,
		MaxRDMASize:     int(t.MaxRDMASize),
		MaxDataLen:      int(t.MaxDataLen),
		MaxChannels:     t.MaxChannels,
		DemoMode:        t.DemoMode != nil && *t.DemoMode,
		NoMultichannel:  t.Multichannel != nil && !*t.Multichannel,
		NoImmediateData: t.ImmediateData != nil && !*t.ImmediateData,
	}
	for _, a := range c.ACLs {
		m, err := target.ParseInitiator(a.Initiator)
		if err != nil {
			continue
		}
		acl := target.ACL{Initiator: m}
		if len(a.LUNs) > 0 {
			acl.LUNs = map[uint64]uint64{}
			keys := make([]string, 0, len(a.LUNs))
			for k := range a.LUNs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				n, _ := strconv.ParseUint(k, 10, 64)
				acl.LUNs[n] = a.LUNs[k]
			}
		}
		tc.ACLs = append(tc.ACLs, acl)
	}
	return tc
}

func parseGUID(s string) (uint64, error) {
	t := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "0x"), ":", "")
	if len(t) != 16 {
		return 0, fmt.Errorf("%q: want 16 hex digits (optionally xxxx:xxxx:xxxx:xxxx)", s)
	}
	return strconv.ParseUint(t, 16, 64)
}

func parseWWN(s string) ([16]byte, error) {
	var w [16]byte
	t := strings.TrimPrefix(strings.ToLower(strings.ReplaceAll(s, ":", "")), "0x")
	b, err := hex.DecodeString(t)
	if err != nil || len(b) != 16 || b[0]>>4 != 6 {
		return w, fmt.Errorf("%q: want an NAA 6 designator of 32 hex digits starting with 6", s)
	}
	copy(w[:], b)
	return w, nil
}

// readConfig returns the configuration from path, or the embedded default
// when path is empty.
func readConfig(path string) (*Config, error) {
	if path == "" {
		return LoadConfig(defaultConfig, "embedded default config")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadConfig(string(b), path)
}
