package pr

import (
	"bytes"
	"encoding/binary"
)

// Params is a decoded PERSISTENT RESERVE OUT parameter list (SPC-4 §6.16.3
// table 213, basic; §6.16.4 table 215, REGISTER AND MOVE).
type Params struct {
	// ReservationKey (bytes 0–7) and ServiceActionKey (SERVICE ACTION
	// RESERVATION KEY, bytes 8–15).
	ReservationKey, ServiceActionKey uint64
	// SpecIPT is SPEC_I_PT (byte 20 bit 3; basic list only). When set,
	// TransportIDs holds the TransportIDs of the additional parameter data
	// (TRANSPORTID PARAMETER DATA LENGTH in bytes 24–27, TransportIDs from
	// byte 28), each aliasing the parameter list.
	SpecIPT      bool
	TransportIDs [][]byte
	// AllTgPt is ALL_TG_PT (byte 20 bit 2; basic list only).
	AllTgPt bool
	// APTPL is byte 20 bit 0 (basic) or byte 17 bit 0 (REGISTER AND MOVE).
	APTPL bool
	// Unreg is UNREG (byte 17 bit 1; REGISTER AND MOVE only).
	Unreg bool
	// RelativeTargetPort is the RELATIVE TARGET PORT IDENTIFIER (bytes
	// 18–19; REGISTER AND MOVE only).
	RelativeTargetPort uint16
	// TransportID is the destination TransportID (bytes 24–; REGISTER AND
	// MOVE only). It aliases the parameter list.
	TransportID []byte
}

// ParseParams decodes the parameter list of a PERSISTENT RESERVE OUT CDB.
// param holds the data-out buffer; only its first PARAMETER LIST LENGTH
// (CDB bytes 5–8) bytes are read. It checks the lengths (SPC-4 §6.16.1):
//   - PARAMETER LIST LENGTH below 24, or more than len(param): PARAMETER
//     LIST LENGTH ERROR;
//   - SPEC_I_PT=1 with a service action other than REGISTER: INVALID FIELD
//     IN PARAMETER LIST, byte 20 bit 3;
//   - SPEC_I_PT=1: a length below 28 + TRANSPORTID PARAMETER DATA LENGTH is
//     a PARAMETER LIST LENGTH ERROR; a TransportID truncated by the
//     TRANSPORTID PARAMETER DATA LENGTH is an INVALID FIELD IN PARAMETER
//     LIST at the TransportID's first byte (SPC-4 §6.16.3);
//   - otherwise a length other than 24 is a PARAMETER LIST LENGTH ERROR;
//   - REGISTER AND MOVE: a length below 24 + TRANSPORTID PARAMETER DATA
//     LENGTH is a PARAMETER LIST LENGTH ERROR (bytes past the TransportID
//     are ignored); a TRANSPORTID PARAMETER DATA LENGTH below 24 or not a
//     multiple of 4 is an INVALID FIELD IN PARAMETER LIST, byte 20 (SPC-4
//     §6.16.4).
//
// cdb must be at least 10 bytes (else INVALID FIELD IN CDB). ParseParams
// never panics.
func ParseParams(cdb, param []byte) (Params, Outcome) {
	var p Params
	if len(cdb) < 10 {
		return p, badCDB(0, 7)
	}
	sa := cdb[1] & 0x1f
	pll := uint64(binary.BigEndian.Uint32(cdb[5:9]))
	if pll < 24 || pll > uint64(len(param)) {
		return p, outcome(ParamListLengthError)
	}
	b := param[:pll]
	p.ReservationKey = binary.BigEndian.Uint64(b[0:])
	p.ServiceActionKey = binary.BigEndian.Uint64(b[8:])
	if sa != OutRegisterAndMove {
		p.SpecIPT = b[20]&0x08 != 0
		p.AllTgPt = b[20]&0x04 != 0
		p.APTPL = b[20]&0x01 != 0
		if !p.SpecIPT {
			if pll != 24 {
				return p, outcome(ParamListLengthError)
			}
			return p, good
		}
		if sa != OutRegister {
			return p, badParam(20, 3)
		}
		if pll < 28 {
			return p, outcome(ParamListLengthError)
		}
		tpdl := uint64(binary.BigEndian.Uint32(b[24:]))
		if 28+tpdl > pll {
			return p, outcome(ParamListLengthError)
		}
		for off := uint64(28); off < 28+tpdl; {
			n := transportIDLen(b[off : 28+tpdl])
			if n == 0 {
				return p, badParamByte(uint16(min(off, 0xFFFF)))
			}
			p.TransportIDs = append(p.TransportIDs, b[off:off+uint64(n)])
			off += uint64(n)
		}
		return p, good
	}
	p.Unreg = b[17]&0x02 != 0
	p.APTPL = b[17]&0x01 != 0
	p.RelativeTargetPort = binary.BigEndian.Uint16(b[18:])
	tidLen := uint64(binary.BigEndian.Uint32(b[20:]))
	if 24+tidLen > pll {
		return p, outcome(ParamListLengthError)
	}
	if tidLen < 24 || tidLen%4 != 0 {
		return p, badParamByte(20)
	}
	p.TransportID = b[24 : 24+tidLen]
	return p, good
}

// Out performs PERSISTENT RESERVE OUT (CDB opcode 5Fh, SPC-4 §6.16) from n
// with the parameter list in param (the data-out buffer; see ParseParams).
// It returns the side effects the caller must apply and the outcome; on any
// outcome other than OK the state is unchanged and Effects is empty.
//
// Service actions (CDB byte 1 bits 4:0): REGISTER, RESERVE, RELEASE,
// CLEAR, PREEMPT, PREEMPT AND ABORT, REGISTER AND IGNORE EXISTING KEY,
// REGISTER AND MOVE, with the rules of SPC-4 §5.13.7–§5.13.11; others get
// INVALID FIELD IN CDB (byte 1 bit 4). SCOPE (byte 2 bits 7:4) must be
// LU_SCOPE and TYPE (byte 2 bits 3:0) one of the six types where they are
// used. While an SPC-2 reservation exists every PERSISTENT RESERVE OUT gets
// RESERVATION CONFLICT (SPC-2 §5.5.1), before any field is checked. A successful command other than
// RESERVE and RELEASE increments PRgeneration, except a REGISTER of key 0
// from an unregistered nexus, which changes nothing.
func (s *State) Out(n Nexus, cdb, param []byte) (Effects, Outcome) {
	if len(cdb) < 10 || cdb[0] != OpPersistentReserveOut {
		return Effects{}, badCDB(0, 7)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rsv != nil {
		return Effects{}, conflict
	}
	sa := cdb[1] & 0x1f
	if sa > OutRegisterAndMove {
		return Effects{}, badCDB(1, 4)
	}
	p, o := ParseParams(cdb, param)
	if !o.OK() {
		return Effects{}, o
	}
	if p.APTPL && s.cfg.Persister == nil && s.cfg.Shared == nil {
		switch sa {
		case OutRegister, OutRegisterAndIgnoreExistingKey:
			return Effects{}, badParam(20, 0)
		case OutRegisterAndMove:
			return Effects{}, badParam(17, 0)
		}
	}
	if s.cfg.Shared == nil {
		return s.outLocal(n, cdb, sa, p)
	}
	// Shared: apply to the stored state and swap it in only if no other
	// gateway changed it meanwhile; otherwise re-read and apply again.
	for range sharedAttempts {
		if err := s.refreshLocked(); err != nil {
			s.log.Warn("shared persistent reservation state not read", "err", err)
			return Effects{}, outcome(InternalTargetFailure)
		}
		c, eff, changed, o := s.apply(n, cdb, sa, p)
		if !o.OK() {
			return Effects{}, o
		}
		if !changed {
			s.c = c
			s.noteLocked()
			return eff, good
		}
		ver, swapped, err := s.cfg.Shared.CompareAndSwap(s.sharedVer, c.image())
		if err != nil {
			s.log.Warn("shared persistent reservation state not saved", "err", err)
			return Effects{}, outcome(InternalTargetFailure)
		}
		if swapped {
			s.c, s.sharedVer = c, ver
			s.noteLocked()
			s.log.Debug("persistent reserve out (shared)", "sa", sa, "initiator", n.InitiatorPortID,
				"target", n.TargetPortID, "gen", c.gen, "regs", len(c.regs), "version", ver)
			return eff, good
		}
	}
	s.log.Warn("shared persistent reservation state changed under every attempt", "attempts", sharedAttempts)
	return Effects{}, outcome(InternalTargetFailure)
}

// apply runs service action sa on a copy of the state and returns the new
// state, the effects, whether anything changed, and the outcome.
func (s *State) apply(n Nexus, cdb []byte, sa uint8, p Params) (core, Effects, bool, Outcome) {
	c := s.c.clone()
	op := outOp{
		c: &c, cfg: &s.cfg, n: n, k: keyOf(n), p: p,
		scope: cdb[2] >> 4, typ: Type(cdb[2] & 0x0f),
	}
	var changed bool
	var o Outcome
	switch sa {
	case OutRegister:
		changed, o = op.register(false)
	case OutRegisterAndIgnoreExistingKey:
		changed, o = op.register(true)
	case OutReserve:
		changed, o = op.reserve()
	case OutRelease:
		changed, o = op.release()
	case OutClear:
		changed, o = op.clear()
	case OutPreempt:
		changed, o = op.preempt(false)
	case OutPreemptAndAbort:
		changed, o = op.preempt(true)
	case OutRegisterAndMove:
		changed, o = op.registerAndMove()
	}
	return c, op.eff, changed, o
}

// outLocal is Out for a state kept by this State alone (with the
// Persister while APTPL is active).
func (s *State) outLocal(n Nexus, cdb []byte, sa uint8, p Params) (Effects, Outcome) {
	c, eff, changed, o := s.apply(n, cdb, sa, p)
	if !o.OK() {
		return Effects{}, o
	}
	if changed && s.cfg.Persister != nil && (c.aptpl || s.c.aptpl) {
		var img []byte
		if c.aptpl {
			img = c.image()
		}
		if err := s.cfg.Persister.Persist(img); err != nil {
			s.log.Warn("persistent reservation state not saved", "err", err)
			return Effects{}, outcome(InternalTargetFailure)
		}
	}
	if changed {
		s.log.Debug("persistent reserve out", "sa", sa, "initiator", n.InitiatorPortID,
			"target", n.TargetPortID, "gen", c.gen, "regs", len(c.regs))
	}
	s.c = c
	s.noteLocked()
	return eff, good
}

// outOp is one PERSISTENT RESERVE OUT being applied to a copy of the state.
type outOp struct {
	c     *core
	cfg   *Config
	n     Nexus
	k     nexusKey
	p     Params
	scope uint8
	typ   Type
	eff   Effects
}

func (op *outOp) ua(r *registration, code uint16) {
	op.eff.UnitAttentions = append(op.eff.UnitAttentions, UnitAttention{
		To: r.set(op.k), ASC: uint8(code >> 8), ASCQ: uint8(code),
	})
}

// checkScopeType validates SCOPE and TYPE for the actions that use them.
func (op *outOp) checkScopeType() Outcome {
	if op.scope != ScopeLU {
		return badCDB(2, 7)
	}
	if !op.typ.Valid() {
		return badCDB(2, 3)
	}
	return good
}

// self returns the issuing nexus's registration and checks RESERVATION KEY
// against it: RESERVATION CONFLICT if unregistered or different.
func (op *outOp) self() (*registration, Outcome) {
	r := op.c.find(op.k)
	if r == nil || r.key != op.p.ReservationKey {
		return nil, conflict
	}
	return r, good
}

// afterRemoval restores the reservation invariants once registrations are
// gone: an all-registrants reservation ends with its last registrant and
// otherwise names a remaining one; another reservation ends with its
// holder. It returns the type of a reservation it ended (0 if none).
func (c *core) afterRemoval() Type {
	if c.res == nil {
		return 0
	}
	if c.byID(c.res.holder) != nil {
		return 0
	}
	t := c.res.typ
	if t.AllRegistrants() && len(c.regs) > 0 {
		c.res.holder = c.regs[0].id
		return 0
	}
	c.res = nil
	return t
}

// register is REGISTER (ignore=false) and REGISTER AND IGNORE EXISTING KEY
// (ignore=true), SPC-4 §5.13.7, tables 47 and 48, with SPEC_I_PT (§6.16.3):
// only from an unregistered nexus (INVALID FIELD IN PARAMETER LIST
// otherwise, as Linux LIO answers); all registrations are made or none.
func (op *outOp) register(ignore bool) (bool, Outcome) {
	c, p := op.c, op.p
	r := c.find(op.k)
	if r == nil {
		if !ignore && p.ReservationKey != 0 {
			return false, conflict
		}
		if p.ServiceActionKey == 0 {
			return false, good
		}
		// The issuing nexus, then with SPEC_I_PT each TransportID's
		// initiator port through the same target port (or all ports with
		// ALL_TG_PT). Initiator ports already registered there are skipped.
		type port struct {
			initiator string
			tid       []byte
		}
		ports := []port{{op.k.initiator, op.n.TransportID}}
		off := uint16(28)
		for _, t := range p.TransportIDs {
			ini, ok := op.cfg.ParseTransportID(t)
			if !ok || ini == "" {
				return false, badParamByte(off)
			}
			ports = append(ports, port{ini, t})
			off += uint16(len(t))
		}
		for _, pt := range ports {
			k := nexusKey{pt.initiator, op.k.target}
			if c.find(k) != nil {
				continue
			}
			if len(c.regs) >= op.cfg.MaxRegistrations {
				return false, outcome(InsufficientRegistrationResources)
			}
			nr := registration{
				id: c.nextID, key: p.ServiceActionKey, initiator: k.initiator,
				target: k.target, rtpi: op.n.RelativeTargetPort,
				transportID: bytes.Clone(pt.tid),
			}
			if p.AllTgPt {
				nr.allTgPt, nr.target = true, ""
			}
			c.nextID++
			c.regs = append(c.regs, nr)
		}
	} else {
		if !ignore && p.ReservationKey != r.key {
			return false, conflict
		}
		if p.SpecIPT {
			return false, badParam(20, 3)
		}
		if p.ServiceActionKey != 0 {
			r.key = p.ServiceActionKey
		} else {
			op.unregister(r.id)
		}
	}
	c.aptpl = p.APTPL
	c.gen++
	return true, good
}

// unregister removes the issuing nexus's registration (SPC-4 §5.13.11.3),
// releasing a reservation it held alone; releasing a registrants-only
// reservation this way tells the other registrants RESERVATIONS RELEASED.
func (op *outOp) unregister(id uint64) {
	c := op.c
	c.remove(func(r *registration) bool { return r.id == id })
	if t := c.afterRemoval(); t.RegistrantsOnly() {
		for i := range c.regs {
			op.ua(&c.regs[i], ReservationsReleased)
		}
	}
}

// reserve is RESERVE, SPC-4 §5.13.9. The reservation key is verified
// before SCOPE and TYPE ("regardless of the SERVICE ACTION and SCOPE field
// values", §6.16.2).
func (op *outOp) reserve() (bool, Outcome) {
	c := op.c
	r, o := op.self()
	if !o.OK() {
		return false, o
	}
	if o := op.checkScopeType(); !o.OK() {
		return false, o
	}
	switch {
	case c.res == nil:
		c.res = &reservation{holder: r.id, typ: op.typ}
		return true, good
	case c.isHolder(r) && c.res.typ == op.typ:
		return false, good
	default:
		return false, conflict
	}
}

// release is RELEASE, SPC-4 §5.13.11.2.
func (op *outOp) release() (bool, Outcome) {
	c := op.c
	r, o := op.self()
	if !o.OK() {
		return false, o
	}
	if c.res == nil || !c.isHolder(r) {
		return false, good
	}
	if op.scope != ScopeLU || op.typ != c.res.typ {
		return false, outcome(InvalidReleaseOfPersistentReservation)
	}
	t := c.res.typ
	c.res = nil
	if t.RegistrantsOnly() || t.AllRegistrants() {
		for i := range c.regs {
			if c.regs[i].id != r.id {
				op.ua(&c.regs[i], ReservationsReleased)
			}
		}
	}
	return true, good
}

// clear is CLEAR, SPC-4 §5.13.11.6.
func (op *outOp) clear() (bool, Outcome) {
	c := op.c
	r, o := op.self()
	if !o.OK() {
		return false, o
	}
	for i := range c.regs {
		if c.regs[i].id != r.id {
			op.ua(&c.regs[i], ReservationsPreempted)
		}
	}
	c.regs = nil
	c.res = nil
	c.gen++
	return true, good
}

// preempt is PREEMPT and PREEMPT AND ABORT, SPC-4 §5.13.11.4 and
// §5.13.11.5.
func (op *outOp) preempt(abort bool) (bool, Outcome) {
	c, p := op.c, op.p
	r, o := op.self()
	if !o.OK() {
		return false, o
	}
	me := r.id
	res := c.res
	var gone []registration
	preemptsHolder := res != nil &&
		((res.typ.AllRegistrants() && p.ServiceActionKey == 0) ||
			(!res.typ.AllRegistrants() && p.ServiceActionKey == c.byID(res.holder).key))
	if preemptsHolder {
		// §5.13.11.4.3: take over the reservation.
		if o := op.checkScopeType(); !o.OK() {
			return false, o
		}
		old := res.typ
		if old.AllRegistrants() {
			gone = c.remove(func(x *registration) bool { return x.id != me })
		} else {
			gone = c.remove(func(x *registration) bool { return x.key == p.ServiceActionKey && x.id != me })
		}
		c.res = &reservation{holder: me, typ: op.typ}
		for i := range gone {
			op.ua(&gone[i], RegistrationsPreempted)
		}
		if op.typ != old {
			for i := range c.regs {
				if c.regs[i].id != me {
					op.ua(&c.regs[i], ReservationsReleased)
				}
			}
		}
	} else {
		// §5.13.11.4.4: remove registrations only.
		if p.ServiceActionKey == 0 {
			return false, badParam(8, 7)
		}
		gone = c.remove(func(x *registration) bool { return x.key == p.ServiceActionKey })
		if len(gone) == 0 {
			return false, conflict
		}
		c.afterRemoval()
		for i := range gone {
			if gone[i].id != me {
				op.ua(&gone[i], RegistrationsPreempted)
			}
		}
	}
	if abort {
		for i := range gone {
			if gone[i].id != me {
				op.eff.Abort = append(op.eff.Abort, gone[i].set(op.k))
			}
		}
	}
	c.gen++
	return true, good
}

// registerAndMove is REGISTER AND MOVE, SPC-4 §5.13.8, table 49.
func (op *outOp) registerAndMove() (bool, Outcome) {
	c, p := op.c, op.p
	r, o := op.self()
	if !o.OK() {
		return false, o
	}
	me := r.id
	if p.ServiceActionKey == 0 {
		return false, badParam(8, 7)
	}
	var tp string
	ok := false
	if op.cfg.TargetPort != nil {
		tp, ok = op.cfg.TargetPort(p.RelativeTargetPort)
	} else if p.RelativeTargetPort == op.n.RelativeTargetPort {
		tp, ok = op.n.TargetPortID, true
	}
	if !ok {
		return false, badParam(18, 7)
	}
	ini, ok := op.cfg.ParseTransportID(p.TransportID)
	if !ok || ini == "" {
		return false, badParam(24, 7)
	}
	if ini == op.k.initiator {
		return false, badParam(24, 7)
	}
	if c.res == nil {
		return false, badCDB(1, 4)
	}
	if !c.isHolder(r) || c.res.typ.AllRegistrants() {
		return false, conflict
	}
	dk := nexusKey{ini, tp}
	dest := c.find(dk)
	if dest == nil {
		if len(c.regs) >= op.cfg.MaxRegistrations {
			return false, outcome(InsufficientRegistrationResources)
		}
		c.regs = append(c.regs, registration{
			id: c.nextID, key: p.ServiceActionKey, initiator: ini, target: tp,
			rtpi: p.RelativeTargetPort, transportID: bytes.Clone(p.TransportID),
		})
		c.nextID++
		dest = &c.regs[len(c.regs)-1]
	} else {
		dest.key = p.ServiceActionKey
	}
	c.res.holder = dest.id
	if p.Unreg {
		c.remove(func(x *registration) bool { return x.id == me })
	}
	c.aptpl = p.APTPL
	c.gen++
	return true, good
}
