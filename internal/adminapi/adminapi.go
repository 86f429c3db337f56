// Package adminapi holds the request and response bodies of srptd's admin
// API, which srptd serves and `srpctl target` calls: HTTP/1.1 with JSON
// bodies over a unix socket (docs/srptd.md, "Admin API").
//
//	GET    /login-info          []string: add_target strings, one per listener
//	GET    /sessions            []Session
//	DELETE /sessions/{name}     SRP_T_LOGOUT an initiator port ID or a channel
//	GET    /luns                []LUN
//	GET    /backstores          []Backstore
//	POST   /luns                NewLUN → 201
//	DELETE /luns/{lun}          → 204
//	GET    /acls                []ACL
//	POST   /acls                ACL → 201 ACLAdded
//	DELETE /acls/{initiator}    → 204
//	POST   /save                → Saved
//	GET    /alua                []PortGroup
//	PUT    /alua/{group}        ALUAState → 204
//
// Every error answer is a 4xx or 5xx status with an Error body.
package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Paths of the admin API.
const (
	PathLoginInfo  = "/login-info"
	PathSessions   = "/sessions"
	PathLUNs       = "/luns"
	PathBackstores = "/backstores"
	PathACLs       = "/acls"
	PathSave       = "/save"
	PathALUA       = "/alua"
)

// PortGroup is one target port group as GET /alua reports it (SPC-4
// §6.37): this gateway's (Local) and the other gateways' it reports.
type PortGroup struct {
	Group     uint16   `json:"group"`
	State     string   `json:"state"` // active/optimized, active/non-optimized, standby, unavailable, transitioning
	Preferred bool     `json:"preferred,omitempty"`
	Ports     []uint16 `json:"ports"` // relative target port IDs
	Local     bool     `json:"local,omitempty"`
}

// ALUAState is the body of PUT /alua/{group}: the group's new asymmetric
// access state. Initiators get ASYMMETRIC ACCESS STATE CHANGED.
type ALUAState struct {
	State string `json:"state"`
}

// Session is one channel as GET /sessions reports it. The counters run
// from the channel's login and are read without stopping the channel, so
// two of them may be one event apart. The keys other than "port" are the
// Go names of srp/target's SessionInfo, as the API has always served them.
type Session struct {
	Port          string `json:"port"`          // srptd port name
	Channel       uint64 `json:"Channel"`       // channel number, unique within the port
	InitiatorPort string `json:"InitiatorPort"` // initiator port ID, 32 hex digits
	Remote        string `json:"Remote"`        // transport address of the initiator
	State         string `json:"State"`         // channel state (LIVE, ...)
	ReqLim        int    `json:"ReqLim"`        // credits the initiator holds (req_lim), in IUs
	Outstanding   int    `json:"Outstanding"`   // SRP_CMDs and SRP_TSK_MGMTs in progress
	Immediate     bool   `json:"Immediate"`     // immediate data negotiated

	Commands        uint64 `json:"Commands"`        // SRP_CMDs received
	ReadBytes       uint64 `json:"ReadBytes"`       // data-in bytes sent (RDMA WRITE)
	WriteBytes      uint64 `json:"WriteBytes"`      // data-out bytes taken (RDMA READ or immediate data)
	Errors          uint64 `json:"Errors"`          // unexpected or malformed IUs and failed work requests
	CheckConditions uint64 `json:"CheckConditions"` // SRP_RSPs sent with status CHECK CONDITION
	TMFs            uint64 `json:"TMFs"`            // SRP_TSK_MGMTs received
	MaxOutstanding  int    `json:"MaxOutstanding"`  // most SRP_CMDs and SRP_TSK_MGMTs in progress at once
}

// LUN is one logical unit as GET /luns reports it.
type LUN struct {
	LUN       uint64      `json:"lun"`
	Name      string      `json:"name,omitempty"`
	Backstore string      `json:"backstore"`      // ram, file, block or rbd
	Path      string      `json:"path,omitempty"` // resolved
	Size      int64       `json:"size"`           // bytes
	BlockSize uint32      `json:"block_size"`     // bytes
	ReadOnly  bool        `json:"read_only,omitempty"`
	Serial    string      `json:"serial"` // VPD 80h
	Counters  LUNCounters `json:"counters"`
}

// LUNCounters are a logical unit's command counters since it was attached.
type LUNCounters struct {
	Commands   uint64 `json:"commands"`    // completed (aborted ones excluded)
	ReadBytes  uint64 `json:"read_bytes"`  // data-in bytes returned
	WriteBytes uint64 `json:"write_bytes"` // data-out bytes consumed
	// Errors counts commands completed with a status other than GOOD,
	// unit attentions aside.
	Errors uint64 `json:"errors"`
	// UnitAttentions counts CHECK CONDITIONs with sense key UNIT
	// ATTENTION: reports to the initiator, not failures.
	UnitAttentions uint64  `json:"unit_attentions"`
	Aborted        uint64  `json:"aborted"`        // ended by a TMF or a channel loss
	InFlight       int64   `json:"in_flight"`      // in progress now
	AvgLatencyUs   float64 `json:"avg_latency_us"` // mean over completed commands, microseconds
}

// Backstore is one backstore as GET /backstores reports it (each LUN owns
// one).
type Backstore struct {
	LUN  uint64 `json:"lun"` // the LUN it backs
	Name string `json:"name,omitempty"`
	Type string `json:"type"`           // ram, file, block or rbd
	Path string `json:"path,omitempty"` // resolved
	Size int64  `json:"size"`           // bytes
	// Allocated is the storage in use, bytes: RAM pages written, or the
	// blocks a (sparse) file occupies; nil for block devices.
	Allocated *int64 `json:"allocated,omitempty"`
	ReadOnly  bool   `json:"read_only,omitempty"`
}

// NewLUN is the body of POST /luns: a [[lun]] section of srptd's
// configuration as JSON (docs/srptd.md lists the keys).
type NewLUN struct {
	LUN        *uint64 `json:"lun"` // 0..16383; required
	Name       string  `json:"name,omitempty"`
	Backstore  string  `json:"backstore,omitempty"` // ram, file (default), block or rbd
	Path       string  `json:"path,omitempty"`      // absolute; file default: DATA_DIR/lun<N>.img
	Size       Size    `json:"size,omitempty"`
	BlockSize  int     `json:"block_size,omitempty"` // bytes: 512, 1024, 2048 or 4096
	ReadOnly   bool    `json:"read_only,omitempty"`
	WriteCache bool    `json:"write_cache,omitempty"` // initial WCE
	// ThinProvisioning: nil means on when the backstore can deallocate.
	ThinProvisioning *bool  `json:"thin_provisioning,omitempty"`
	Serial           string `json:"serial,omitempty"` // VPD 80h
	WWN              string `json:"wwn,omitempty"`    // NAA 6 designator, 32 hex digits
	Pool             string `json:"pool,omitempty"`   // rbd
	Image            string `json:"image,omitempty"`  // rbd
	CephConf         string `json:"ceph_conf,omitempty"`
	CephClient       string `json:"ceph_client,omitempty"`
	CephKeyring      string `json:"ceph_keyring,omitempty"`
}

// Size is a size in a request, in ParseSize's syntax: bytes, or a number
// with a binary unit ("64MiB", "1.5g"). It is sent as a JSON string; a
// JSON integer is taken as bytes. The text is kept as given; srptd parses
// and checks it.
type Size string

// UnmarshalJSON takes a JSON string or integer.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		*s = Size(str)
		return nil
	}
	if _, err := strconv.ParseInt(string(b), 10, 64); err != nil {
		return fmt.Errorf("bad size %s (want bytes or a string such as \"64MiB\")", bytes.TrimSpace(b))
	}
	*s = Size(b)
	return nil
}

// ACL is one [[acl]] section of srptd's configuration: an element of GET
// /acls and the body of POST /acls.
type ACL struct {
	// Initiator is a port GUID xxxx:xxxx:xxxx:xxxx, an initiator port ID in
	// hex (up to 32 digits, optional 0x) or an IP address.
	Initiator string `json:"initiator"`
	// LUNs maps initiator LUN numbers (decimal strings) to target LUNs;
	// empty: every LUN under its own number.
	LUNs map[string]uint64 `json:"luns,omitempty"`
	// ReadOnly lists initiator LUNs that are write-protected.
	ReadOnly []uint64 `json:"read_only,omitempty"`
}

// ACLAdded is the answer of POST /acls.
type ACLAdded struct {
	// DemoMode is true when srptd is in demo mode: it admits every
	// initiator to every LUN, so the ACL takes effect only once demo mode
	// is off.
	DemoMode bool `json:"demo_mode"`
}

// Saved is the answer of POST /save.
type Saved struct {
	Path string `json:"path"` // the configuration file written
	// Kept is the hand-written configuration file srptd left as it was
	// (its comments and layout kept), writing Path (Kept.saved) beside it;
	// empty when Path replaced the file srptd had written itself.
	Kept string `json:"kept,omitempty"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}
