package main

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/target"
)

//go:embed default.toml
var defaultConfig string

// Config is the srptd configuration file (TOML). See docs/srptd.md.
type Config struct {
	Target  TargetSection  `toml:"target,omitempty"`
	Ports   []PortSection  `toml:"port,omitempty"`
	LUNs    []LUNSection   `toml:"lun,omitempty"`
	ACLs    []ACLSection   `toml:"acl,omitempty"`
	Admin   AdminSection   `toml:"admin,omitempty"`
	Metrics MetricsSection `toml:"metrics,omitempty"`
	ALUA    *ALUASection   `toml:"alua,omitempty"`

	// src locates keys in the file the configuration came from, for errors.
	src *source
	// flagged names the keys a command-line flag set: field → flag.
	flagged map[string]string
}

// TargetSection holds the tunables shared by every port.
type TargetSection struct {
	MaxReqSize       Size     `toml:"max_req_size,omitzero" json:"max_req_size,omitempty"`             // bytes, LOGIN_RSP max_it_iu_len
	MaxRspSize       Size     `toml:"max_rsp_size,omitzero" json:"max_rsp_size,omitempty"`             // bytes, largest IU sent
	SQSize           int      `toml:"sq_size,omitzero" json:"sq_size,omitempty"`                       // send queue, work requests
	RQSize           int      `toml:"rq_size,omitzero" json:"rq_size,omitempty"`                       // receive ring, IUs (initial credit)
	MaxRDMASize      Size     `toml:"max_rdma_size,omitzero" json:"max_rdma_size,omitempty"`           // bytes per RDMA READ/WRITE
	MaxDataLen       Size     `toml:"max_data_len,omitzero" json:"max_data_len,omitempty"`             // bytes per command
	MaxDataMemory    Size     `toml:"max_data_memory,omitzero" json:"max_data_memory,omitempty"`       // bytes of command data buffers per port
	MaxChannels      int      `toml:"max_channels,omitzero" json:"max_channels,omitempty"`             // per I_T nexus
	MaxTotalChannels int      `toml:"max_total_channels,omitzero" json:"max_total_channels,omitempty"` // per port, all nexuses
	UseSRQ           bool     `toml:"use_srq,omitempty" json:"use_srq,omitempty"`                      // one shared receive queue per port
	SRQSize          int      `toml:"srq_size,omitzero" json:"srq_size,omitempty"`                     // shared receive queue, IUs
	DemoMode         *bool    `toml:"demo_mode" json:"demo_mode,omitempty"`                            // admit every initiator
	Multichannel     *bool    `toml:"multichannel" json:"multichannel,omitempty"`                      // accept MULTI logins
	ImmediateData    *bool    `toml:"immediate_data" json:"immediate_data,omitempty"`                  // accept SRP-2 immediate data
	ShutdownTimeout  Duration `toml:"shutdown_timeout,omitzero" json:"shutdown_timeout,omitempty"`     // graceful shutdown bound
	DataDir          string   `toml:"data_dir,omitempty" json:"data_dir,omitempty"`                    // identity, default LUN, admin socket
}

// PortSection is one SRP target port.
type PortSection struct {
	Name        string   `toml:"name,omitempty"`
	Transport   string   `toml:"transport,omitempty"`    // "iwarp" or "verbs"
	Listen      []string `toml:"listen,omitempty"`       // host:port addresses
	ServiceGUID string   `toml:"service_guid,omitempty"` // 16 hex digits (id_ext = ioc_guid)
	Device      string   `toml:"device,omitempty"`       // verbs device name
	DevicePort  int      `toml:"device_port,omitzero"`   // verbs port, 1-based
	BusyPoll    bool     `toml:"busy_poll,omitempty"`    // verbs: spin on the CQ instead of sleeping
	MPACRC      bool     `toml:"mpa_crc,omitempty"`      // iWARP: ask for the MPA CRC32c
	// CompletionFences (iWARP) completes SEND and RDMA WRITE work only once
	// the peer proved it placed it (zero-length Read fences); off by
	// default: completion at transmit, as Linux siw.
	CompletionFences bool `toml:"completion_fences,omitempty"`
}

// LUNSection is one logical unit and the backstore behind it.
type LUNSection struct {
	LUN        *uint64 `toml:"lun" json:"lun"`                                     // LUN number 0..16383
	Name       string  `toml:"name,omitempty" json:"name,omitempty"`               // for logs and metrics
	Backstore  string  `toml:"backstore" json:"backstore"`                         // "ram", "file", "block" or "rbd"
	Path       string  `toml:"path,omitempty" json:"path,omitempty"`               // file or block device
	Size       Size    `toml:"size,omitzero" json:"size,omitempty"`                // bytes; ram: required; file: creates/extends
	BlockSize  int     `toml:"block_size,omitzero" json:"block_size,omitempty"`    // 512, 1024, 2048, 4096
	ReadOnly   bool    `toml:"read_only,omitempty" json:"read_only,omitempty"`     // DATA PROTECT on writes
	WriteCache bool    `toml:"write_cache,omitempty" json:"write_cache,omitempty"` // initial WCE
	// ThinProvisioning advertises logical block provisioning (LBPME; UNMAP,
	// WRITE SAME with UNMAP, GET LBA STATUS deallocate and report holes).
	// Unset: on when the backstore can deallocate (ram, file, a block
	// device with discard or write zeroes).
	ThinProvisioning *bool  `toml:"thin_provisioning" json:"thin_provisioning,omitempty"`
	Serial           string `toml:"serial,omitempty" json:"serial,omitempty"` // VPD 80h
	WWN              string `toml:"wwn,omitempty" json:"wwn,omitempty"`       // NAA 6 designator, 32 hex digits
	// Ceph RBD (backstore = "rbd", srptd built with -tags ceph,pacific):
	// the image pool/image, created with size bytes when missing and size
	// is set. Every gateway exporting the image presents the same LU
	// identity (serial and NAA derived from the cluster and image).
	Pool        string `toml:"pool,omitempty" json:"pool,omitempty"`
	Image       string `toml:"image,omitempty" json:"image,omitempty"`
	CephConf    string `toml:"ceph_conf,omitempty" json:"ceph_conf,omitempty"`       // ceph.conf path; default: librados' search
	CephClient  string `toml:"ceph_client,omitempty" json:"ceph_client,omitempty"`   // cephx user without "client."; default admin
	CephKeyring string `toml:"ceph_keyring,omitempty" json:"ceph_keyring,omitempty"` // keyring file; default: the conf's
}

// ALUASection makes this srptd one gateway of several exporting the same
// logical units (Ceph RBD images, or file or device images on one host,
// which gateways lock shared): its ports form one target port group with
// an asymmetric access state, and REPORT TARGET PORT GROUPS also lists the
// other gateways' groups (SPC-4 §5.11). Without it: group 0,
// active/optimized, relative ports from 1.
type ALUASection struct {
	Group        uint16 `toml:"group" json:"group"`                   // this gateway's target port group ID
	RelativePort uint16 `toml:"relative_port" json:"relative_port"`   // relative target port ID of the first [[port]] (next ports +1); default 1
	State        string `toml:"state,omitempty" json:"state"`         // active/optimized (default), active/non-optimized, standby, unavailable, transitioning
	Preferred    *bool  `toml:"preferred" json:"preferred,omitempty"` // PREF bit; default true
	// Peers are the other gateways' groups, as REPORT TARGET PORT GROUPS
	// reports them.
	Peers []ALUAPeer `toml:"peer,omitempty" json:"peers,omitempty"`
}

// ALUAPeer is another gateway's target port group.
type ALUAPeer struct {
	Group     uint16   `toml:"group" json:"group"`
	State     string   `toml:"state,omitempty" json:"state"` // default active/optimized
	Preferred bool     `toml:"preferred,omitempty" json:"preferred,omitempty"`
	Ports     []uint16 `toml:"ports" json:"ports"` // its relative target port IDs
}

// portGroups returns the target port groups a gateway reports; nil without
// an [alua] section.
func (a *ALUASection) portGroups() ([]scsi.PortGroup, error) {
	if a == nil {
		return nil, nil
	}
	parse := func(s string) (scsi.ALUAState, error) {
		if s == "" {
			return scsi.ALUAActiveOptimized, nil
		}
		return scsi.ParseALUAState(s)
	}
	st, err := parse(a.State)
	if err != nil {
		return nil, ferr("alua.state", "%v", err)
	}
	pref := a.Preferred == nil || *a.Preferred
	groups := []scsi.PortGroup{{ID: a.Group, State: st, Preferred: pref}}
	seen := map[uint16]bool{a.Group: true}
	for i, p := range a.Peers {
		f := fmt.Sprintf("alua.peer[%d]", i)
		if seen[p.Group] {
			return nil, ferr(f+".group", "group %d listed twice", p.Group)
		}
		seen[p.Group] = true
		pst, err := parse(p.State)
		if err != nil {
			return nil, ferr(f+".state", "%v", err)
		}
		if len(p.Ports) == 0 {
			return nil, ferr(f+".ports", "a peer group needs its relative port IDs")
		}
		groups = append(groups, scsi.PortGroup{ID: p.Group, State: pst, Preferred: p.Preferred, Ports: p.Ports})
	}
	return groups, nil
}

// relativePort is the relative target port ID of the i-th [[port]].
func (a *ALUASection) relativePort(i int) uint16 {
	base := uint16(1)
	if a != nil && a.RelativePort != 0 {
		base = a.RelativePort
	}
	return base + uint16(i)
}

// ACLSection admits one initiator.
type ACLSection struct {
	Initiator string            `toml:"initiator" json:"initiator"`                     // GUID, port ID hex or IP
	LUNs      map[string]uint64 `toml:"luns,omitempty" json:"luns,omitempty"`           // initiator LUN → target LUN
	ReadOnly  []uint64          `toml:"read_only,omitempty" json:"read_only,omitempty"` // initiator LUNs write-protected
}

// AdminSection configures the admin API.
type AdminSection struct {
	// Socket is the unix socket path; empty: DATA_DIR/srptd.sock when there
	// is a data directory, else no admin API.
	Socket string `toml:"socket,omitempty"`
}

// MetricsSection configures the Prometheus listener.
type MetricsSection struct {
	Listen string `toml:"listen,omitempty"` // host:port serving /metrics; empty: none
}

// Size is a byte count written as an integer or a string with a binary
// unit: "8276", "64KiB", "1GiB", "1m", "1.5g" (adminapi.ParseSize: powers
// of 1024).
type Size int64

// UnmarshalTOML implements toml.Unmarshaler.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("negative size %d", x)
		}
		if x > maxSize {
			return fmt.Errorf("size %d is more than 4 EiB", x)
		}
		*s = Size(x)
		return nil
	case string:
		n, err := adminapi.ParseSize(x)
		*s = Size(n)
		return err
	}
	return fmt.Errorf("size must be an integer (bytes) or a string like \"64KiB\", got %T", v)
}

// UnmarshalJSON accepts the same forms as UnmarshalTOML.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		str, err := strconv.Unquote(string(b))
		if err != nil {
			return err
		}
		return s.UnmarshalTOML(str)
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("bad size %s", b)
	}
	return s.UnmarshalTOML(n)
}

// MarshalTOML writes the size with the largest binary unit that divides
// it ("1GiB"), else as an integer (bytes); UnmarshalTOML reads both.
func (s Size) MarshalTOML() ([]byte, error) {
	n := int64(s)
	for _, u := range []struct {
		suf string
		mul int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mul && n%u.mul == 0 {
			return []byte(`"` + strconv.FormatInt(n/u.mul, 10) + u.suf + `"`), nil
		}
	}
	return []byte(strconv.FormatInt(n, 10)), nil
}

// maxSize is the largest size accepted anywhere, in bytes (4 EiB): sums
// and roundings of sizes stay within an int64.
const maxSize = adminapi.MaxSize

// maxRAMSize is the largest RAM backstore, in bytes. Its chunk table is
// allocated up front (10 bytes per 64 KiB, 640 MiB for 4 TiB) even though
// the data is sparse; 4 TiB still allows LUNs beyond the 2 TiB READ
// CAPACITY(10) limit.
const maxRAMSize = 4 << 40

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

// MarshalText implements encoding.TextMarshaler ("10s").
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// rawConfig is the first decoding pass: tables as Primitives, so each
// element of an array of tables decodes on its own and an error knows its
// index.
type rawConfig struct {
	Target  toml.Primitive   `toml:"target"`
	Ports   []toml.Primitive `toml:"port"`
	LUNs    []toml.Primitive `toml:"lun"`
	ACLs    []toml.Primitive `toml:"acl"`
	Admin   toml.Primitive   `toml:"admin"`
	Metrics toml.Primitive   `toml:"metrics"`
	ALUA    *toml.Primitive  `toml:"alua"`
}

// lineKeyRE matches the "line N (last key ...)" prefix of the TOML
// decoder's type errors.
var lineKeyRE = regexp.MustCompile(`^toml: (?:line \d+ )?\(last key "([^"]*)"\): `)

// LoadConfig parses a TOML configuration. Errors name the source, the line
// and the key ("srptd.toml:12: lun[1].size: ..."); unknown keys are errors.
// The result is not yet validated (Validate).
func LoadConfig(text, source string) (*Config, error) {
	src := scanSource(text, source)
	var raw rawConfig
	md, err := toml.Decode(text, &raw)
	if err != nil {
		return nil, src.decodeError(err, "")
	}
	c := &Config{src: src}
	decode := func(p toml.Primitive, field string, v any) error {
		if err := md.PrimitiveDecode(p, v); err != nil {
			return src.decodeError(err, field)
		}
		return nil
	}
	if err := decode(raw.Target, "target", &c.Target); err != nil {
		return nil, err
	}
	c.Ports = make([]PortSection, len(raw.Ports))
	for i, p := range raw.Ports {
		if err := decode(p, fmt.Sprintf("port[%d]", i), &c.Ports[i]); err != nil {
			return nil, err
		}
	}
	c.LUNs = make([]LUNSection, len(raw.LUNs))
	for i, p := range raw.LUNs {
		if err := decode(p, fmt.Sprintf("lun[%d]", i), &c.LUNs[i]); err != nil {
			return nil, err
		}
	}
	c.ACLs = make([]ACLSection, len(raw.ACLs))
	for i, p := range raw.ACLs {
		if err := decode(p, fmt.Sprintf("acl[%d]", i), &c.ACLs[i]); err != nil {
			return nil, err
		}
	}
	if err := decode(raw.Admin, "admin", &c.Admin); err != nil {
		return nil, err
	}
	if err := decode(raw.Metrics, "metrics", &c.Metrics); err != nil {
		return nil, err
	}
	if raw.ALUA != nil {
		c.ALUA = &ALUASection{}
		if err := decode(*raw.ALUA, "alua", c.ALUA); err != nil {
			return nil, err
		}
	}
	if und := md.Undecoded(); len(und) > 0 {
		// The first unknown key, located by its indexed name.
		k := und[0].String()
		field := src.firstIndexed(k)
		return nil, src.errorAt(field, "unknown key")
	}
	return c, nil
}

// fieldError is a configuration error about one key, e.g. "lun[1].size".
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string { return e.Field + ": " + e.Msg }

func ferr(field, format string, args ...any) error {
	return &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// explain adds the file and line (or the flag) to a fieldError from
// Validate.
func (c *Config) explain(err error) error {
	var fe *fieldError
	if !errors.As(err, &fe) {
		return err
	}
	for f, flag := range c.flagged {
		if fe.Field == f || strings.HasPrefix(fe.Field, f+".") {
			return fmt.Errorf("%s: %s", flag, fe.Msg)
		}
	}
	if c.src == nil {
		return err
	}
	return c.src.errorAt(fe.Field, fe.Msg)
}

// Validate checks the configuration. The error names the file, the line
// and the key, e.g. "srptd.toml:12: lun[1].block_size: 3000 is not 512,
// 1024, 2048 or 4096".
func (c *Config) Validate() error { return c.explain(c.validate()) }

func (c *Config) validate() error {
	if len(c.Ports) == 0 {
		return ferr("port", "at least one [[port]] is required (or --listen HOST:PORT)")
	}
	names := map[string]bool{}
	for i, p := range c.Ports {
		f := fmt.Sprintf("port[%d]", i)
		switch p.Transport {
		case "", "iwarp", "verbs":
		default:
			return ferr(f+".transport", "%q is not iwarp or verbs", p.Transport)
		}
		if len(p.Listen) == 0 && p.Transport != "verbs" {
			return ferr(f+".listen", "at least one host:port is required")
		}
		for _, a := range p.Listen {
			if _, _, err := splitHostPort(a); err != nil {
				return ferr(f+".listen", "%v", err)
			}
		}
		if p.ServiceGUID != "" {
			if _, err := parseGUID(p.ServiceGUID); err != nil {
				return ferr(f+".service_guid", "%v", err)
			}
		}
		if p.DevicePort < 0 {
			return ferr(f+".device_port", "%d must be 1 or more", p.DevicePort)
		}
		if err := checkName(p.Name); err != nil {
			return ferr(f+".name", "%v", err)
		}
		if names[portName(p, i)] {
			return ferr(f+".name", "%q used twice", portName(p, i))
		}
		names[portName(p, i)] = true
	}
	if _, err := c.ALUA.portGroups(); err != nil {
		return err
	}
	if c.ALUA != nil && int(c.ALUA.relativePort(0))+len(c.Ports)-1 > 0xFFFF {
		return ferr("alua.relative_port", "%d ports from %d pass 65535", len(c.Ports), c.ALUA.relativePort(0))
	}
	luns := map[uint64]bool{}
	naas, serials := map[[16]byte]int{}, map[string]int{}
	for i, l := range c.LUNs {
		f := fmt.Sprintf("lun[%d]", i)
		if err := validateLUN(f, l); err != nil {
			return err
		}
		if luns[*l.LUN] {
			return ferr(f+".lun", "LUN %d used twice", *l.LUN)
		}
		luns[*l.LUN] = true
		if l.Serial != "" {
			if j, dup := serials[l.Serial]; dup {
				return ferr(f+".serial", "%q is the serial of lun[%d] already (VPD 80h; each logical unit needs its own)", l.Serial, j)
			}
			serials[l.Serial] = i
		}
		if naa, key, ok := configuredNAA(l); ok {
			if j, dup := naas[naa]; dup {
				return ferr(f+key, "gives LUN %d the NAA designator %x (VPD 83h) of lun[%d]: initiators and multipath would take the two for one disk; set another %s", *l.LUN, naa, j, key[1:])
			}
			naas[naa] = i
		}
	}
	acls := map[string]bool{}
	for i, a := range c.ACLs {
		f := fmt.Sprintf("acl[%d]", i)
		m, err := validateACL(f, a, luns)
		if err != nil {
			return err
		}
		if acls[m.String()] {
			return ferr(f+".initiator", "%s has an ACL already", m)
		}
		acls[m.String()] = true
	}
	if c.Target.ShutdownTimeout < 0 {
		return ferr("target.shutdown_timeout", "%v is negative", time.Duration(c.Target.ShutdownTimeout))
	}
	if a := c.Metrics.Listen; a != "" {
		if _, _, err := splitHostPort(a); err != nil {
			return ferr("metrics.listen", "%v", err)
		}
	}
	if n := len(c.Admin.Socket); n > maxSocketPath {
		return ferr("admin.socket", "%d bytes, longer than the %d a unix socket path can have", n, maxSocketPath)
	}
	if err := c.targetConfig(0).Validate(); err != nil {
		// target.Config errors name the key ("max_rsp_size: ...").
		k, msg, ok := strings.Cut(err.Error(), ": ")
		if !ok {
			return ferr("target", "%v", err)
		}
		return ferr("target."+k, "%s", msg)
	}
	// After the ranges: a max_req_size out of its range is named as such,
	// not as too many receive buffers.
	return c.checkReceiveMemory()
}

// maxReceiveMemory bounds the receive buffers of one channel (or of one
// port's shared receive queue), in bytes: they are allocated when an
// initiator logs in, and an allocation the machine cannot satisfy ends
// the process. The defaults need 1 MiB (128 × 8276) and 32 MiB with SRQ.
const maxReceiveMemory = 1 << 30

// checkReceiveMemory refuses receive queue sizes whose buffers would take
// more than maxReceiveMemory: rq_size × max_req_size per channel, or
// srq_size × max_req_size per port with use_srq.
func (c *Config) checkReceiveMemory() error {
	t := c.Target
	req := int64(t.MaxReqSize)
	if req == 0 {
		req = target.DefaultMaxReqSize
	}
	key, n, def := "target.rq_size", t.RQSize, target.DefaultRQSize
	if t.UseSRQ {
		key, n, def = "target.srq_size", t.SRQSize, target.DefaultSRQSize
	}
	if n <= 0 {
		n = def
	}
	if total := int64(n) * req; total > maxReceiveMemory {
		return ferr(key, "%d IUs of max_req_size %d bytes need %d MiB of receive buffers, more than the 1024 MiB allowed", n, req, total>>20)
	}
	return nil
}

// validateLUN checks one [[lun]] (f is its name, "lun[3]").
func validateLUN(f string, l LUNSection) error {
	if l.LUN == nil {
		return ferr(f+".lun", "required (the LUN number, 0..16383)")
	}
	if *l.LUN > 16383 {
		return ferr(f+".lun", "%s out of range 0..16383", lunText(*l.LUN))
	}
	if err := checkName(l.Name); err != nil {
		return ferr(f+".name", "%v", err)
	}
	switch l.Backstore {
	case "ram":
		if l.Size <= 0 {
			return ferr(f+".size", "a ram backstore needs a size")
		}
		if l.Size > maxRAMSize {
			return ferr(f+".size", "%d bytes is more than the 4 TiB a ram backstore can have", l.Size)
		}
		// A RAM LUN allocates its blocks as they are written: any size
		// up to the machine's memory starts, a larger one could never
		// be filled.
		if mem := physicalMemory(); mem > 0 && int64(l.Size) > mem {
			return ferr(f+".size", "%d bytes (%s) is more than the %d bytes (%s) of physical memory of this machine (MemTotal); a ram backstore keeps its data in memory", l.Size, gibText(int64(l.Size)), mem, gibText(mem))
		}
		if l.Path != "" {
			return ferr(f+".path", "a ram backstore has no path")
		}
	case "file", "block":
		if l.Path == "" {
			return ferr(f+".path", "a %s backstore needs a path", l.Backstore)
		}
		if l.Backstore == "block" && l.Size != 0 {
			return ferr(f+".size", "a block device is sized by the device")
		}
	case "rbd":
		if l.Pool == "" {
			return ferr(f+".pool", "an rbd backstore needs a pool")
		}
		if l.Image == "" {
			return ferr(f+".image", "an rbd backstore needs an image")
		}
		if l.Path != "" {
			return ferr(f+".path", "an rbd backstore has no path (pool and image name it)")
		}
		if l.BlockSize != 0 && l.BlockSize != 512 {
			// librbd compares and writes one 512-byte sector at most.
			return ferr(f+".block_size", "an rbd LUN has 512-byte blocks (librbd's compare-and-write is one sector)")
		}
	case "":
		return ferr(f+".backstore", "required (ram, file, block or rbd)")
	default:
		return ferr(f+".backstore", "%q is not ram, file, block or rbd", l.Backstore)
	}
	if l.Backstore != "rbd" {
		for _, kv := range [][2]string{{"pool", l.Pool}, {"image", l.Image}, {"ceph_conf", l.CephConf}, {"ceph_client", l.CephClient}, {"ceph_keyring", l.CephKeyring}} {
			if kv[1] != "" {
				return ferr(f+"."+kv[0], "only an rbd backstore has %s", kv[0])
			}
		}
	}
	switch l.BlockSize {
	case 0, 512, 1024, 2048, 4096:
	default:
		return ferr(f+".block_size", "%d is not 512, 1024, 2048 or 4096", l.BlockSize)
	}
	// A RAM or file LUN without block_size has 512-byte blocks; its size
	// is a whole number of blocks, at least one.
	bs := int64(l.BlockSize)
	if bs == 0 {
		bs = defaultBlockSize
	}
	if l.Size > 0 && int64(l.Size)%bs != 0 {
		return ferr(f+".size", "%d bytes is not a multiple of block_size %d", l.Size, bs)
	}
	if l.WWN != "" {
		if _, err := parseWWN(l.WWN); err != nil {
			return ferr(f+".wwn", "%v", err)
		}
	}
	if len(l.Serial) > 64 {
		return ferr(f+".serial", "longer than 64 bytes")
	}
	for i := 0; i < len(l.Serial); i++ {
		if l.Serial[i] < 0x20 || l.Serial[i] > 0x7e {
			return ferr(f+".serial", "%q is not printable ASCII", l.Serial)
		}
	}
	return nil
}

// validateACL checks one [[acl]] against the configured LUN numbers.
func validateACL(f string, a ACLSection, luns map[uint64]bool) (target.InitiatorMatch, error) {
	m, err := target.ParseInitiator(a.Initiator)
	if err != nil {
		return m, ferr(f+".initiator", "%v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(a.LUNs)) {
		v := a.LUNs[k]
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil || n > 16383 {
			return m, ferr(f+".luns."+k, "%q is not a LUN number 0..16383", k)
		}
		if !luns[v] {
			return m, ferr(f+".luns."+k, "target LUN %s is not configured", lunText(v))
		}
	}
	seen := map[uint64]bool{}
	for _, n := range a.ReadOnly {
		switch {
		case seen[n]:
			return m, ferr(f+".read_only", "LUN %s listed twice", lunText(n))
		case len(a.LUNs) > 0 && !hasKey(a.LUNs, n):
			return m, ferr(f+".read_only", "LUN %s is not a key of luns (read_only names the LUNs the initiator sees)", lunText(n))
		case len(a.LUNs) == 0 && !luns[n]:
			return m, ferr(f+".read_only", "LUN %s is not configured", lunText(n))
		}
		seen[n] = true
	}
	return m, nil
}

// checkName accepts a port or LUN name: at most 64 bytes of UTF-8 without
// control characters (names appear in log lines, tables and metric labels).
func checkName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("%q is longer than 64 bytes", name)
	}
	if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return fmt.Errorf("%q has control characters", name)
	}
	return nil
}

// defaultBlockSize is the logical block size of RAM and file LUNs without
// block_size, in bytes.
const defaultBlockSize = 512

// lunText formats a LUN number decoded into a uint64: the TOML decoder
// stores a negative integer there as its two's complement, which is
// printed as the negative number the file holds.
func lunText(n uint64) string {
	if int64(n) < 0 {
		return strconv.FormatInt(int64(n), 10)
	}
	return strconv.FormatUint(n, 10)
}

func hasKey(m map[string]uint64, n uint64) bool {
	_, ok := m[strconv.FormatUint(n, 10)]
	return ok
}

// targetConfig builds the SRP target port configuration (without the
// service GUID, name and logger).
func (c *Config) targetConfig(guid uint64) target.Config {
	t := c.Target
	tc := target.Config{
		ServiceGUID:      guid,
		MaxReqSize:       int(t.MaxReqSize),
		MaxRspSize:       int(t.MaxRspSize),
		SQSize:           t.SQSize,
		RQSize:           t.RQSize,
		MaxRDMASize:      int(t.MaxRDMASize),
		MaxDataLen:       int(t.MaxDataLen),
		MaxDataMemory:    int(t.MaxDataMemory),
		MaxChannels:      t.MaxChannels,
		MaxTotalChannels: t.MaxTotalChannels,
		UseSRQ:           t.UseSRQ,
		SRQSize:          t.SRQSize,
		DemoMode:         t.DemoMode != nil && *t.DemoMode,
		NoMultichannel:   t.Multichannel != nil && !*t.Multichannel,
		NoImmediateData:  t.ImmediateData != nil && !*t.ImmediateData,
	}
	tc.ACLs = c.targetACLs()
	return tc
}

// targetACLs converts the [[acl]] sections (skipping invalid ones, which
// Validate reports).
func (c *Config) targetACLs() []target.ACL {
	var out []target.ACL
	for _, a := range c.ACLs {
		m, err := target.ParseInitiator(a.Initiator)
		if err != nil {
			continue
		}
		acl := target.ACL{Initiator: m}
		if len(a.LUNs) > 0 {
			acl.LUNs = map[uint64]uint64{}
			for _, k := range slices.Sorted(maps.Keys(a.LUNs)) {
				n, _ := strconv.ParseUint(k, 10, 64)
				acl.LUNs[n] = a.LUNs[k]
			}
		}
		if len(a.ReadOnly) > 0 {
			acl.ReadOnly = map[uint64]bool{}
			for _, n := range a.ReadOnly {
				acl.ReadOnly[n] = true
			}
		}
		out = append(out, acl)
	}
	return out
}

// savedHeader is the first line of a configuration srptd wrote (Encode);
// savedHeaderV1 the one srptd wrote before. Save replaces only files that
// start with one of them.
const (
	savedHeader   = "# srptd configuration, written by srpctl target save (see srptd.toml(5))"
	savedHeaderV1 = "# srptd configuration (see docs/srptd.md)"
)

// Encode writes the configuration as TOML that LoadConfig reads back to
// the same values.
func (c *Config) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(savedHeader + "\n\n")
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func parseGUID(s string) (uint64, error) {
	t := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "0x"), ":", "")
	g, err := strconv.ParseUint(t, 16, 64)
	if len(t) != 16 || err != nil {
		return 0, fmt.Errorf("%q: want 16 hex digits (optionally xxxx:xxxx:xxxx:xxxx)", s)
	}
	return g, nil
}

// configuredNAA returns the NAA designator l's serial or wwn sets, and the
// key (".wwn" or ".serial") that sets it; ok is false when neither does (a
// generated serial, or one without hex digits, is unique).
func configuredNAA(l LUNSection) (naa [16]byte, key string, ok bool) {
	if l.WWN != "" {
		naa, err := parseWWN(l.WWN)
		return naa, ".wwn", err == nil
	}
	naa, ok = scsi.NAAFromSerial(l.Serial)
	return naa, ".serial", ok
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

// readConfigFile reads and parses a configuration file.
func readConfigFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadConfig(string(b), path)
}
