package initiator

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gosrp/gosrp/scsi/sense"
)

// ALUA asymmetric access states as REPORT TARGET PORT GROUPS reports them
// (SPC-4 §6.37, table 307).
const (
	ALUAActiveOptimized    = 0x0
	ALUAActiveNonOptimized = 0x1
	ALUAStandby            = 0x2
	ALUAUnavailable        = 0x3
	ALUATransitioning      = 0xF
)

// DeviceID is what VPD page 83h says about a logical unit and the target
// port a command reached it through (SPC-4 §7.8.6).
type DeviceID struct {
	// LU is the logical unit's first NAA designator (type 3, association
	// logical unit), else its T10 vendor ID designator: the identity that
	// multipathing matches paths by.
	LU []byte
	// RelativePort is the relative target port identifier (type 4) and
	// PortGroup the target port group (type 5), each valid when Has* is set.
	RelativePort, PortGroup       uint16
	HasRelativePort, HasPortGroup bool
}

// ParseDeviceID decodes VPD page 83h (with its 4-byte header). Errors: a
// page that is not 83h or a designator running past the page.
func ParseDeviceID(b []byte) (DeviceID, error) {
	var d DeviceID
	if len(b) < 4 || b[1] != 0x83 {
		return d, errors.New("srp initiator: not a device identification VPD page")
	}
	end := min(len(b), 4+int(binary.BigEndian.Uint16(b[2:])))
	var t10 []byte
	for p := 4; p < end; {
		if p+4 > end || p+4+int(b[p+3]) > end {
			return d, fmt.Errorf("srp initiator: VPD 83h designator at byte %d runs past the page", p)
		}
		assoc, typ, v := (b[p+1]>>4)&3, b[p+1]&0x0F, b[p+4:p+4+int(b[p+3])]
		switch {
		case assoc == 0 && typ == 3 && d.LU == nil:
			d.LU = bytes.Clone(v)
		case assoc == 0 && typ == 1 && t10 == nil:
			t10 = bytes.Clone(v)
		case assoc == 1 && typ == 4 && len(v) >= 4:
			d.RelativePort, d.HasRelativePort = binary.BigEndian.Uint16(v[2:]), true
		case assoc == 1 && typ == 5 && len(v) >= 4:
			d.PortGroup, d.HasPortGroup = binary.BigEndian.Uint16(v[2:]), true
		}
		p += 4 + int(b[p+3])
	}
	if d.LU == nil {
		d.LU = t10
	}
	return d, nil
}

// PortGroupState is one target port group of REPORT TARGET PORT GROUPS.
type PortGroupState struct {
	Group     uint16
	State     uint8 // ALUAActiveOptimized ... ALUATransitioning
	Preferred bool
	Ports     []uint16 // relative target port identifiers
}

// ParseRTPG decodes REPORT TARGET PORT GROUPS parameter data in the
// length-only or extended header format (SPC-4 §6.37).
func ParseRTPG(b []byte) ([]PortGroupState, error) {
	if len(b) < 4 {
		return nil, errors.New("srp initiator: REPORT TARGET PORT GROUPS data shorter than its header")
	}
	end := min(len(b), 4+int(binary.BigEndian.Uint32(b)))
	p := 4
	if len(b) >= 8 && b[4]>>4&7 == 1 {
		p = 8
	}
	var out []PortGroupState
	for p < end {
		if p+8 > end {
			return nil, fmt.Errorf("srp initiator: target port group descriptor at byte %d truncated", p)
		}
		g := PortGroupState{State: b[p] & 0x0F, Preferred: b[p]&0x80 != 0, Group: binary.BigEndian.Uint16(b[p+2:])}
		n := int(b[p+7])
		if p+8+4*n > end {
			return nil, fmt.Errorf("srp initiator: target port group %d's ports run past the data", g.Group)
		}
		for i := 0; i < n; i++ {
			g.Ports = append(g.Ports, binary.BigEndian.Uint16(b[p+8+4*i+2:]))
		}
		out = append(out, g)
		p += 8 + 4*n
	}
	return out, nil
}

// ReportTargetPortGroups sends REPORT TARGET PORT GROUPS (SPC-4 §6.37) and
// decodes the answer.
func (s *Session) ReportTargetPortGroups(ctx context.Context, lun uint64) ([]PortGroupState, error) {
	cdb := []byte{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0} // 4 KiB
	b, err := s.dataIn(ctx, lun, cdb, 4096)
	if err != nil {
		return nil, err
	}
	return ParseRTPG(b)
}

// ErrNoPath is returned by Multipath.Run when no path can carry a command.
var ErrNoPath = errors.New("srp initiator: no usable path")

// ErrNotSameLU is returned by NewMultipath when the sessions do not present
// the same logical unit.
var ErrNotSameLU = errors.New("srp initiator: paths present different logical units")

// Path is one session of a Multipath and what it knows of the path.
type Path struct {
	Session *Session
	Name    string // for logs: the target string, or "path<N>"
	// DeviceID is the path's VPD 83h answer at NewMultipath.
	DeviceID DeviceID
	// Explicit reports explicit ALUA (standard INQUIRY TPGS bit 1): the
	// path's group can be activated with SET TARGET PORT GROUPS.
	Explicit bool

	state  uint8 // the ALUA state of the path's group as last read
	failed bool  // the transport failed; a probe must succeed before use
}

// MultipathOptions tune a Multipath.
type MultipathOptions struct {
	// ProbeInterval is how often failed and non-optimized paths are probed
	// (TEST UNIT READY, REPORT TARGET PORT GROUPS) for failback; default 1 s.
	ProbeInterval time.Duration
	// Logger receives path events; nil discards.
	Logger *slog.Logger
}

// Multipath sends a logical unit's commands over several sessions to
// targets presenting that same logical unit (gateways of one Ceph image),
// as dm-multipath with the ALUA handler does: the path whose target port
// group is active/optimized is used (then active/non-optimized), a command
// that fails because its path's channel is lost or its group refuses it
// (NOT READY 04/0A–0C) is re-issued on another path, a standby path is
// activated with SET TARGET PORT GROUPS when no other path is usable
// (explicit ALUA), and a path that comes back active/optimized is used again
// (failback). Commands must carry their
// data in DataIn/DataOut (a registered Buffer belongs to one session).
// Methods may be called from many goroutines.
type Multipath struct {
	lun  uint64
	opts MultipathOptions
	log  *slog.Logger

	mu      sync.Mutex
	paths   []*Path
	current int // index of the path in use
	stop    chan struct{}
	done    chan struct{}
}

// NewMultipath checks that every session presents the same logical unit at
// lun (VPD 83h identity) and reads each path's ALUA state. The sessions'
// own reconnect settings stay in force; a short FastIOFailTmo on each lets
// a lost path fail over quickly. names label the paths in logs (may be
// nil). Errors: ErrNotSameLU, or a path that cannot answer INQUIRY.
func NewMultipath(ctx context.Context, sessions []*Session, names []string, lun uint64, opts MultipathOptions) (*Multipath, error) {
	if len(sessions) == 0 {
		return nil, errors.New("srp initiator: multipath needs at least one session")
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = time.Second
	}
	m := &Multipath{lun: lun, opts: opts, log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for i, s := range sessions {
		p := &Path{Session: s, Name: fmt.Sprintf("path%d", i)}
		if i < len(names) && names[i] != "" {
			p.Name = names[i]
		}
		b, err := s.Inquiry(ctx, lun, true, 0x83, 1024)
		if err != nil {
			return nil, fmt.Errorf("%s: VPD 83h: %w", p.Name, err)
		}
		if p.DeviceID, err = ParseDeviceID(b); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if std, err := s.Inquiry(ctx, lun, false, 0, 96); err == nil {
			if inq, err := ParseInquiry(std); err == nil {
				p.Explicit = inq.TPGS&2 != 0
			}
		}
		if i > 0 && !bytes.Equal(p.DeviceID.LU, m.paths[0].DeviceID.LU) {
			return nil, fmt.Errorf("%w: %s has LU % x, %s has % x", ErrNotSameLU, m.paths[0].Name, m.paths[0].DeviceID.LU, p.Name, p.DeviceID.LU)
		}
		m.paths = append(m.paths, p)
	}
	for _, p := range m.paths {
		m.refresh(ctx, p)
	}
	m.mu.Lock()
	m.current = m.bestLocked(-1)
	m.mu.Unlock()
	go m.prober()
	return m, nil
}

// refresh re-reads the ALUA state of p's group through p. A path whose
// target does not report groups counts as active/optimized.
func (m *Multipath) refresh(ctx context.Context, p *Path) {
	st := uint8(ALUAActiveOptimized)
	if p.DeviceID.HasPortGroup {
		groups, err := p.Session.ReportTargetPortGroups(ctx, m.lun)
		if err != nil {
			m.log.Debug("srp multipath: REPORT TARGET PORT GROUPS failed", "path", p.Name, "err", err)
			return
		}
		for _, g := range groups {
			if g.Group == p.DeviceID.PortGroup {
				st = g.State
			}
		}
	}
	m.mu.Lock()
	if p.state != st {
		m.log.Info("srp multipath: path state", "path", p.Name, "alua", aluaName(st))
	}
	p.state = st
	m.mu.Unlock()
}

func aluaName(st uint8) string {
	switch st {
	case ALUAActiveOptimized:
		return "active/optimized"
	case ALUAActiveNonOptimized:
		return "active/non-optimized"
	case ALUAStandby:
		return "standby"
	case ALUAUnavailable:
		return "unavailable"
	case ALUATransitioning:
		return "transitioning"
	}
	return fmt.Sprintf("state %#x", st)
}

// rank orders paths: lower is better; -1 means unusable.
func (p *Path) rank() int {
	if p.failed || p.Session.State() != StateRunning {
		return -1
	}
	switch p.state {
	case ALUAActiveOptimized:
		return 0
	case ALUAActiveNonOptimized:
		return 1
	}
	return -1
}

// bestLocked returns the index of the best usable path, preferring the
// current one among equals; -1 if none. exclude is skipped.
func (m *Multipath) bestLocked(exclude int) int {
	best, bestRank := -1, 1<<30
	for i, p := range m.paths {
		if i == exclude {
			continue
		}
		r := p.rank()
		if r < 0 {
			continue
		}
		if r < bestRank || r == bestRank && i == m.current {
			best, bestRank = i, r
		}
	}
	return best
}

// Paths returns the paths (for status reports).
func (m *Multipath) Paths() []*Path { return m.paths }

// Current returns the path commands go to now, or nil.
func (m *Multipath) Current() *Path {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current < 0 {
		return nil
	}
	return m.paths[m.current]
}

// pathFailure classifies a Session.Run error: whether it is the path's
// fault (re-issue elsewhere) and whether the path's transport is gone.
func pathFailure(err error) (retry, transport bool) {
	if errors.Is(err, ErrChannelDown) || errors.Is(err, ErrFastIOFail) || errors.Is(err, ErrDevLoss) || errors.Is(err, ErrClosed) {
		return true, true
	}
	var se *SenseError
	if errors.As(err, &se) {
		switch {
		case se.Key == sense.KeyNotReady && se.ASC == 0x04 && (se.ASCQ == 0x0A || se.ASCQ == 0x0B || se.ASCQ == 0x0C):
			return true, false
		case se.Key == sense.KeyUnitAttention && se.ASC == 0x2A && se.ASCQ == 0x06:
			return true, false
		}
	}
	return false, false
}

// Run executes cmd on the best path and re-issues it on another when the
// path fails it (channel lost, ALUA state refusing it, ASYMMETRIC ACCESS
// STATE CHANGED); other outcomes are returned as Session.Run returns them
// (status folded into the error, unit attentions retried). A NoRetry
// command is not re-issued after its path's channel was lost (it may have
// run). While no path is usable but some session is still reconnecting,
// Run waits (probing every ProbeInterval/4) until ctx ends; once every
// path's session is lost (dev_loss_tmo) or closed it fails with ErrNoPath
// wrapping the last path error. cmd must not use a Buffer.
func (m *Multipath) Run(ctx context.Context, cmd *Command) (Result, error) {
	if cmd.Buffer != nil {
		return Result{}, errors.New("srp initiator: multipath commands carry their data in DataIn/DataOut, not a registered Buffer")
	}
	var lastErr error
	// Bounded: each round either succeeds, returns a final outcome, or
	// marks a path; waiting rounds (all paths transitioning or
	// reconnecting) sleep a probe interval.
	for round := 0; ; round++ {
		m.mu.Lock()
		i := m.bestLocked(-1)
		if i >= 0 && i != m.current {
			if m.current >= 0 {
				m.log.Info("srp multipath: switching path", "from", m.paths[m.current].Name, "to", m.paths[i].Name)
			}
			m.current = i
		}
		m.mu.Unlock()
		if i < 0 {
			if round > 0 && m.allLost() {
				return Result{}, fmt.Errorf("%w: %v", ErrNoPath, lastErr)
			}
			if m.activate(ctx) {
				continue
			}
			select {
			case <-ctx.Done():
				return Result{}, fmt.Errorf("%w: %v", ctx.Err(), lastErr)
			case <-time.After(m.opts.ProbeInterval / 4):
			}
			m.probeAll(ctx)
			continue
		}
		p := m.paths[i]
		res, err := p.Session.Run(ctx, cmd)
		retry, transport := pathFailure(err)
		if !retry || ctx.Err() != nil || transport && cmd.NoRetry {
			// A NoRetry command (COMPARE AND WRITE) may have run on the
			// lost path: the caller decides.
			return res, err
		}
		lastErr = fmt.Errorf("%s: %w", p.Name, err)
		m.log.Warn("srp multipath: path failed a command, re-issuing", "path", p.Name, "err", err)
		if transport {
			m.mu.Lock()
			p.failed = true
			m.mu.Unlock()
		} else {
			m.refresh(ctx, p)
		}
	}
}

// activate makes a standby or unavailable path usable when no path is, as
// Linux scsi_dh_alua does for explicit ALUA: SET TARGET PORT GROUPS (SPC-4
// §6.46) through the path, asking active/optimized for its own group. It
// reports whether a path became usable.
func (m *Multipath) activate(ctx context.Context) bool {
	for _, p := range m.paths {
		m.mu.Lock()
		st, failed := p.state, p.failed
		m.mu.Unlock()
		if failed || !p.Explicit || !p.DeviceID.HasPortGroup || p.Session.State() != StateRunning ||
			(st != ALUAStandby && st != ALUAUnavailable) {
			continue
		}
		param := []byte{0, 0, 0, 0, ALUAActiveOptimized, 0, 0, 0}
		binary.BigEndian.PutUint16(param[6:], p.DeviceID.PortGroup)
		cdb := []byte{0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, byte(len(param)), 0, 0}
		_, err := p.Session.Run(ctx, &Command{LUN: m.lun, CDB: cdb, DataOut: [][]byte{param}})
		if err != nil {
			m.log.Warn("srp multipath: SET TARGET PORT GROUPS failed", "path", p.Name, "group", p.DeviceID.PortGroup, "err", err)
			continue
		}
		m.log.Info("srp multipath: activated a standby path", "path", p.Name, "group", p.DeviceID.PortGroup)
		m.refresh(ctx, p)
		m.mu.Lock()
		usable := p.rank() >= 0
		m.mu.Unlock()
		if usable {
			return true
		}
	}
	return false
}

// allLost reports whether every path's session is lost or closed for good.
func (m *Multipath) allLost() bool {
	for _, p := range m.paths {
		if st := p.Session.State(); st != StateLost && st != StateClosed {
			return false
		}
	}
	return true
}

// probeAll re-checks failed and non-optimized paths: a failed path whose
// session is running again and answers REPORT TARGET PORT GROUPS is usable
// again.
func (m *Multipath) probeAll(ctx context.Context) {
	for _, p := range m.paths {
		m.mu.Lock()
		probe := p.failed || p.state != ALUAActiveOptimized
		m.mu.Unlock()
		if !probe || p.Session.State() != StateRunning {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Session.TestUnitReady(pctx, m.lun)
		var se *SenseError
		if err == nil || errors.As(err, &se) { // the path answers; its state says the rest
			m.mu.Lock()
			if p.failed {
				m.log.Info("srp multipath: path back", "path", p.Name)
			}
			p.failed = false
			m.mu.Unlock()
			m.refresh(pctx, p)
		}
		cancel()
	}
}

// prober probes paths every ProbeInterval until Close, so a path that comes
// back active/optimized takes the I/O back (failback).
func (m *Multipath) prober() {
	defer close(m.done)
	tk := time.NewTicker(m.opts.ProbeInterval)
	defer tk.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	for {
		select {
		case <-m.stop:
			return
		case <-tk.C:
			m.probeAll(ctx)
		}
	}
}

// Close stops probing. The sessions stay the caller's (several Multipaths,
// one per logical unit, may share them).
func (m *Multipath) Close() error {
	close(m.stop)
	<-m.done
	return nil
}
