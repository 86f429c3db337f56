package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// ALUAState is a target port group's asymmetric access state (SPC-4
// §5.11.2.4; the ASYMMETRIC ACCESS STATE field of REPORT TARGET PORT GROUPS,
// table 307).
type ALUAState uint8

// Asymmetric access states (SPC-4 table 307).
const (
	ALUAActiveOptimized    ALUAState = 0x0 // every command is served, at full speed
	ALUAActiveNonOptimized ALUAState = 0x1 // every command is served, maybe slower
	ALUAStandby            ALUAState = 0x2 // management commands only (§5.11.2.4.4)
	ALUAUnavailable        ALUAState = 0x3 // fewer still (§5.11.2.4.5)
	ALUATransitioning      ALUAState = 0xF // between states (§5.11.2.5)
)

var aluaNames = map[ALUAState]string{
	ALUAActiveOptimized:    "active/optimized",
	ALUAActiveNonOptimized: "active/non-optimized",
	ALUAStandby:            "standby",
	ALUAUnavailable:        "unavailable",
	ALUATransitioning:      "transitioning",
}

// String returns the state's name as ParseALUAState reads it.
func (s ALUAState) String() string {
	if n, ok := aluaNames[s]; ok {
		return n
	}
	return fmt.Sprintf("ALUAState(%#x)", uint8(s))
}

// ParseALUAState reads "active/optimized" (or "ao"), "active/non-optimized"
// ("ano"), "standby", "unavailable" or "transitioning".
func ParseALUAState(s string) (ALUAState, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "active/optimized", "active-optimized", "ao":
		return ALUAActiveOptimized, nil
	case "active/non-optimized", "active-non-optimized", "ano":
		return ALUAActiveNonOptimized, nil
	case "standby":
		return ALUAStandby, nil
	case "unavailable":
		return ALUAUnavailable, nil
	case "transitioning":
		return ALUATransitioning, nil
	}
	return 0, fmt.Errorf("scsi: %q is not an ALUA state (active/optimized, active/non-optimized, standby, unavailable, transitioning)", s)
}

// PortGroup is one target port group as REPORT TARGET PORT GROUPS reports
// it. Several gateways exporting one logical unit form one SCSI target
// device; each gateway is a group of its own.
type PortGroup struct {
	// ID is the TARGET PORT GROUP identifier (VPD 83h designator type 5).
	ID uint16
	// State is the group's asymmetric access state.
	State ALUAState
	// Preferred is the PREF bit: the group is a preferred path.
	Preferred bool
	// Ports are the relative target port identifiers in the group. For the
	// target's own group, empty means the target's ports.
	Ports []uint16
}

// aluaGroups is the target's view of every port group: its own (local) and
// those of the other gateways. Values are immutable; changes build a new one.
type aluaGroups struct {
	local  uint16      // the target's own group ID
	groups []PortGroup // sorted by ID; holds local
	// status is the STATUS CODE per group ID (SPC-4 §6.37, table 309): 01h
	// altered by SET TARGET PORT GROUPS, 02h altered by an implicit
	// (administrative) change.
	status map[uint16]byte
}

// newALUAGroups builds the table: groups plus the local group when absent
// (active/optimized, preferred).
func newALUAGroups(local uint16, groups []PortGroup) (*aluaGroups, error) {
	g := &aluaGroups{local: local, status: map[uint16]byte{}}
	seen := map[uint16]bool{}
	for _, pg := range groups {
		if seen[pg.ID] {
			return nil, fmt.Errorf("scsi: target port group %d listed twice", pg.ID)
		}
		if _, ok := aluaNames[pg.State]; !ok {
			return nil, fmt.Errorf("scsi: target port group %d: %v", pg.ID, pg.State)
		}
		seen[pg.ID] = true
		pg.Ports = slices.Clone(pg.Ports)
		g.groups = append(g.groups, pg)
	}
	if !seen[local] {
		g.groups = append(g.groups, PortGroup{ID: local, State: ALUAActiveOptimized, Preferred: true})
	}
	slices.SortFunc(g.groups, func(a, b PortGroup) int { return int(a.ID) - int(b.ID) })
	return g, nil
}

func (g *aluaGroups) find(id uint16) (PortGroup, bool) {
	for _, pg := range g.groups {
		if pg.ID == id {
			return pg, true
		}
	}
	return PortGroup{}, false
}

// localState is the asymmetric access state of the target's own group.
func (g *aluaGroups) localState() ALUAState {
	pg, _ := g.find(g.local)
	return pg.State
}

// with returns a copy with group id set to st and its status code.
func (g *aluaGroups) with(id uint16, st ALUAState, status byte) *aluaGroups {
	n := &aluaGroups{local: g.local, groups: slices.Clone(g.groups), status: make(map[uint16]byte, len(g.status)+1)}
	for k, v := range g.status {
		n.status[k] = v
	}
	for i := range n.groups {
		if n.groups[i].ID == id {
			n.groups[i].State = st
		}
	}
	n.status[id] = status
	return n
}

// aluaAllowed reports whether a command may run through a port in state st
// (SPC-4 §5.11.2.4.4–5.11.2.5; the lists of LIO's core_alua_state_standby,
// core_alua_state_unavailable and core_alua_state_transition), and if not,
// the reason: LOGICAL UNIT NOT ACCESSIBLE with the state (02/04/0A–0C).
func aluaAllowed(st ALUAState, cdb []byte) Reason {
	op := cdb[0]
	sa := byte(0)
	if len(cdb) > 1 {
		sa = cdb[1] & 0x1F
	}
	// Everywhere: identification, the inventory, the sense, and the group
	// commands themselves.
	switch {
	case op == opInquiry, op == opReportLUNs, op == opRequestSense,
		op == opMaintenanceIn && sa == saReportTPG:
		return ReasonNone
	}
	switch st {
	case ALUAActiveOptimized, ALUAActiveNonOptimized:
		return ReasonNone
	case ALUATransitioning:
		return ReasonALUATransitioning
	}
	// Standby and unavailable both serve these.
	switch {
	case op == opMaintenanceOut && sa == saSetTPG,
		op == opMaintenanceIn && (sa == saReportOpcodes || sa == saReportTMFs),
		op == opServiceActionIn16 && sa == saReadCapacity16:
		return ReasonNone
	}
	if st == ALUAUnavailable {
		return ReasonALUAUnavailable
	}
	switch op {
	case opModeSense6, opModeSense10, opModeSelect6, opModeSelect10,
		opPersistentReserveIn, opPersistentReserveOut:
		return ReasonNone
	}
	return ReasonALUAStandby
}

// aluaCheck is the admission check of a command against the state of the
// target's own port group (the group of every port of this target).
func (s *session) aluaCheck(cdb []byte) failure {
	if r := aluaAllowed(s.t.alua.Load().localState(), cdb); r != ReasonNone {
		return fail(r)
	}
	return ok
}

// execReportTPG: SPC-4 §6.37 REPORT TARGET PORT GROUPS, every group of the
// table (this gateway's and the others'), in the length-only (00b) or
// extended (01b) header format.
func execReportTPG(c *cmdCtx) failure {
	format := c.cdb[1] >> 5
	alloc := int(be32(c.cdb[6:]))
	if format > 1 {
		return badCDB(1, 7)
	}
	g := c.s.t.alua.Load()
	var b []byte
	if format == 1 {
		b = []byte{0, 0, 0, 0, 0x10, 0, 0, 0} // FORMAT TYPE 001b, IMPLICIT TRANSITION TIME 0
	} else {
		b = []byte{0, 0, 0, 0}
	}
	for _, pg := range g.groups {
		ports := pg.Ports
		if pg.ID == g.local && len(ports) == 0 {
			ports = c.s.t.targetPorts()
			if len(ports) == 0 {
				ports = []uint16{c.s.nexus.RelativeTargetPort}
			}
		}
		b0 := byte(pg.State)
		if pg.Preferred {
			b0 |= 0x80 // PREF
		}
		// T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP (table 308).
		b = append(b, b0, 0x80|0x08|0x04|0x02|0x01)
		b = binary.BigEndian.AppendUint16(b, pg.ID)
		b = append(b, 0, g.status[pg.ID], 0, byte(len(ports)))
		for _, p := range ports {
			b = append(b, 0, 0)
			b = binary.BigEndian.AppendUint16(b, p)
		}
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return c.putDataIn(b, alloc)
}

// execSetTPG: SPC-4 §6.46 SET TARGET PORT GROUPS (explicit ALUA). Each
// 4-byte descriptor after the 4-byte header names a group and the state
// asked for: active/optimized, active/non-optimized, standby or
// unavailable. This gateway changes its own group; another gateway's group
// can only be "set" to the state it already has (the change would have to
// be made through that gateway). Bad descriptors are INVALID FIELD IN
// PARAMETER LIST pointing at them, and nothing changes. Every other I_T
// nexus gets ASYMMETRIC ACCESS STATE CHANGED.
func execSetTPG(c *cmdCtx) failure {
	n := int(be32(c.cdb[6:]))
	if n == 0 {
		return ok
	}
	if n < 4 || (n-4)%4 != 0 {
		return fail(ReasonParamListLength)
	}
	if f := c.needsDataOut(n); f.failed() {
		return f
	}
	t := c.s.t
	t.aluaMu.Lock()
	defer t.aluaMu.Unlock()
	g := t.alua.Load()
	next, f := g.setTPG(c.cmd.DataOut[:n])
	if f.failed() {
		return f
	}
	if next != g {
		t.alua.Store(next)
		t.uaAllLUs(ReasonUAALUAChanged, c.s.key)
	}
	return ok
}

// setTPG applies a SET TARGET PORT GROUPS parameter list (header and
// descriptors, SPC-4 §6.46 tables 317, 318) to g and returns the new view (g
// itself when nothing changes) or the failure; g is not modified.
func (g *aluaGroups) setTPG(p []byte) (*aluaGroups, failure) {
	next := g
	for off := 4; off+4 <= len(p); off += 4 {
		d := p[off:]
		st := ALUAState(d[0] & 0x0F)
		id := be16(d[2:])
		switch st {
		case ALUAActiveOptimized, ALUAActiveNonOptimized, ALUAStandby, ALUAUnavailable:
		default:
			return g, badParam(off, 3)
		}
		pg, found := g.find(id)
		switch {
		case !found:
			return g, badParam(off+2, -1)
		case id != g.local && pg.State != st:
			return g, badParam(off, 3)
		case id == g.local && pg.State != st:
			next = next.with(id, st, 0x01)
		}
	}
	return next, ok
}

// SetPortGroupState changes the asymmetric access state of the target
// port group id, the target's own or one it reports for another gateway
// (an implicit, administrative change: STATUS CODE 02h). Every I_T nexus
// gets ASYMMETRIC ACCESS STATE CHANGED (06/2A/06) on every logical unit, so
// multipath initiators re-read REPORT TARGET PORT GROUPS. Errors: an unknown
// group or state.
func (t *Target) SetPortGroupState(id uint16, st ALUAState) error {
	if _, ok := aluaNames[st]; !ok {
		return fmt.Errorf("scsi: %v is not an ALUA state", st)
	}
	t.aluaMu.Lock()
	defer t.aluaMu.Unlock()
	g := t.alua.Load()
	pg, found := g.find(id)
	if !found {
		return fmt.Errorf("scsi: no target port group %d", id)
	}
	if pg.State == st {
		return nil
	}
	t.alua.Store(g.with(id, st, 0x02))
	t.uaAllLUs(ReasonUAALUAChanged, "")
	t.log.Info("scsi: ALUA state changed", "group", id, "state", st.String())
	return nil
}

// PortGroups returns the target port groups and their states, sorted by ID;
// the target's own group lists its ports.
func (t *Target) PortGroups() []PortGroup {
	g := t.alua.Load()
	out := make([]PortGroup, len(g.groups))
	for i, pg := range g.groups {
		pg.Ports = slices.Clone(pg.Ports)
		if pg.ID == g.local && len(pg.Ports) == 0 {
			pg.Ports = t.targetPorts()
		}
		out[i] = pg
	}
	return out
}

// uaAllLUs establishes r on every logical unit for every nexus that has
// reached it, except the nexus except ("" for none).
func (t *Target) uaAllLUs(r Reason, except string) {
	for _, lu := range *t.luns.Load() {
		lu.uaAllExisting(r, except)
	}
}

// SetPortGroups replaces the target port groups REPORT TARGET PORT GROUPS
// reports: the target's own (TargetConfig.TargetPortGroup; added
// active/optimized and preferred when groups lacks it) and those of the other
// gateways exporting the same logical units. When a state changes, every I_T
// nexus gets ASYMMETRIC ACCESS STATE CHANGED. Errors: a group listed twice or
// an unknown state; nothing changes then.
func (t *Target) SetPortGroups(groups []PortGroup) error {
	t.aluaMu.Lock()
	defer t.aluaMu.Unlock()
	old := t.alua.Load()
	g, err := newALUAGroups(old.local, groups)
	if err != nil {
		return err
	}
	changed := len(g.groups) != len(old.groups)
	for i := 0; !changed && i < len(g.groups); i++ {
		changed = g.groups[i].ID != old.groups[i].ID || g.groups[i].State != old.groups[i].State
	}
	t.alua.Store(g)
	if changed {
		t.uaAllLUs(ReasonUAALUAChanged, "")
	}
	return nil
}
