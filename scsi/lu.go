package scsi

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/pr"
)

// LUConfig configures a LogicalUnit (a direct-access block device, SBC-3).
type LUConfig struct {
	// Backstore holds the data. Required. Its optional interfaces
	// (backstore.Syncer, Unmapper, WriteSamer, Resizer, AllocationStatuser)
	// enable FUA/SYNCHRONIZE CACHE, UNMAP, fast WRITE SAME, Resize and
	// GET LBA STATUS.
	Backstore backstore.Backstore
	// BlockSize is the logical block length in bytes: 512, 1024, 2048 or
	// 4096. 0 means the backstore's native size (block devices: BLKSSZGET)
	// or 512. On a backstore with a native size (backstore.BlockSizer) any
	// other value is an error naming both sizes.
	BlockSize uint32
	// VendorID (8 chars), ProductID (16 chars) and ProductRev (4 chars) are
	// the standard INQUIRY identification, space padded (SPC-4 §6.6.2).
	// Defaults: "GOSRP", "DISK", "0001".
	VendorID, ProductID, ProductRev string
	// Serial is the unit serial number (VPD page 80h), printable ASCII, at
	// most 64 bytes. Default: derived from NAA.
	Serial string
	// NAA is the 16-byte NAA IEEE Registered Extended designator
	// (NAA 6, SPC-4 §7.8.6.6.4) reported in VPD page 83h. When zero it is
	// derived from Serial as LIO does (OUI 00-14-05, LIO's company ID,
	// followed by the serial's hex digits).
	NAA [16]byte
	// ReadOnly makes every medium write fail with DATA PROTECT, WRITE
	// PROTECTED and sets WP in the MODE SENSE header.
	ReadOnly bool
	// Observer, when set, is told of every command addressed to the
	// logical unit, for statistics.
	Observer CommandObserver
	// WriteCache is the initial (default) WCE bit of the caching mode page.
	// With WCE=0 every write is made durable before GOOD is returned.
	WriteCache bool
	// ThinProvisioning advertises logical block provisioning (LBPME, VPD
	// B2h, UNMAP, WRITE SAME with UNMAP). It needs a backstore.Unmapper
	// that, if it is a backstore.UnmapSupporter, reports support (a block
	// device with discard or write zeroes).
	ThinProvisioning bool
	// MaxTransferBytes bounds one READ/WRITE/VERIFY transfer, bytes; the
	// Block Limits VPD page reports it in blocks. Default 8 MiB.
	MaxTransferBytes uint32
	// MaxUnmapBlocks is the MAXIMUM UNMAP LBA COUNT (blocks); default
	// 0xFFFFFFFF (no limit).
	MaxUnmapBlocks uint32
	// MaxUnmapDescriptors is the MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT;
	// default 256.
	MaxUnmapDescriptors uint32
	// MaxWriteSameBlocks is the MAXIMUM WRITE SAME LENGTH (blocks);
	// default 4194304.
	MaxWriteSameBlocks uint64
	// MaxCompareAndWriteBlocks is the MAXIMUM COMPARE AND WRITE LENGTH
	// (blocks, 1..255); default 255.
	MaxCompareAndWriteBlocks uint8
	// RotationRate is the MEDIUM ROTATION RATE of VPD B1h: 0 not reported,
	// 1 non-rotating (solid state), else rpm.
	RotationRate uint16
	// PhysicalBlockSize is the physical block length in bytes, a power of
	// two multiple of BlockSize reported as LOGICAL BLOCKS PER PHYSICAL
	// BLOCK EXPONENT in READ CAPACITY(16) (SBC-3 §5.16.2). 0 means the
	// device's (backstore.PhysicalBlockSizer: BLKPBSZGET) when it is a power
	// of two of at least BlockSize, else 4096 (the host page size, the
	// granularity of file and RAM backstores), or BlockSize if larger.
	PhysicalBlockSize uint32
	// ModePages keeps saved mode page values (MODE SELECT SP=1); nil means
	// saving is not supported (SAVING PARAMETERS NOT SUPPORTED).
	ModePages ModePageStore
	// Reservations is the logical unit's reservation state (persistent
	// reservations and SPC-2 RESERVE/RELEASE). Nil means a fresh
	// pr.New(pr.Config{}) without persistence.
	Reservations *pr.State
	// Logger receives diagnostics; nil means the logger of the target the
	// logical unit is added to, with a "lun" attribute.
	Logger *slog.Logger
}

// LogicalUnit is one SBC-3 direct-access logical unit. Create it with
// NewLogicalUnit and attach it to a Target with AddLUN. Safe for concurrent
// use.
type LogicalUnit struct {
	cfg LUConfig
	bs  backstore.Backstore
	// log receives diagnostics: LUConfig.Logger, else the logger of the
	// target the logical unit is attached to.
	log   atomic.Pointer[slog.Logger]
	bsz   uint32 // logical block length, bytes
	shift uint   // log2(bsz)
	pbExp uint8  // log2(physical block / logical block)

	syncer    backstore.Syncer   // nil when the backstore has no cache
	flush     groupSync          // coalesced syncer.Sync calls
	unmapper  backstore.Unmapper // nil unless ThinProvisioning
	samer     backstore.WriteSamer
	allocStat backstore.AllocationStatuser
	// nonBlocking: the backstore never blocks (backstore.NonBlocking), so
	// READ and WRITE may run on the fabric's goroutine (Session.Submit).
	nonBlocking bool
	// viewer: the backstore's data can be sent from where it lies
	// (backstore.Viewer, Command.ViewIn).
	viewer backstore.Viewer
	// wviewer: WRITE data-out can be placed where the data lies
	// (backstore.WriteViewer, Command.ViewOut); nil unless the backstore
	// also never blocks and has no cache.
	wviewer backstore.WriteViewer

	naa      [16]byte
	serial   string
	vendor   [8]byte
	product  [16]byte
	rev      [4]byte
	attached atomic.Bool

	// blocks is the capacity in logical blocks.
	blocks atomic.Uint64
	// wce, dsenseBit and swp mirror the current WCE, D_SENSE and SWP mode
	// bits for the data path.
	wce, dsenseBit, swp atomic.Bool

	// writeMu orders medium writes against COMPARE AND WRITE: ordinary
	// writes hold it shared, COMPARE AND WRITE exclusively, so the compare
	// and the write are atomic against every other write (SBC-3 §5.2).
	writeMu sync.RWMutex
	// placing counts the WRITEs whose data-out is being placed into the
	// backstore's memory (Command.ViewOut), exclusive the holders and
	// waiters of writeMu's exclusive side (lockExclusive), under placeMu;
	// placeCond signals placing reaching 0. A placement is not a holder of
	// writeMu: a writer waiting on it would block the fabric goroutine's
	// next ordinary write, the goroutine that is to end the placement.
	placeMu   sync.Mutex
	placeCond sync.Cond
	placing   int
	exclusive int

	ts taskSet
	pr *pr.State

	// uaPending counts the unit attentions queued in uas, for all nexuses.
	uaPending atomic.Int64

	mu       sync.Mutex // guards mode, saved, uas
	mode     modePages  // current values
	uas      map[string][]Reason
	modeDefs modePages // default values
	saved    modePages // saved values (modeDefs without a store)
}

// NewLogicalUnit validates cfg and returns a logical unit.
func NewLogicalUnit(cfg LUConfig) (*LogicalUnit, error) {
	if cfg.Backstore == nil {
		return nil, ErrNoBackstore
	}
	lu := &LogicalUnit{cfg: cfg, bs: cfg.Backstore}
	if cfg.Logger != nil {
		lu.log.Store(cfg.Logger)
	} else {
		lu.log.Store(slog.New(slog.DiscardHandler))
	}
	bsz := cfg.BlockSize
	if bsz == 0 {
		bsz = 512
		if b, ok := cfg.Backstore.(backstore.BlockSizer); ok && b.LogicalBlockSize() > 0 {
			bsz = uint32(b.LogicalBlockSize())
		}
	}
	switch bsz {
	case 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("scsi: block size %d not one of 512, 1024, 2048, 4096", bsz)
	}
	if b, ok := cfg.Backstore.(backstore.BlockSizer); ok && b.LogicalBlockSize() > 0 && b.LogicalBlockSize() != int(bsz) {
		return nil, fmt.Errorf("scsi: block size %d disagrees with the device's logical block size %d", bsz, b.LogicalBlockSize())
	}
	lu.bsz = bsz
	lu.shift = uint(bits.TrailingZeros32(bsz))
	pbs := cfg.PhysicalBlockSize
	if pbs == 0 {
		pbs = max(4096, bsz)
		if p, ok := cfg.Backstore.(backstore.PhysicalBlockSizer); ok && p.PhysicalBlockSize() > 0 {
			if d := uint32(p.PhysicalBlockSize()); d >= bsz && d&(d-1) == 0 {
				pbs = d
			}
		}
	}
	if pbs < bsz || pbs&(pbs-1) != 0 || bits.TrailingZeros32(pbs)-int(lu.shift) > 15 {
		return nil, fmt.Errorf("scsi: physical block size %d is not a power of two multiple of %d", pbs, bsz)
	}
	lu.pbExp = uint8(bits.TrailingZeros32(pbs) - int(lu.shift))
	if s, ok := cfg.Backstore.(backstore.Syncer); ok {
		lu.syncer = s
		lu.flush.syncer = s
	}
	if cfg.ThinProvisioning {
		u, ok := cfg.Backstore.(backstore.Unmapper)
		if !ok {
			return nil, errors.New("scsi: ThinProvisioning needs a backstore with Unmap")
		}
		if us, ok := u.(backstore.UnmapSupporter); ok && !us.UnmapSupported() {
			return nil, errors.New("scsi: ThinProvisioning: the device supports neither discard nor write zeroes")
		}
		lu.unmapper = u
	}
	if w, ok := cfg.Backstore.(backstore.WriteSamer); ok {
		lu.samer = w
	}
	if a, ok := cfg.Backstore.(backstore.AllocationStatuser); ok {
		lu.allocStat = a
	}
	if nb, ok := cfg.Backstore.(backstore.NonBlocking); ok {
		lu.nonBlocking = nb.NonBlocking()
	}
	if v, ok := cfg.Backstore.(backstore.Viewer); ok {
		lu.viewer = v
	}
	if v, ok := cfg.Backstore.(backstore.WriteViewer); ok && lu.nonBlocking && lu.syncer == nil {
		lu.wviewer = v
	}
	if cfg.MaxTransferBytes == 0 {
		lu.cfg.MaxTransferBytes = 8 << 20
	}
	if lu.cfg.MaxTransferBytes < bsz {
		return nil, errors.New("scsi: MaxTransferBytes below the block size")
	}
	if cfg.MaxUnmapBlocks == 0 {
		lu.cfg.MaxUnmapBlocks = 0xFFFFFFFF
	}
	if cfg.MaxUnmapDescriptors == 0 {
		lu.cfg.MaxUnmapDescriptors = 256
	}
	if cfg.MaxWriteSameBlocks == 0 {
		lu.cfg.MaxWriteSameBlocks = 4 << 20
	}
	if cfg.MaxCompareAndWriteBlocks == 0 {
		lu.cfg.MaxCompareAndWriteBlocks = 255
	}
	if len(cfg.Serial) > 64 || !printable(cfg.Serial) {
		return nil, errors.New("scsi: Serial must be at most 64 printable ASCII bytes")
	}
	for _, f := range []struct {
		dst []byte
		s   string
		def string
	}{{lu.vendor[:], cfg.VendorID, "GOSRP"}, {lu.product[:], cfg.ProductID, "DISK"}, {lu.rev[:], cfg.ProductRev, "0001"}} {
		s := f.s
		if s == "" {
			s = f.def
		}
		if len(s) > len(f.dst) || !printable(s) {
			return nil, fmt.Errorf("scsi: identification %q too long or not printable ASCII", s)
		}
		copy(f.dst, s+strings.Repeat(" ", len(f.dst)-len(s)))
	}
	lu.naa = cfg.NAA
	lu.serial = cfg.Serial
	if lu.naa == ([16]byte{}) {
		lu.naa = naaFromSerial(cfg.Serial, cfg.Backstore)
	}
	if lu.serial == "" {
		lu.serial = fmt.Sprintf("%x", lu.naa[8:])
	}
	lu.blocks.Store(uint64(cfg.Backstore.Size()) >> lu.shift)
	lu.modeDefs = defaultModePages(lu)
	lu.saved = lu.modeDefs
	if cfg.ModePages != nil {
		img, err := cfg.ModePages.Load()
		if err != nil {
			return nil, fmt.Errorf("scsi: loading saved mode pages: %w", err)
		}
		if img != nil {
			if lu.saved, err = fromImage(lu.modeDefs, lu.changeableModePages(), img); err != nil {
				return nil, err
			}
		}
	}
	lu.mode = lu.saved
	lu.applyModeLocked()
	lu.uas = make(map[string][]Reason)
	lu.ts.init()
	lu.placeCond.L = &lu.placeMu
	lu.pr = cfg.Reservations
	if lu.pr == nil {
		lu.pr = pr.New(pr.Config{Logger: cfg.Logger})
	}
	return lu, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// naaFromSerial builds an NAA 6 designator the way LIO's
// spc_gen_naa_6h_vendor_specific does: NAA 6, IEEE company ID 00-14-05,
// then up to 17 hex digits of the serial. Without a serial, digits come
// from a hash of the backstore's identity.
func naaFromSerial(serial string, bs any) [16]byte {
	digits := hexDigits(serial)
	if len(digits) == 0 {
		h := sha256.Sum256(fmt.Appendf(nil, "%p", bs))
		for _, b := range h[:13] {
			digits = append(digits, b>>4, b&0xF)
		}
	}
	return naa6(digits)
}

// NAAFromSerial returns the NAA 6 designator (VPD page 83h) of a logical
// unit with this unit serial number and no LUConfig.NAA. Only the serial's
// first 17 hex digits count, so serials that differ elsewhere give one
// designator. ok is false for a serial without hex digits: the designator
// then derives from the backstore and is unique.
func NAAFromSerial(serial string) (naa [16]byte, ok bool) {
	digits := hexDigits(serial)
	if len(digits) == 0 {
		return naa, false
	}
	return naa6(digits), true
}

// hexDigits returns the values of the hex digits in s, in order.
func hexDigits(s string) []byte {
	var digits []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			digits = append(digits, c-'0')
		case c >= 'a' && c <= 'f':
			digits = append(digits, c-'a'+10)
		case c >= 'A' && c <= 'F':
			digits = append(digits, c-'A'+10)
		}
	}
	return digits
}

// naa6 builds the designator from up to 17 digits.
func naa6(digits []byte) [16]byte {
	var n [16]byte
	// Nibbles: 6 (NAA), 0,0,1,4,0,5 (OUI), then 17 nibbles (bytes 3..11) of
	// VENDOR SPECIFIC IDENTIFIER; the 4-byte extension (12..15) stays zero.
	nib := []byte{6, 0, 0, 1, 4, 0, 5}
	for i := 0; len(nib) < 32; i++ {
		if i < len(digits) && i < 17 {
			nib = append(nib, digits[i])
		} else {
			nib = append(nib, 0)
		}
	}
	for i := range n {
		n[i] = nib[2*i]<<4 | nib[2*i+1]
	}
	return n
}

// NAA returns the logical unit's NAA 6 designator (VPD page 83h).
func (lu *LogicalUnit) NAA() [16]byte { return lu.naa }

// Serial returns the logical unit's serial number (VPD page 80h): the
// configured one, else the one derived from the NAA designator.
func (lu *LogicalUnit) Serial() string { return lu.serial }

func (lu *LogicalUnit) logger() *slog.Logger { return lu.log.Load() }

// BlockSize returns the logical block length in bytes.
func (lu *LogicalUnit) BlockSize() uint32 { return lu.bsz }

// beginPlace counts a WRITE that places its data-out into the backstore's
// memory, unless a COMPARE AND WRITE or resize holds or awaits the write
// lock (false: the data-out must go to a buffer). It never waits.
func (lu *LogicalUnit) beginPlace() bool {
	lu.placeMu.Lock()
	defer lu.placeMu.Unlock()
	if lu.exclusive > 0 {
		return false
	}
	lu.placing++
	return true
}

// endPlace ends a placement beginPlace counted.
func (lu *LogicalUnit) endPlace() {
	lu.placeMu.Lock()
	if lu.placing--; lu.placing == 0 {
		lu.placeCond.Broadcast()
	}
	lu.placeMu.Unlock()
}

// lockExclusive takes writeMu exclusively once no placement is under way;
// placements that would begin meanwhile go to buffers (beginPlace).
func (lu *LogicalUnit) lockExclusive() {
	lu.placeMu.Lock()
	lu.exclusive++
	for lu.placing > 0 {
		lu.placeCond.Wait()
	}
	lu.placeMu.Unlock()
	lu.writeMu.Lock()
}

func (lu *LogicalUnit) unlockExclusive() {
	lu.writeMu.Unlock()
	lu.placeMu.Lock()
	lu.exclusive--
	lu.placeMu.Unlock()
}

// lockForUnmap takes writeMu for a deallocation and returns its unlock:
// shared, or exclusive while data-out may be placed into the backstore's
// memory (an UNMAP between WriteView and the placement would leave pages
// reported deallocated that hold the new data).
func (lu *LogicalUnit) lockForUnmap() func() {
	if lu.wviewer != nil {
		lu.lockExclusive()
		return lu.unlockExclusive
	}
	lu.writeMu.RLock()
	return lu.writeMu.RUnlock
}

// Blocks returns the capacity in logical blocks.
func (lu *LogicalUnit) Blocks() uint64 { return lu.blocks.Load() }

// Resize changes the capacity to size bytes (rounded down to whole blocks)
// through backstore.Resizer, or, with size < 0, re-reads the backstore's
// size (after the file or device grew outside the target). Every nexus gets
// CAPACITY DATA HAS CHANGED (SBC-3 §4.10). Errors: the backstore's.
func (lu *LogicalUnit) Resize(size int64) error {
	if size >= 0 {
		r, ok := lu.bs.(backstore.Resizer)
		if !ok {
			return errors.New("scsi: backstore cannot be resized")
		}
		lu.lockExclusive()
		err := r.Resize(size)
		lu.unlockExclusive()
		if err != nil {
			return err
		}
	} else if rf, ok := lu.bs.(interface{ Refresh() (int64, error) }); ok {
		if _, err := rf.Refresh(); err != nil {
			return err
		}
	}
	nb := uint64(lu.bs.Size()) >> lu.shift
	if lu.blocks.Swap(nb) != nb {
		lu.uaAllExisting(ReasonUACapacityChanged, "")
		lu.logger().Info("scsi: capacity changed", "blocks", nb)
	}
	return nil
}

// byteOff converts a logical block address to a byte offset.
func (lu *LogicalUnit) byteOff(lba uint64) int64 { return int64(lba << lu.shift) }

// uaFor returns the nexus's pending unit attentions, creating the entry with
// POWER ON, RESET OCCURRED the first time the nexus reaches the LU.
// lu.mu must be held.
func (lu *LogicalUnit) uaForLocked(key string) []Reason {
	q, ok := lu.uas[key]
	if !ok {
		q = []Reason{ReasonUAPowerOn}
		lu.setUALocked(key, q)
	}
	return q
}

// setUALocked replaces the nexus's queue, keeping uaPending in step.
// lu.mu must be held.
func (lu *LogicalUnit) setUALocked(key string, q []Reason) {
	lu.uaPending.Add(int64(len(q) - len(lu.uas[key])))
	lu.uas[key] = q
}

// takeUAFast is takeUA for the data path: when the nexus has reached the
// LU before (known) and no unit attention is pending for any nexus, it
// returns ReasonNone without taking lu.mu.
func (lu *LogicalUnit) takeUAFast(key string, known bool) Reason {
	if known && lu.uaPending.Load() == 0 {
		return ReasonNone
	}
	return lu.takeUA(key)
}

// touch records that the nexus reached the LU (creating its UA entry).
func (lu *LogicalUnit) touch(key string) {
	lu.mu.Lock()
	lu.uaForLocked(key)
	lu.mu.Unlock()
}

// takeUA removes and returns the nexus's oldest pending unit attention, or
// ReasonNone.
func (lu *LogicalUnit) takeUA(key string) Reason {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	q := lu.uaForLocked(key)
	if len(q) == 0 {
		return ReasonNone
	}
	r := q[0]
	lu.setUALocked(key, q[1:])
	return r
}

// clearUA drops a pending r for the nexus key, if any.
func (lu *LogicalUnit) clearUA(key string, r Reason) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	q, ok := lu.uas[key]
	if !ok {
		return
	}
	for i, x := range q {
		if x == r {
			lu.setUALocked(key, append(q[:i:i], q[i+1:]...))
			return
		}
	}
}

// establishUALocked queues r for the nexus key (SAM-5 §5.14). A reset class
// condition (29h) supersedes every other pending one.
func (lu *LogicalUnit) establishUALocked(key string, r Reason) {
	q := lu.uaForLocked(key)
	_, asc, _ := r.SenseCodes()
	if asc == 0x29 {
		lu.setUALocked(key, []Reason{r})
		return
	}
	for _, x := range q {
		if x == r {
			return
		}
		if _, a, _ := x.SenseCodes(); a == 0x29 && r != ReasonUALUNsChanged {
			// A pending reset condition already tells the initiator to
			// re-read everything.
			return
		}
	}
	lu.setUALocked(key, append(q, r))
}

// uaAllExisting establishes r for every nexus that has reached the LU,
// except the nexus except ("" for none).
func (lu *LogicalUnit) uaAllExisting(r Reason, except string) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for k := range lu.uas {
		if k != except {
			lu.establishUALocked(k, r)
		}
	}
}

// dropNexus forgets the nexus's unit attention state
// and tells the reservation state the I_T nexus was lost (its SPC-2
// reservation is released).
func (lu *LogicalUnit) dropNexus(n Nexus) {
	key := nexusKey(n)
	lu.mu.Lock()
	lu.uaPending.Add(-int64(len(lu.uas[key])))
	delete(lu.uas, key)
	lu.mu.Unlock()
	lu.pr.NexusLost(n.forPR())
}

// PendingUnitAttentions returns the sense codes (ASC<<8|ASCQ) of unit
// attentions pending for nexus n, oldest first, for tests and diagnostics.
func (lu *LogicalUnit) PendingUnitAttentions(n Nexus) []uint16 {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	var out []uint16
	for _, r := range lu.uas[nexusKey(n)] {
		_, a, q := r.SenseCodes()
		out = append(out, uint16(a)<<8|uint16(q))
	}
	return out
}

// CommandObserver is told of the commands a logical unit executes
// (LUConfig.Observer), for statistics. Its methods are called from the
// goroutines that run the commands, concurrently.
type CommandObserver interface {
	// Started is called when a command addressed to the logical unit
	// starts executing.
	Started()
	// Finished is called with the command's result (Result.Aborted for an
	// aborted one) and the time since Started.
	Finished(res *Result, took time.Duration)
}
