// Package scsi is the SCSI target core: it parses CDBs through one opcode
// table, emulates SPC-4 and SBC-3 commands on top of backstores, builds sense
// data, keeps unit attentions per I_T nexus, orders tasks by their task
// attribute and performs task management functions. It plays the part of
// Linux LIO's target core (target_core_transport.c, target_core_spc.c,
// target_core_sbc.c); a fabric such as the SRP target reaches it through
// Session (fabric.go).
package scsi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Clock supplies the current time; tests inject a manual clock.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// elapsed is the time since the target was made, by its clock: the
// command durations an Observer is given are differences of two. With
// the system clock it is one read of the monotonic clock (time.Since of
// a time that carries a monotonic reading); time.Now reads the wall clock
// too, and a command would take four reads instead of two.
func (t *Target) elapsed() time.Duration {
	if _, ok := t.clock.(systemClock); ok {
		return time.Since(t.epoch)
	}
	return t.clock.Now().Sub(t.epoch)
}

// ProtocolSRP is the SCSI transport protocol identifier of SRP
// (SPC-4 §7.6.1, table 362).
const ProtocolSRP = 0x4

// TargetConfig configures a Target.
type TargetConfig struct {
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Clock is the time source (REPORT TIMESTAMP); nil means the system
	// clock.
	Clock Clock
	// ProtocolID is the SCSI transport protocol identifier reported in
	// device identification designators (SPC-4 §7.6.1); 0 means SRP (4).
	ProtocolID uint8
	// TargetPortGroup is the identifier of the target's own target port
	// group, reported in VPD page 83h and REPORT TARGET PORT GROUPS (SPC-4
	// §6.37); every port of the target is in it. LIO's default group is 0.
	// Its state starts active/optimized; SetPortGroups configures it and
	// the groups of other gateways.
	TargetPortGroup uint16
	// RelativeTargetPorts lists the relative target port identifiers of the
	// target's ports for REPORT TARGET PORT GROUPS. When empty, the ports of
	// the nexuses seen so far are reported.
	RelativeTargetPorts []uint16
}

// Target is a SCSI target device: a set of logical units addressed by LUN,
// shared by every I_T nexus (session). Safe for concurrent use.
type Target struct {
	cfg    TargetConfig
	log    *slog.Logger
	clock  Clock
	epoch  time.Time // the clock's time when the target was made (elapsed)
	ops    *opTable
	protID uint8

	mu       sync.Mutex                              // guards luns writes, sessions, nexusRef, ports
	luns     atomic.Pointer[map[uint64]*LogicalUnit] // LUN number → LU; copy on write
	sessions map[*session]struct{}
	nexusRef map[string]int // nexus key → open sessions
	ports    map[uint16]struct{}

	// alua is the ALUA view (alua.go): read lock-free on every command,
	// replaced under aluaMu.
	alua   atomic.Pointer[aluaGroups]
	aluaMu sync.Mutex

	// hooks are set only by tests, before any session exists.
	hooks struct {
		// beforeEnter runs in Execute after the command's tag is registered
		// and its checks passed, just before it enters the task set.
		beforeEnter func(*task)
		// afterAbort runs in TaskManagement after the tasks are marked
		// aborted, before they are waited for.
		afterAbort func()
	}
}

// NewTarget returns a Target with no logical units.
func NewTarget(cfg TargetConfig) *Target {
	t := &Target{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		protID:   cfg.ProtocolID,
		sessions: make(map[*session]struct{}),
		nexusRef: make(map[string]int),
		ports:    make(map[uint16]struct{}),
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.clock == nil {
		t.clock = systemClock{}
	}
	t.epoch = t.clock.Now()
	if t.protID == 0 {
		t.protID = ProtocolSRP
	}
	for _, p := range cfg.RelativeTargetPorts {
		t.ports[p] = struct{}{}
	}
	m := map[uint64]*LogicalUnit{}
	t.luns.Store(&m)
	g, _ := newALUAGroups(cfg.TargetPortGroup, nil) // one group: cannot fail
	t.alua.Store(g)
	t.ops = buildOpTable()
	return t
}

// MaxLUN is the largest LUN number the core addresses: SAM-5 single level
// flat space addressing (§4.7.7) has 14 bits.
const MaxLUN = 0x3FFF

// Errors returned by AddLUN and RemoveLUN.
var (
	ErrLUNExists   = errors.New("scsi: LUN already in use")
	ErrNoSuchLUN   = errors.New("scsi: no such LUN")
	ErrLUNRange    = errors.New("scsi: LUN number out of range (0..16383)")
	ErrLUAttached  = errors.New("scsi: logical unit already attached to a target")
	ErrNoBackstore = errors.New("scsi: LUConfig.Backstore is nil")
)

// AddLUN makes lu reachable as LUN number lun (0..MaxLUN; see EncodeLUN for
// the wire form). Every open nexus gets a REPORTED LUNS DATA HAS CHANGED
// unit attention (SPC-4 §6.33) on the logical units it already uses.
func (t *Target) AddLUN(lun uint64, lu *LogicalUnit) error {
	if lun > MaxLUN {
		return ErrLUNRange
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.luns.Load()
	if _, ok := old[lun]; ok {
		return ErrLUNExists
	}
	if !lu.attached.CompareAndSwap(false, true) {
		return ErrLUAttached
	}
	if lu.cfg.Logger == nil {
		lu.log.Store(t.log.With("lun", lun))
	}
	m := maps.Clone(old)
	m[lun] = lu
	t.luns.Store(&m)
	for _, other := range old {
		other.uaAllExisting(ReasonUALUNsChanged, "")
	}
	t.log.Debug("scsi: LUN added", "lun", lun)
	return nil
}

// RemoveLUN detaches LUN number lun. Commands already running on it finish;
// later commands get LOGICAL UNIT NOT SUPPORTED. The other logical units
// report REPORTED LUNS DATA HAS CHANGED to their nexuses. The backstore is
// not closed.
func (t *Target) RemoveLUN(lun uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.luns.Load()
	lu, ok := old[lun]
	if !ok {
		return ErrNoSuchLUN
	}
	m := maps.Clone(old)
	delete(m, lun)
	t.luns.Store(&m)
	lu.attached.Store(false)
	for _, other := range m {
		other.uaAllExisting(ReasonUALUNsChanged, "")
	}
	t.log.Debug("scsi: LUN removed", "lun", lun)
	return nil
}

// LUNs returns the configured LUN numbers in increasing order.
func (t *Target) LUNs() []uint64 {
	return slices.Sorted(maps.Keys(*t.luns.Load()))
}

// LogicalUnit returns the logical unit at LUN number lun, or nil.
func (t *Target) LogicalUnit(lun uint64) *LogicalUnit {
	return (*t.luns.Load())[lun]
}

func (t *Target) lookup(lun uint64) *LogicalUnit {
	return (*t.luns.Load())[lun]
}

// EncodeLUN returns the 8-byte SAM LUN field, as a big-endian integer, for
// LUN number n (SAM-5 §4.7: peripheral device addressing for n < 256, flat
// space addressing otherwise) — what Linux int_to_scsilun produces.
func EncodeLUN(n uint64) uint64 {
	if n < 256 {
		return n << 48
	}
	return (0x4000 | (n & 0x3FFF)) << 48
}

// DecodeLUN returns the LUN number of an 8-byte SAM LUN field; ok is false
// for addressing methods and levels the core does not serve.
func DecodeLUN(field uint64) (n uint64, ok bool) {
	if field&0x0000FFFFFFFFFFFF != 0 {
		return 0, false
	}
	hi := field >> 48
	switch hi >> 14 {
	case 0: // peripheral device addressing, bus identifier must be 0
		if hi>>8 != 0 {
			return 0, false
		}
		return hi & 0xFF, true
	case 1: // flat space addressing
		return hi & 0x3FFF, true
	}
	return 0, false
}

// NewSession opens the core's side of I_T nexus n. The session lives until
// Close. Sessions for the same nexus share its unit attentions.
func (t *Target) NewSession(n Nexus) Session { return t.OpenSession(n, View{}) }

func (t *Target) newSession(n Nexus) *session {
	s := &session{t: t, nexus: n, key: nexusKey(n), tags: make(map[uint64]*task), seen: make(map[*LogicalUnit]struct{})}
	t.mu.Lock()
	t.sessions[s] = struct{}{}
	t.nexusRef[s.key]++
	if n.RelativeTargetPort != 0 {
		t.ports[n.RelativeTargetPort] = struct{}{}
	}
	t.mu.Unlock()
	return s
}

func (t *Target) targetPorts() []uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.ports))
}

func nexusKey(n Nexus) string {
	return n.InitiatorPortID + "\x00" + n.TargetPortID
}

// session implements Session for one I_T nexus.
type session struct {
	t     *Target
	nexus Nexus
	key   string

	mu     sync.Mutex
	tags   map[uint64]*task // outstanding commands by tag
	closed bool
	// seen holds the logical units this session reached; their unit
	// attention entry for the nexus exists (takeUAFast).
	seen map[*LogicalUnit]struct{}

	// The nexus's view (OpenSession); fixed for the session's life.
	mapped bool              // view applies (else every LU under its own number)
	view   map[uint64]uint64 // initiator LUN number → target LUN number
	ro     map[uint64]bool   // initiator LUN numbers that are read-only
}

// Close implements Session: outstanding commands are aborted (silently) and
// waited for, and the nexus's unit attention state is dropped when its last
// session closes (the next nexus sees POWER ON, RESET again).
func (s *session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	tasks := slices.Collect(maps.Values(s.tags))
	s.mu.Unlock()
	for _, tk := range tasks {
		tk.ts.abort(tk, false)
	}
	for _, tk := range tasks {
		tk.ts.waitDone(context.Background(), tk)
	}
	t := s.t
	t.mu.Lock()
	delete(t.sessions, s)
	t.nexusRef[s.key]--
	last := t.nexusRef[s.key] == 0
	if last {
		delete(t.nexusRef, s.key)
	}
	luns := *t.luns.Load()
	t.mu.Unlock()
	if last {
		for _, lu := range luns {
			lu.dropNexus(s.nexus)
		}
	}
}

// String names the session for logs.
func (s *session) String() string {
	return fmt.Sprintf("%s->%s", s.nexus.InitiatorPortID, s.nexus.TargetPortID)
}
