package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/scsi/pr"
	"github.com/gosrp/gosrp/srp/target"
	"golang.org/x/sys/unix"
)

// origin says where the running configuration came from and where the
// admin API's save writes it.
type origin struct {
	// path is the file read; "" for the embedded default.
	path string
	// savePath is where save writes: path, or DATA_DIR/srptd.toml for the
	// embedded default.
	savePath string
	// managed is true for the embedded default and DATA_DIR/srptd.toml:
	// only these may turn demo mode on implicitly (on loopback listeners).
	managed bool
}

// daemon is the running target: the SCSI core with its logical units, the
// SRP ports, and the configuration that describes them (kept current by
// the admin API, so it can be saved).
type daemon struct {
	log     *slog.Logger
	out     io.Writer // login_info lines
	origin  origin
	dataDir string // "" : none
	ident   *identity

	core *scsi.Target

	mu         sync.Mutex
	cfg        *Config
	demo       bool // demo mode in force
	luns       map[uint64]*lunState
	ports      []*target.Port
	devices    []rdma.Device
	listeners  []rdma.Listener
	bound      []boundPort // per [[port]], from listen to startPorts
	addrs      []net.Addr
	loginLines []string
	claims     []*guidClaim // service GUIDs announced to other srptd processes
	serveWG    sync.WaitGroup
	cancel     context.CancelFunc
}

// lunState is one attached logical unit and its backstore.
type lunState struct {
	sec    LUNSection
	path   string // resolved backstore path
	serial string // VPD 80h in force
	bs     backstore.Backstore
	lock   *os.File // holds the flock on a file or device backstore (lockImage); nil for RAM
	// stopWatch ends the capacity watch of an RBD LUN (watchCapacity); nil
	// for other backstores.
	stopWatch func()
	// res is the reservation state shared with the other gateways of an
	// RBD image; nil for other backstores (the core makes a local one).
	res   *pr.State
	lu    *scsi.LogicalUnit
	stats *lunStats
}

func newDaemon(cfg *Config, org origin, dataDir string, ident *identity, out io.Writer, log *slog.Logger) *daemon {
	d := &daemon{
		log: log, out: out, origin: org, dataDir: dataDir, ident: ident, cfg: cfg,
		luns: map[uint64]*lunState{},
	}
	tc := scsi.TargetConfig{Logger: log.With("layer", "scsi")}
	if cfg.ALUA != nil {
		tc.TargetPortGroup = cfg.ALUA.Group
	}
	d.core = scsi.NewTarget(tc)
	// validate has checked the groups.
	if groups, err := cfg.ALUA.portGroups(); err == nil && groups != nil {
		if err := d.core.SetPortGroups(groups); err != nil {
			log.Error("ALUA groups not set", "err", err)
		}
	}
	// Logged once the ports listen (logDemo): a setup error that stops
	// srptd must not follow a warning about logins.
	d.demo, _, _ = d.demoRule()
	return d
}

// logDemo logs what demoRule decides and returns it.
func (d *daemon) logDemo() bool {
	on, level, msg := d.demoRule()
	if msg != "" {
		d.log.Log(context.Background(), level, msg)
	}
	return on
}

// demoRule is the demo mode rule: an explicit setting (flag or
// configuration) wins; otherwise demo mode is on only for a daemon-managed
// configuration whose every listener is a loopback address. msg (at level)
// says what it means for logins; "" needs no message.
func (d *daemon) demoRule() (on bool, level slog.Level, msg string) {
	if v := d.cfg.Target.DemoMode; v != nil {
		if *v {
			return true, slog.LevelWarn, "demo mode: every initiator is admitted and sees every LUN"
		}
		return false, 0, ""
	}
	if d.origin.managed && loopbackOnly(d.cfg.Ports) {
		return true, slog.LevelInfo, "demo mode on: the default configuration listens on loopback only"
	}
	if len(d.cfg.ACLs) == 0 {
		return false, slog.LevelWarn, "demo mode off and no [[acl]]: every login is refused until an ACL is added (srpctl target acl add) or demo mode is set"
	}
	return false, 0, ""
}

// loopbackOnly reports whether every port listens on loopback addresses
// only (iWARP ports with 127.0.0.0/8, ::1 or localhost).
func loopbackOnly(ports []PortSection) bool {
	for _, p := range ports {
		if p.Transport == "verbs" || len(p.Listen) == 0 {
			return false
		}
		for _, a := range p.Listen {
			h, _, err := net.SplitHostPort(a)
			if err != nil {
				return false
			}
			if h == "localhost" {
				continue
			}
			ip, err := netip.ParseAddr(h)
			if err != nil || !ip.Unmap().IsLoopback() {
				return false
			}
		}
	}
	return true
}

// resolve makes a relative backstore path relative to the data directory
// (when there is one).
func (d *daemon) resolve(p string) string {
	if p == "" || filepath.IsAbs(p) || d.dataDir == "" {
		return p
	}
	return filepath.Join(d.dataDir, p)
}

// attachLUN opens sec's backstore, builds the logical unit and adds it to
// the core. On error nothing stays open. Caller holds d.mu.
func (d *daemon) attachLUN(field string, sec LUNSection) error {
	n := *sec.LUN
	st := &lunState{sec: sec, path: d.resolve(sec.Path), stats: &lunStats{}}
	switch sec.Backstore {
	case "ram":
		st.bs = backstore.NewRAM(int64(sec.Size))
	case "file", "block":
		fi, statErr := os.Stat(st.path)
		switch {
		case !errors.Is(statErr, fs.ErrNotExist):
		case sec.Backstore == "block":
			return ferr(field+".path", "%s: no such block device", st.path)
		case sec.Size == 0 || sec.ReadOnly:
			return ferr(field+".path", "%s does not exist (srptd creates a missing image only with a size, and not read-only)", st.path)
		}
		if statErr == nil {
			if other, ok := d.lunOnFile(fi); ok {
				return ferr(field+".path", "%s is already the backstore of LUN %d", st.path, other)
			}
			if name, ok := d.ownFile(fi); ok {
				return ferr(field+".path", "%s is srptd's own %s, not a backstore", st.path, name)
			}
			// Shrinking an image would discard the data past the new
			// end, which initiators were told is stored.
			if sec.Size > 0 && !sec.ReadOnly && fi.Mode().IsRegular() && fi.Size() > int64(sec.Size) {
				return ferr(field+".size", "%d bytes is less than the %d bytes of %s; srptd does not shrink an image (set size = 0 to use the file's length)", sec.Size, fi.Size(), st.path)
			}
		}
		fb, err := backstore.OpenFile(st.path, backstore.FileOptions{Size: int64(sec.Size), ReadOnly: sec.ReadOnly})
		if err != nil {
			return ferr(field+".path", "%v", err)
		}
		if sec.Backstore == "block" && !fb.IsBlockDevice() {
			_ = fb.Close()
			return ferr(field+".path", "%s is not a block device (use backstore = \"file\")", st.path)
		}
		lock, err := lockImage(st.path, d.sharedImage(sec))
		if err != nil {
			_ = fb.Close()
			return ferr(field+".path", "%v", err)
		}
		st.bs, st.lock = fb, lock
		if errors.Is(statErr, fs.ErrNotExist) && sec.Serial == "" && sec.WWN == "" {
			// A new, empty image is a new disk: a serial stored for an
			// image that is gone would present it as the old one.
			forgot, err := d.ident.forgetLUN(n)
			if err != nil {
				st.release()
				return fmt.Errorf("%s: storing the serial: %w", field, err)
			}
			if forgot {
				d.log.Warn("LUN image was missing: created an empty one, with a new serial", "lun", n, "path", st.path)
			}
		}
	case "rbd":
		bs, serial, res, err := openRBD(sec, d.log.With("lun", n))
		if err != nil {
			return ferr(field+".image", "%s/%s: %v", sec.Pool, sec.Image, err)
		}
		st.bs, st.path, st.res = bs, sec.Pool+"/"+sec.Image, res
		if sec.Serial == "" && sec.WWN == "" {
			sec.Serial = serial
		}
	}
	if bs := lunBlockSize(sec, st.bs); st.bs.Size() < int64(bs) {
		st.release()
		k := ".size"
		if sec.Size == 0 {
			k = ".path"
		}
		return ferr(field+k, "%s holds %d bytes, less than one %d-byte block", lunWhat(st.path), st.bs.Size(), bs)
	} else if sec.Backstore == "file" || sec.Backstore == "block" {
		if err := wholeBlocks(st.path, st.bs.Size(), bs); err != nil {
			st.release()
			return ferr(field+".path", "%v", err)
		}
	}
	st.serial = sec.Serial
	if st.serial == "" && sec.WWN == "" {
		s, err := d.ident.lunSerial(n)
		if err != nil {
			st.release()
			return fmt.Errorf("%s: serial: %w", field, err)
		}
		st.serial = s
	}
	lc := scsi.LUConfig{
		Backstore:  st.bs,
		BlockSize:  uint32(sec.BlockSize),
		Serial:     st.serial,
		ReadOnly:   sec.ReadOnly,
		WriteCache: sec.WriteCache,
		Logger:     d.log.With("lun", n),
	}
	if sec.ThinProvisioning != nil {
		lc.ThinProvisioning = *sec.ThinProvisioning
	} else {
		lc.ThinProvisioning = canDeallocate(st.bs)
	}
	if sec.WWN != "" {
		lc.NAA, _ = parseWWN(sec.WWN)
	}
	if sec.Backstore == "rbd" {
		lc.MaxCompareAndWriteBlocks = 1 // librbd compares and writes one sector
		lc.Reservations = st.res
	}
	lc.Observer = st.stats
	lu, err := scsi.NewLogicalUnit(lc)
	if err != nil {
		st.release()
		return ferr(field, "%v", err)
	}
	for _, m := range slices.Sorted(maps.Keys(d.luns)) {
		if st.serial != "" && d.luns[m].serial == st.serial {
			st.release()
			return ferr(field+".serial", "%q is the serial of LUN %d already (VPD 80h; each logical unit needs its own)", st.serial, m)
		}
		if d.luns[m].lu.NAA() == lu.NAA() {
			st.release()
			k := ".serial"
			if sec.WWN != "" {
				k = ".wwn"
			}
			return ferr(field+k, "gives LUN %d the NAA designator %x (VPD 83h) of LUN %d: initiators and multipath would take the two for one disk; set another %s", n, lu.NAA(), m, k[1:])
		}
	}
	st.lu = lu
	if err := d.core.AddLUN(n, lu); err != nil {
		st.release()
		return ferr(field+".lun", "%v", err)
	}
	d.luns[n] = st
	if sec.Backstore == "rbd" {
		st.stopWatch = watchCapacity(lu, capacityPoll, d.log.With("lun", n))
	}
	d.log.Info("LUN ready", "lun", n, "name", sec.Name, "backstore", sec.Backstore, "path", st.path, "bytes", st.bs.Size(), "serial", lu.Serial())
	return nil
}

// lunOnFile returns the attached LUN whose backstore is the file or device
// fi describes. Caller holds d.mu.
func (d *daemon) lunOnFile(fi os.FileInfo) (uint64, bool) {
	for _, n := range slices.Sorted(maps.Keys(d.luns)) {
		if p := d.luns[n].path; p != "" {
			if ofi, err := os.Stat(p); err == nil && os.SameFile(fi, ofi) {
				return n, true
			}
		}
	}
	return 0, false
}

// ownFile reports whether fi is one of the files srptd keeps in its data
// directory or its configuration file: exported as a LUN, initiators
// would overwrite it.
func (d *daemon) ownFile(fi os.FileInfo) (string, bool) {
	var paths []string
	if d.dataDir != "" {
		for _, n := range []string{"identity.json", "srptd.toml", "lock"} {
			paths = append(paths, filepath.Join(d.dataDir, n))
		}
	}
	paths = append(paths, d.origin.path, d.origin.savePath)
	for _, p := range paths {
		if p == "" {
			continue
		}
		if ofi, err := os.Stat(p); err == nil && os.SameFile(fi, ofi) {
			return filepath.Base(p), true
		}
	}
	return "", false
}

// lunBlockSize is the logical block size sec's logical unit will have, in
// bytes: block_size, else the device's logical block size, else 512 (as
// scsi.NewLogicalUnit chooses).
func lunBlockSize(sec LUNSection, bs backstore.Backstore) int {
	if sec.BlockSize > 0 {
		return sec.BlockSize
	}
	if b, ok := bs.(backstore.BlockSizer); ok && b.LogicalBlockSize() > 0 {
		return b.LogicalBlockSize()
	}
	return defaultBlockSize
}

// wholeBlocks refuses a file or device of size bytes that is not a whole
// number of bs-byte logical blocks. Its logical unit would end at the last
// whole block: the bytes after it, stored in the file, would be out of
// every initiator's reach, and its capacity would silently disagree with
// the file's length.
func wholeBlocks(path string, size int64, bs int) error {
	over := size % int64(bs)
	if over == 0 {
		return nil
	}
	up := size - over + int64(bs)
	msg := fmt.Sprintf("%s holds %d bytes, not a whole number of %d-byte blocks: its last %d bytes would be out of the initiators' reach; extend it to %d bytes (truncate -s %d %s)", path, size, bs, over, up, up, path)
	// A smaller block size that divides the length serves all of it.
	for b := bs / 2; b >= defaultBlockSize; b /= 2 {
		if size%int64(b) == 0 {
			msg += fmt.Sprintf(" or set block_size = %d", b)
			break
		}
	}
	return errors.New(msg)
}

// lunWhat names a backstore in errors: its path, or "the RAM backstore".
func lunWhat(path string) string {
	if path == "" {
		return "the RAM backstore"
	}
	return path
}

// openLUNs attaches every configured LUN.
func (d *daemon) openLUNs() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, l := range d.cfg.LUNs {
		if err := d.attachLUN(fmt.Sprintf("lun[%d]", i), l); err != nil {
			return d.cfg.explain(err)
		}
	}
	return nil
}

// errConflict marks admin requests that clash with the running state.
var errConflict = errors.New("conflict")

// kindError is an admin API error of a kind (errConflict, errNotFound,
// tested with errors.Is) whose text is only its message.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func conflictf(format string, args ...any) error {
	return &kindError{errConflict, fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &kindError{errNotFound, fmt.Sprintf(format, args...)}
}

// AddLUN attaches a new logical unit at run time and adds it to the
// configuration. The initiators' other logical units report REPORTED LUNS
// DATA HAS CHANGED (the SCSI core's AddLUN).
func (d *daemon) AddLUN(sec LUNSection) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sec.Backstore == "" && sec.Path == "" && sec.Size > 0 && d.dataDir != "" {
		sec.Backstore = "file"
	}
	if sec.Backstore == "file" && sec.Path == "" && sec.LUN != nil && d.dataDir != "" {
		sec.Path = fmt.Sprintf("lun%d.img", *sec.LUN)
	}
	if (sec.Backstore == "file" || sec.Backstore == "") && sec.Path == "" && d.dataDir == "" {
		return ferr("lun.path", "required: srptd runs without a data directory to create lun<N>.img in")
	}
	if err := validateLUN("lun", sec); err != nil {
		return err
	}
	if _, ok := d.luns[*sec.LUN]; ok {
		return conflictf("LUN %d exists; remove it first", *sec.LUN)
	}
	if err := d.attachLUN("lun", sec); err != nil {
		return err
	}
	d.cfg.LUNs = append(d.cfg.LUNs, sec)
	return nil
}

// RemoveLUN detaches LUN n: later commands get LOGICAL UNIT NOT SUPPORTED,
// the other logical units report REPORTED LUNS DATA HAS CHANGED; commands
// in progress finish (bounded by ctx) before the backstore is flushed and
// closed. A LUN an ACL maps cannot be removed.
func (d *daemon) RemoveLUN(ctx context.Context, n uint64) error {
	st, err := d.detachLUN(n)
	if err != nil {
		return err
	}
wait:
	for st.stats.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			d.log.Warn("LUN removed with commands still in progress", "lun", n)
			break wait
		case <-time.After(10 * time.Millisecond):
		}
	}
	st.close(d.log)
	if _, err := d.ident.forgetLUN(n); err != nil {
		d.log.Warn("identity not updated", "err", err)
	}
	d.log.Info("LUN removed", "lun", n)
	return nil
}

// detachLUN takes LUN n out of the core, the counters and the
// configuration, and returns it for closing.
func (d *daemon) detachLUN(n uint64) (*lunState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.luns[n]
	if !ok {
		return nil, notFoundf("no LUN %d", n)
	}
	for _, a := range d.cfg.ACLs {
		for _, k := range slices.Sorted(maps.Keys(a.LUNs)) {
			if a.LUNs[k] == n {
				return nil, conflictf("ACL %s maps its LUN %s to LUN %d; remove or change the ACL first", a.Initiator, k, n)
			}
		}
		if len(a.LUNs) == 0 && slices.Contains(a.ReadOnly, n) {
			return nil, conflictf("ACL %s lists LUN %d as read_only; remove or change the ACL first", a.Initiator, n)
		}
	}
	if err := d.core.RemoveLUN(n); err != nil {
		return nil, err
	}
	delete(d.luns, n)
	d.cfg.LUNs = slices.DeleteFunc(d.cfg.LUNs, func(l LUNSection) bool { return *l.LUN == n })
	return st, nil
}

// AddACL admits an initiator from its next login on. Channels the new ACL
// names with a different view than they logged in with get SRP_T_LOGOUT
// (target.Port.SetAccess). demo reports whether demo mode is in force (it
// admits everyone: the ACL restricts nothing until demo mode is off).
func (d *daemon) AddACL(a ACLSection) (demo bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	luns := map[uint64]bool{}
	for n := range d.luns {
		luns[n] = true
	}
	m, err := validateACL("acl", a, luns)
	if err != nil {
		return false, err
	}
	for _, o := range d.cfg.ACLs {
		if om, err := target.ParseInitiator(o.Initiator); err == nil && om.String() == m.String() {
			return false, conflictf("%s has an ACL already", m)
		}
	}
	d.cfg.ACLs = append(d.cfg.ACLs, a)
	d.applyAccessLocked()
	return d.demo, nil
}

// RemoveACL removes the ACL of an initiator (any of the forms
// target.ParseInitiator accepts). Its channels get SRP_T_LOGOUT unless the
// remaining policy admits them with the same view (target.Port.SetAccess).
func (d *daemon) RemoveACL(initiator string) error {
	m, err := target.ParseInitiator(initiator)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.cfg.ACLs)
	d.cfg.ACLs = slices.DeleteFunc(d.cfg.ACLs, func(a ACLSection) bool {
		om, err := target.ParseInitiator(a.Initiator)
		return err == nil && om.String() == m.String()
	})
	if len(d.cfg.ACLs) == n {
		return notFoundf("no ACL for %s", m)
	}
	d.applyAccessLocked()
	return nil
}

var errNotFound = errors.New("not found")

// applyAccessLocked gives the ports the current demo mode and ACLs.
func (d *daemon) applyAccessLocked() {
	acls := d.cfg.targetACLs()
	for _, p := range d.ports {
		p.SetAccess(d.demo, acls)
	}
}

// ACLs returns the [[acl]] sections in force.
func (d *daemon) ACLs() []ACLSection {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.cfg.ACLs)
}

// Save writes the running configuration (atomically) and returns its path
// and, when it left a hand-written file alone, that file. It replaces the
// configuration file when srptd wrote it (its first line is savedHeader),
// keeping the file's mode; a file written by hand, whose comments and
// layout the encoding would lose, stays as it is and the configuration
// goes beside it, FILE.saved. What it writes loads back to the same state.
func (d *daemon) Save() (path, kept string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.origin.savePath == "" {
		return "", "", errors.New("no configuration file to save to (start srptd with --config or a data directory)")
	}
	b, err := d.cfg.Encode()
	if err != nil {
		return "", "", err
	}
	back, err := LoadConfig(string(b), d.origin.savePath)
	if err == nil {
		err = back.Validate()
	}
	if err != nil {
		return "", "", fmt.Errorf("the encoded configuration does not load back: %w", err)
	}
	path, perm := d.origin.savePath, os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
		if !writtenBySave(path) {
			kept, path = path, path+".saved"
		}
	}
	if err := writeFileAtomic(path, b, perm); err != nil {
		return "", "", err
	}
	if kept == "" {
		d.origin.path = path // what SIGHUP re-reads from now on
	}
	d.log.Info("configuration saved", "path", path, "kept", kept)
	return path, kept, nil
}

// writtenBySave reports whether the file at path starts with the header
// Save writes (or wrote before).
func writtenBySave(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	return line == savedHeader || line == savedHeaderV1
}

// listen opens every port's device and binds each of its listen
// addresses, serving none of them yet (startPorts does). It runs before
// srptd creates anything on disk, so an address in use stops srptd with
// an error naming it and nothing left behind. On error, close releases
// what it opened.
func (d *daemon) listen(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, pc := range d.cfg.Ports {
		plog := d.log.With("port", portName(pc, i))
		dev, nodeGUID, err := openDevice(pc, plog)
		if err != nil {
			return fmt.Errorf("port[%d]: %w", i, err)
		}
		d.devices = append(d.devices, dev)
		bp := boundPort{dev: dev, nodeGUID: nodeGUID}
		for _, a := range pc.Listen {
			l, err := dev.Listen(ctx, a)
			if err != nil {
				if coveredByDualStack(a, bp.addrs()) {
					plog.Debug("address already served by a dual-stack listener", "addr", a)
					continue
				}
				return d.cfg.explain(ferr(fmt.Sprintf("port[%d].listen", i), "%s: %v", a, err))
			}
			d.listeners = append(d.listeners, l)
			bp.listeners = append(bp.listeners, l)
		}
		d.bound = append(d.bound, bp)
	}
	return nil
}

// boundPort is one [[port]] between listen and startPorts: its device and
// its bound, not yet served, listeners.
type boundPort struct {
	dev       rdma.Device
	nodeGUID  uint64 // the device's node GUID; 0 for iWARP
	listeners []rdma.Listener
}

// addrs returns the bound addresses.
func (b boundPort) addrs() []net.Addr {
	out := make([]net.Addr, len(b.listeners))
	for i, l := range b.listeners {
		out[i] = l.Addr()
	}
	return out
}

// startPorts creates the SRP ports on the devices and listeners listen
// opened and starts serving them. It prints the login_info lines.
func (d *daemon) startPorts() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	serveCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	for i, pc := range d.cfg.Ports {
		name := portName(pc, i)
		plog := d.log.With("port", name)
		bp := d.bound[i]
		guid := bp.nodeGUID
		if pc.ServiceGUID != "" {
			guid, _ = parseGUID(pc.ServiceGUID)
		} else if guid == 0 {
			var err error
			if guid, err = d.ident.portGUID(name, hostGUID(i, d.dataDir)); err != nil {
				return fmt.Errorf("port[%d]: storing the service GUID: %w", i, err)
			}
		}
		d.claims = append(d.claims, claimGUID(guid, name, d.dataDir, plog))
		tc := d.cfg.targetConfig(guid)
		tc.DemoMode = d.demo
		tc.Name = name
		tc.RelativePort = d.cfg.ALUA.relativePort(i)
		tc.TargetPortName = targetPortName(bp.dev, pc)
		tc.Logger = plog
		p, err := target.NewPort(tc, bp.dev, coreAdapter{t: d.core})
		if err != nil {
			return fmt.Errorf("port[%d]: %w", i, err)
		}
		d.ports = append(d.ports, p)
		for _, l := range bp.listeners {
			d.addrs = append(d.addrs, l.Addr())
			d.serveWG.Add(1)
			go func() {
				defer d.serveWG.Done()
				if err := p.Serve(serveCtx, l); err != nil && serveCtx.Err() == nil {
					plog.Error("listener failed", "addr", l.Addr(), "err", err)
				}
			}()
			plog.Info("listening", "addr", l.Addr(), "transport", bp.dev.Name())
		}
		d.loginLines = append(d.loginLines, loginInfo(guid, bp.addrs())...)
	}
	// Printed once every port listens: a later port's error must not
	// follow login_info lines of a target that then exits.
	for _, line := range d.loginLines {
		fmt.Fprintln(d.out, "login_info:", line)
	}
	return nil
}

// LoginInfo returns the add_target strings of every listener.
func (d *daemon) LoginInfo() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.loginLines)
}

// Ports returns the SRP ports.
func (d *daemon) Ports() []*target.Port {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ports)
}

// stopListening closes the listeners and waits for the accept loops.
func (d *daemon) stopListening() {
	d.mu.Lock()
	if d.cancel != nil {
		d.cancel()
	}
	ls := d.listeners
	d.listeners = nil
	d.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	d.serveWG.Wait()
}

// drain logs every channel out (SRP_T_LOGOUT) and waits for them until ctx
// ends.
func (d *daemon) drain(ctx context.Context) {
	for _, p := range d.Ports() {
		if err := p.Close(ctx); err != nil {
			d.log.Warn("channels did not drain in time", "port", p.Config().Name, "err", err)
		}
	}
}

// close releases everything: listeners, devices, backstores (flushed).
func (d *daemon) close() {
	d.stopListening()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dev := range d.devices {
		_ = dev.Close()
	}
	d.devices = nil
	for _, c := range d.claims {
		c.release()
	}
	d.claims = nil
	for _, n := range slices.Sorted(maps.Keys(d.luns)) {
		d.luns[n].close(d.log)
	}
	d.luns = map[uint64]*lunState{}
}

// release closes the backstore and its lock without flushing (an attach
// that failed).
func (st *lunState) release() {
	if st.stopWatch != nil {
		st.stopWatch()
	}
	_ = st.bs.Close()
	if st.lock != nil {
		_ = st.lock.Close()
	}
}

// close flushes and closes the backstore, then drops its lock.
func (st *lunState) close(log *slog.Logger) {
	if st.stopWatch != nil {
		st.stopWatch()
	}
	closeStore(st.bs, log)
	if st.lock != nil {
		_ = st.lock.Close()
	}
}

// lockImage takes a flock on a backstore file or device through a
// descriptor of its own: exclusive for a writable LUN, shared for a
// read-only one or one exported by several ALUA gateways ([alua]), so two
// srptd processes (or two LUNs) never write one image unless each is a
// gateway of the same logical unit. The lock lasts until the returned file
// is closed.
func lockImage(path string, shared bool) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another srptd (or another LUN)", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// sharedImage reports whether sec's file or device image is locked shared:
// read-only, or exported by an ALUA gateway ([alua]), since the gateways of
// one logical unit on one host export its image together (one page cache
// keeps them coherent) while any other srptd is kept off it.
func (d *daemon) sharedImage(sec LUNSection) bool {
	return sec.ReadOnly || d.cfg.ALUA != nil
}

// closeStore flushes (backstore.Syncer) and closes a backstore.
func closeStore(bs backstore.Backstore, log *slog.Logger) {
	if s, ok := bs.(backstore.Syncer); ok {
		if err := s.Sync(); err != nil {
			log.Error("backstore sync failed", "err", err)
		}
	}
	if err := bs.Close(); err != nil {
		log.Error("backstore close failed", "err", err)
	}
}

// coreAdapter opens SCSI core sessions for the SRP target, each through its
// initiator's view (the ACL's LUN mapping and read-only LUNs).
type coreAdapter struct {
	t *scsi.Target
}

func (a coreAdapter) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return a.t.OpenSession(n, v), nil
}

// canDeallocate reports whether bs can unmap blocks (the default of a LUN's
// thin_provisioning key).
func canDeallocate(bs backstore.Backstore) bool {
	u, ok := bs.(backstore.Unmapper)
	if !ok {
		return false
	}
	if us, ok := u.(backstore.UnmapSupporter); ok {
		return us.UnmapSupported()
	}
	return true
}
