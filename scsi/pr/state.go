package pr

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// Config configures a State. The zero value is valid: no persistence (PTPL_C=0),
// DefaultMaxRegistrations, SRP TransportIDs, and REGISTER AND MOVE only to the
// target port the command arrived on.
type Config struct {
	// Persister stores the state while APTPL is active. Nil means the logical
	// unit cannot persist through power loss: REPORT CAPABILITIES reports
	// PTPL_C=0 and APTPL=1 is refused with INVALID FIELD IN PARAMETER LIST.
	Persister Persister
	// MaxRegistrations bounds the number of registrations; beyond it REGISTER
	// and REGISTER AND MOVE get INSUFFICIENT REGISTRATION RESOURCES. Zero
	// means DefaultMaxRegistrations.
	MaxRegistrations int
	// ParseTransportID decodes the TransportID of a REGISTER AND MOVE
	// parameter list (SPC-4 §7.6.4) into the initiator port ID used in Nexus.
	// b holds the TRANSPORTID PARAMETER DATA LENGTH bytes. It returns false if
	// b is not a TransportID this logical unit's transport accepts. Nil means
	// ParseSRPTransportID.
	ParseTransportID func(b []byte) (initiatorPortID string, ok bool)
	// TargetPort maps a RELATIVE TARGET PORT IDENTIFIER to the target port ID
	// used in Nexus, for REGISTER AND MOVE; false if no such port reaches this
	// logical unit. Nil accepts only the relative port of the issuing nexus.
	TargetPort func(rtpi uint16) (targetPortID string, ok bool)
	// Logger receives one Debug line per state change and Warn lines for
	// persistence failures. Nil discards.
	Logger *slog.Logger
	// Shared, when set, holds the registrations, the persistent reservation
	// and PRgeneration for every gateway exporting the logical unit (see
	// SharedStore); it also makes them persist through power loss, so the
	// Persister is not used.
	Shared SharedStore
}

// DefaultMaxRegistrations is the registration limit when
// Config.MaxRegistrations is zero.
const DefaultMaxRegistrations = 1024

// State is the reservation state of one logical unit: registrations, the
// persistent reservation, PRgeneration, APTPL, and the SPC-2 reservation.
// Create it with New. All methods are safe for concurrent use.
type State struct {
	cfg Config
	log *slog.Logger

	mu  sync.Mutex
	c   core      // persistent reservations; replaced whole on each change
	rsv *nexusKey // SPC-2 reservation holder, nil if none

	// sharedVer is the version of Config.Shared's image that c holds.
	sharedVer uint64
	// stale is set by Invalidate (another gateway changed the shared image)
	// and cleared by refreshLocked; Check reads it without the lock.
	stale atomic.Bool

	// reserved is true while an SPC-2 or persistent reservation exists; Check
	// reads it without the lock so that unreserved logical units pay one
	// atomic load per command. Written under mu by noteLocked.
	reserved atomic.Bool
}

// noteLocked refreshes s.reserved after a change; s.mu must be held.
func (s *State) noteLocked() { s.reserved.Store(s.rsv != nil || s.c.res != nil) }

// nexusKey is the identity of an I_T nexus for reservation purposes.
type nexusKey struct {
	initiator, target string
}

func keyOf(n Nexus) nexusKey { return nexusKey{n.InitiatorPortID, n.TargetPortID} }

// registration is one entry of the registration table (SPC-4 §5.13.7).
type registration struct {
	id          uint64 // unique within a State, never reused
	key         uint64 // reservation key, never zero
	initiator   string
	target      string // "" for ALL_TG_PT
	allTgPt     bool
	rtpi        uint16
	transportID []byte // immutable once stored
}

func (r *registration) set(except nexusKey) NexusSet {
	s := NexusSet{InitiatorPortID: r.initiator, TargetPortID: r.target}
	if r.allTgPt && except.initiator == r.initiator {
		s.ExceptTargetPortID = except.target
	}
	return s
}

// reservation is the persistent reservation (SPC-4 §5.13.10).
type reservation struct {
	holder uint64 // registration id; any registrant holds types 7 and 8
	typ    Type
}

// core is the persistent-reservation part of State, copied before every
// change so that a failed persist leaves the old state in place.
type core struct {
	regs   []registration // in registration order
	res    *reservation
	gen    uint32 // PRgeneration (SPC-4 §6.15.2)
	aptpl  bool   // last valid APTPL bit received
	nextID uint64
}

func (c *core) clone() core {
	d := *c
	d.regs = append([]registration(nil), c.regs...)
	if c.res != nil {
		r := *c.res
		d.res = &r
	}
	return d
}

// find returns the registration that applies to nexus k: its own, else its
// initiator port's ALL_TG_PT registration; nil if unregistered.
func (c *core) find(k nexusKey) *registration {
	var atp *registration
	for i := range c.regs {
		r := &c.regs[i]
		if r.initiator != k.initiator {
			continue
		}
		if !r.allTgPt && r.target == k.target {
			return r
		}
		if r.allTgPt {
			atp = r
		}
	}
	return atp
}

func (c *core) byID(id uint64) *registration {
	for i := range c.regs {
		if c.regs[i].id == id {
			return &c.regs[i]
		}
	}
	return nil
}

// isHolder reports whether r holds the persistent reservation.
func (c *core) isHolder(r *registration) bool {
	if c.res == nil || r == nil {
		return false
	}
	return c.res.typ.AllRegistrants() || c.res.holder == r.id
}

// remove deletes the registrations for which drop is true and returns them.
// It does not touch the reservation.
func (c *core) remove(drop func(*registration) bool) []registration {
	var gone []registration
	kept := c.regs[:0]
	for _, r := range c.regs {
		if drop(&r) {
			gone = append(gone, r)
		} else {
			kept = append(kept, r)
		}
	}
	c.regs = kept
	return gone
}

// New returns the state of a logical unit with no registrations and no
// reservation. To restore persisted state, call Load (or File.Restore)
// before the logical unit is exposed.
func New(cfg Config) *State {
	if cfg.MaxRegistrations <= 0 {
		cfg.MaxRegistrations = DefaultMaxRegistrations
	}
	if cfg.ParseTransportID == nil {
		cfg.ParseTransportID = ParseSRPTransportID
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &State{cfg: cfg, log: log, c: core{nextID: 1}}
}

// Check decides whether a command of class cl from nexus n may run now, given
// the SPC-2 reservation (SPC-2 §5.5.1 and annex B, column "addressed logical
// unit is reserved by another initiator") and the persistent reservation
// (SPC-4 §5.13.1 table 45 and SBC-3 §4.17 table 13, "persistent reservation
// held by another I_T nexus"). It returns OK or ReservationConflict.
//
// For ClassPersistentReserve and ClassReserveRelease it returns OK: In, Out,
// Reserve and Release apply those commands' own rules.
func (s *State) Check(n Nexus, cl Class) Outcome {
	switch cl {
	case ClassPersistentReserve, ClassReserveRelease:
		return good
	}
	if !s.reserved.Load() && !s.stale.Load() {
		return good
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale.Load() {
		if err := s.refreshLocked(); err != nil {
			// The last state read stays in force; the next command retries.
			s.log.Warn("shared persistent reservation state not read", "err", err)
			s.stale.Store(true)
		}
	}
	k := keyOf(n)
	if s.rsv != nil && *s.rsv != k {
		if cl == ClassUnrestricted {
			return good
		}
		return conflict
	}
	c := &s.c
	if c.res == nil {
		return good
	}
	reg := c.find(k)
	if c.isHolder(reg) {
		return good
	}
	t := c.res.typ
	switch cl {
	case ClassUnrestricted, ClassAllowed:
		return good
	case ClassRead:
		// Allowed under the write-exclusive types from anyone; under the
		// exclusive-access types only from registrants of RO/AR types.
		if t.writeExclusive() || (t != ExclusiveAccess && reg != nil) {
			return good
		}
		return conflict
	default: // ClassWrite
		if t != WriteExclusive && t != ExclusiveAccess && reg != nil {
			return good
		}
		return conflict
	}
}

// Reserve performs RESERVE(6) (CDB opcode 16h) or RESERVE(10) (56h) from n
// (SPC-2 §7.21, §7.22). Only whole-logical-unit reservations are supported:
// an extent (RESERVE(6) byte 1 bit 0) or third-party (byte 1 bit 4)
// reservation gets INVALID FIELD IN CDB.
//
// While any persistent reservation registration exists, the SPC-4 §5.13.3
// exceptions apply: from the persistent reservation holder, or from a
// registrant under a registrants-only or all-registrants reservation, the
// command completes with GOOD and changes nothing; otherwise RESERVATION
// CONFLICT. A reservation held by another nexus gives RESERVATION CONFLICT;
// from the holder it is GOOD.
func (s *State) Reserve(n Nexus, cdb []byte) Outcome {
	return s.spc2(n, cdb, OpReserve6, OpReserve10, func(k nexusKey) Outcome {
		if s.rsv != nil && *s.rsv != k {
			return conflict
		}
		s.rsv = &k
		s.noteLocked()
		s.log.Debug("SPC-2 reserve", "initiator", k.initiator, "target", k.target)
		return good
	})
}

// Release performs RELEASE(6) (CDB opcode 17h) or RELEASE(10) (57h) from n
// (SPC-2 §7.23, §7.24): the holder's reservation is released; from any other
// nexus, or with no reservation, it completes with GOOD and changes nothing.
// Third-party release (RELEASE(10) byte 1 bit 4) gets INVALID FIELD IN CDB.
// The SPC-4 §5.13.3 exceptions apply as for Reserve.
func (s *State) Release(n Nexus, cdb []byte) Outcome {
	return s.spc2(n, cdb, OpRelease6, OpRelease10, func(k nexusKey) Outcome {
		if s.rsv != nil && *s.rsv == k {
			s.rsv = nil
			s.noteLocked()
			s.log.Debug("SPC-2 release", "initiator", k.initiator, "target", k.target)
		}
		return good
	})
}

// spc2 is the common part of RESERVE and RELEASE: the CDB check (op6 and
// op10 are the accepted opcodes; the 6-byte form's extent bit, byte 1 bit
// 0, and the 10-byte form's third-party bit, byte 1 bit 4, are INVALID
// FIELD IN CDB), then, with s.mu held, the SPC-4 §5.13.3 exceptions, and
// only when no registration exists apply(k) for the requesting nexus.
func (s *State) spc2(n Nexus, cdb []byte, op6, op10 byte, apply func(k nexusKey) Outcome) Outcome {
	if len(cdb) < 6 {
		return badCDB(0, 7)
	}
	switch cdb[0] {
	case op6:
		if cdb[1]&0x01 != 0 {
			return badCDB(1, 0)
		}
	case op10:
		if len(cdb) < 10 {
			return badCDB(0, 7)
		}
		if cdb[1]&0x10 != 0 {
			return badCDB(1, 4)
		}
	default:
		return badCDB(0, 7)
	}
	k := keyOf(n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, done := s.spc2Exception(k); done {
		return o
	}
	return apply(k)
}

// spc2Exception applies SPC-4 §5.13.3 to RESERVE and RELEASE: with any
// registration present the command either succeeds without effect or
// conflicts. done is false when no registration exists (plain SPC-2 rules).
func (s *State) spc2Exception(k nexusKey) (Outcome, bool) {
	c := &s.c
	if len(c.regs) == 0 {
		return good, false
	}
	reg := c.find(k)
	if reg != nil && c.res != nil && (c.isHolder(reg) || c.res.typ.RegistrantsOnly()) {
		return good, true
	}
	return conflict, true
}

// NexusLost tells the state that I_T nexus n ended (I_T nexus loss, SAM-5
// §6.3.4): an SPC-2 reservation it held is released. Registrations and the
// persistent reservation are unaffected (SPC-4 §5.13.1).
func (s *State) NexusLost(n Nexus) {
	k := keyOf(n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rsv != nil && *s.rsv == k {
		s.rsv = nil
		s.noteLocked()
		s.log.Debug("SPC-2 reservation released by nexus loss", "initiator", k.initiator, "target", k.target)
	}
}

// LUNReset tells the state that a LOGICAL UNIT RESET (or a hard reset)
// happened: the SPC-2 reservation is released (SPC-2 §5.5.1). Persistent
// reservations are unaffected.
func (s *State) LUNReset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rsv = nil
	s.noteLocked()
}

// Generation returns the current PRgeneration (SPC-4 §6.15.2).
func (s *State) Generation() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.gen
}

// APTPL reports whether persistence through power loss is active (PTPL_A).
func (s *State) APTPL() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.aptpl
}
