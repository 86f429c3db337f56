package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// SCSI operation codes used by the helpers (SPC-4 §6, SBC-3 §5).
const (
	opTestUnitReady   = 0x00
	opInquiry         = 0x12
	opSyncCache10     = 0x35
	opWriteSame16     = 0x93
	opUnmap           = 0x42
	opRead16          = 0x88
	opWrite16         = 0x8a
	opCompareAndWrite = 0x89
	opServiceIn16     = 0x9e
	opReportLUNs      = 0xa0
	opPRIn            = 0x5e
	opPROut           = 0x5f
)

// uaRetries is how many times a helper re-issues a command that got a
// UNIT ATTENTION: the target did not run it, and the attention is reported
// once per I_T nexus (the SCSI midlayer retries these too).
const uaRetries = 3

// Run executes cmd as Execute does, then folds a status other than GOOD or
// CONDITION MET into the error (*SenseError or *StatusError, see
// Result.Err). A command that got a UNIT ATTENTION did not run; Run re-issues
// it up to 3 times, as the SCSI midlayer does, so a target's power-on or
// reset attention (for instance after a reconnect) is not a failure.
func (s *Session) Run(ctx context.Context, cmd *Command) (Result, error) {
	return s.run(ctx, cmd)
}

// run executes cmd and folds a non-GOOD status into the error. A UNIT
// ATTENTION (power on, reset, mode or capacity change, ...) is logged and the
// command re-issued.
func (s *Session) run(ctx context.Context, cmd *Command) (Result, error) {
	for i := 0; ; i++ {
		res, err := s.Execute(ctx, cmd)
		if err != nil {
			return res, err
		}
		err = res.Err()
		var se *SenseError
		if i < uaRetries && errors.As(err, &se) && se.Key == sense.KeyUnitAttention && !se.Deferred {
			s.log.Debug("srp: unit attention, re-issuing", "lun", cmd.LUN, "sense", se.Error())
			continue
		}
		return res, err
	}
}

// dataIn runs a data-in command with an n-byte buffer and returns the bytes
// transferred.
func (s *Session) dataIn(ctx context.Context, lun uint64, cdb []byte, n int) ([]byte, error) {
	buf := make([]byte, n)
	res, err := s.run(ctx, &Command{LUN: lun, CDB: cdb, DataIn: [][]byte{buf}})
	if err != nil {
		return nil, err
	}
	return buf[:res.DataInLen], nil
}

// TestUnitReady sends TEST UNIT READY (SPC-4 §6.47).
func (s *Session) TestUnitReady(ctx context.Context, lun uint64) error {
	_, err := s.run(ctx, &Command{LUN: lun, CDB: []byte{opTestUnitReady, 0, 0, 0, 0, 0}})
	return err
}

// Inquiry sends INQUIRY (SPC-4 §6.6) with allocation length alloc (bytes,
// at most 65535); evpd selects vital product data page page. It returns the
// data the target sent.
func (s *Session) Inquiry(ctx context.Context, lun uint64, evpd bool, page uint8, alloc int) ([]byte, error) {
	alloc = min(alloc, 0xffff)
	cdb := []byte{opInquiry, 0, page, byte(alloc >> 8), byte(alloc), 0}
	if evpd {
		cdb[1] = 1
	}
	return s.dataIn(ctx, lun, cdb, alloc)
}

// InquiryData is the decoded standard INQUIRY data (SPC-4 §6.6.2, table 176).
type InquiryData struct {
	PeripheralQualifier uint8
	DeviceType          uint8 // 0 = direct access block device
	Removable           bool
	Version             uint8 // 6 = SPC-4
	ResponseFormat      uint8
	TPGS                uint8
	CmdQue              bool
	Vendor              string // T10 vendor identification, trimmed
	Product             string
	Revision            string
}

// ParseInquiry decodes standard INQUIRY data (at least 36 bytes).
func ParseInquiry(b []byte) (InquiryData, error) {
	if len(b) < 36 {
		return InquiryData{}, fmt.Errorf("standard INQUIRY data too short: %d bytes", len(b))
	}
	return InquiryData{
		PeripheralQualifier: b[0] >> 5, DeviceType: b[0] & 0x1f, Removable: b[1]&0x80 != 0,
		Version: b[2], ResponseFormat: b[3] & 0xf, TPGS: (b[5] >> 4) & 3, CmdQue: b[7]&2 != 0,
		Vendor:   strings.TrimSpace(string(b[8:16])),
		Product:  strings.TrimSpace(string(b[16:32])),
		Revision: strings.TrimSpace(string(b[32:36])),
	}, nil
}

// Capacity is READ CAPACITY(16) parameter data (SBC-3 §5.16.2, table 66).
type Capacity struct {
	LastLBA   uint64 // RETURNED LOGICAL BLOCK ADDRESS
	BlockSize uint32 // LOGICAL BLOCK LENGTH IN BYTES
	// LogicalPerPhysicalExp is the LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
	LogicalPerPhysicalExp uint8
	LBPME, LBPRZ          bool // logical block provisioning enabled / read zeros
	ProtectionEnabled     bool
}

// Blocks is the number of logical blocks.
func (c Capacity) Blocks() uint64 { return c.LastLBA + 1 }

// Bytes is the capacity in bytes.
func (c Capacity) Bytes() uint64 { return c.Blocks() * uint64(c.BlockSize) }

// ReadCapacity16 sends READ CAPACITY(16) (SERVICE ACTION IN(16) 10h, SBC-3 §5.16).
func (s *Session) ReadCapacity16(ctx context.Context, lun uint64) (Capacity, error) {
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = opServiceIn16, 0x10
	binary.BigEndian.PutUint32(cdb[10:], 32)
	b, err := s.dataIn(ctx, lun, cdb, 32)
	if err != nil {
		return Capacity{}, err
	}
	if len(b) < 14 {
		return Capacity{}, fmt.Errorf("READ CAPACITY(16) data too short: %d bytes", len(b))
	}
	return Capacity{
		LastLBA: binary.BigEndian.Uint64(b), BlockSize: binary.BigEndian.Uint32(b[8:]),
		ProtectionEnabled: b[12]&1 != 0, LogicalPerPhysicalExp: b[13] & 0xf,
		LBPME: b[14]&0x80 != 0, LBPRZ: b[14]&0x40 != 0,
	}, nil
}

func rw16(op byte, lba uint64, blocks uint32, fua bool) []byte {
	cdb := make([]byte, 16)
	PutRW16(cdb, op == opWrite16, lba, blocks, fua)
	cdb[0] = op
	return cdb
}

// PutRW16 writes a READ(16) or WRITE(16) CDB (SBC-3 §5.14, §5.40; 16 bytes)
// into cdb: lba and blocks (logical blocks), FUA bit when fua. It lets a
// caller reuse one CDB buffer per command without allocating.
func PutRW16(cdb []byte, write bool, lba uint64, blocks uint32, fua bool) {
	clear(cdb[:16])
	cdb[0] = opRead16
	if write {
		cdb[0] = opWrite16
	}
	if fua {
		cdb[1] = 0x08
	}
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], blocks)
}

// Read16 reads len(buf)/blockSize logical blocks at lba into buf with
// READ(16) (SBC-3 §5.14); fua forces the read from the medium.
func (s *Session) Read16(ctx context.Context, lun, lba uint64, buf []byte, blockSize int, fua bool) error {
	if blockSize <= 0 || len(buf)%blockSize != 0 {
		return fmt.Errorf("READ(16): buffer of %d bytes is not a multiple of the %d-byte block", len(buf), blockSize)
	}
	res, err := s.run(ctx, &Command{LUN: lun, CDB: rw16(opRead16, lba, uint32(len(buf)/blockSize), fua), DataIn: [][]byte{buf}})
	if err == nil && res.DataInLen != len(buf) {
		err = fmt.Errorf("READ(16): %d of %d bytes transferred", res.DataInLen, len(buf))
	}
	return err
}

// Write16 writes buf (whole logical blocks) at lba with WRITE(16) (SBC-3
// §5.40); fua makes the write durable before status.
func (s *Session) Write16(ctx context.Context, lun, lba uint64, buf []byte, blockSize int, fua bool) error {
	if blockSize <= 0 || len(buf)%blockSize != 0 {
		return fmt.Errorf("WRITE(16): buffer of %d bytes is not a multiple of the %d-byte block", len(buf), blockSize)
	}
	_, err := s.run(ctx, &Command{LUN: lun, CDB: rw16(opWrite16, lba, uint32(len(buf)/blockSize), fua), DataOut: [][]byte{buf}})
	return err
}

// SynchronizeCache sends SYNCHRONIZE CACHE(10) for the whole logical unit
// (SBC-3 §5.22: LBA 0, NUMBER OF BLOCKS 0).
func (s *Session) SynchronizeCache(ctx context.Context, lun uint64) error {
	_, err := s.run(ctx, &Command{LUN: lun, CDB: []byte{opSyncCache10, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
	return err
}

// Extent is one LBA range: Blocks logical blocks from LBA.
type Extent struct {
	LBA    uint64
	Blocks uint32
}

// Unmap sends UNMAP (SBC-3 §5.28) for the extents.
func (s *Session) Unmap(ctx context.Context, lun uint64, extents []Extent) error {
	p := make([]byte, 8+16*len(extents))
	binary.BigEndian.PutUint16(p[0:], uint16(len(p)-2))
	binary.BigEndian.PutUint16(p[2:], uint16(16*len(extents)))
	for i, e := range extents {
		binary.BigEndian.PutUint64(p[8+16*i:], e.LBA)
		binary.BigEndian.PutUint32(p[16+16*i:], e.Blocks)
	}
	cdb := make([]byte, 10)
	cdb[0] = opUnmap
	binary.BigEndian.PutUint16(cdb[7:], uint16(len(p)))
	_, err := s.run(ctx, &Command{LUN: lun, CDB: cdb, DataOut: [][]byte{p}})
	return err
}

// WriteSame16 writes block (one logical block) to blocks blocks from lba
// with WRITE SAME(16) (SBC-3 §5.45); unmap sets the UNMAP bit.
func (s *Session) WriteSame16(ctx context.Context, lun, lba uint64, blocks uint32, block []byte, unmap bool) error {
	cdb := rw16(opWriteSame16, lba, blocks, false)
	if unmap {
		cdb[1] |= 0x08
	}
	_, err := s.run(ctx, &Command{LUN: lun, CDB: cdb, DataOut: [][]byte{block}})
	return err
}

// CompareAndWrite sends COMPARE AND WRITE (SBC-3 §5.3): verify and write are
// each blocks logical blocks. A mismatch returns a *SenseError with key
// MISCOMPARE and the offset of the first differing byte in Info. Never
// re-issued after a channel loss.
func (s *Session) CompareAndWrite(ctx context.Context, lun, lba uint64, blocks uint8, verify, write []byte) error {
	cdb := make([]byte, 16)
	cdb[0] = opCompareAndWrite
	binary.BigEndian.PutUint64(cdb[2:], lba)
	cdb[13] = blocks
	_, err := s.run(ctx, &Command{LUN: lun, CDB: cdb, DataOut: [][]byte{verify, write}, NoRetry: true})
	return err
}

// ReportLUNs sends REPORT LUNS (SPC-4 §6.33, select report 0) to LUN 0 and
// returns the LUN fields.
func (s *Session) ReportLUNs(ctx context.Context) ([]uint64, error) {
	alloc := 8 + 8*256
	for {
		cdb := make([]byte, 12)
		cdb[0] = opReportLUNs
		binary.BigEndian.PutUint32(cdb[6:], uint32(alloc))
		b, err := s.dataIn(ctx, 0, cdb, alloc)
		if err != nil {
			return nil, err
		}
		if len(b) < 8 {
			return nil, fmt.Errorf("REPORT LUNS data too short: %d bytes", len(b))
		}
		n := int(binary.BigEndian.Uint32(b))
		if 8+n > alloc && alloc < 1<<20 {
			alloc = 8 + n
			continue
		}
		n = min(n, len(b)-8) / 8
		luns := make([]uint64, n)
		for i := range luns {
			luns[i] = binary.BigEndian.Uint64(b[8+8*i:])
		}
		return luns, nil
	}
}

// PersistentReserveIn sends PERSISTENT RESERVE IN (SPC-4 §6.13) with
// service action action (0 READ KEYS, 1 READ RESERVATION, 2 REPORT
// CAPABILITIES, 3 READ FULL STATUS) and returns the parameter data.
func (s *Session) PersistentReserveIn(ctx context.Context, lun uint64, action uint8, alloc int) ([]byte, error) {
	alloc = min(alloc, 0xffff)
	cdb := make([]byte, 10)
	cdb[0], cdb[1] = opPRIn, action&0x1f
	binary.BigEndian.PutUint16(cdb[7:], uint16(alloc))
	return s.dataIn(ctx, lun, cdb, alloc)
}

// PROut is a PERSISTENT RESERVE OUT request (SPC-4 §6.14, basic parameter
// list of table 222).
type PROut struct {
	Action uint8 // 0 REGISTER, 1 RESERVE, 2 RELEASE, 3 CLEAR, 4 PREEMPT, 5 PREEMPT AND ABORT, 6 REGISTER AND IGNORE EXISTING KEY
	Scope  uint8 // 0 LU_SCOPE
	Type   uint8 // 1 WRITE EXCLUSIVE, 3 EXCLUSIVE ACCESS, 5/6 registrants only, 7/8 all registrants
	Key    uint64
	SAKey  uint64
	// Flags is byte 20 of the parameter list: SPEC_I_PT 0x08, ALL_TG_PT 0x04, APTPL 0x01.
	Flags uint8
}

// PersistentReserveOut sends PERSISTENT RESERVE OUT (SPC-4 §6.14). Never
// re-issued after a channel loss.
func (s *Session) PersistentReserveOut(ctx context.Context, lun uint64, p PROut) error {
	pl := make([]byte, 24)
	binary.BigEndian.PutUint64(pl[0:], p.Key)
	binary.BigEndian.PutUint64(pl[8:], p.SAKey)
	pl[20] = p.Flags
	cdb := make([]byte, 10)
	cdb[0], cdb[1], cdb[2] = opPROut, p.Action&0x1f, p.Scope<<4|p.Type&0xf
	binary.BigEndian.PutUint32(cdb[5:], 24)
	_, err := s.run(ctx, &Command{LUN: lun, CDB: cdb, DataOut: [][]byte{pl}, NoRetry: true})
	return err
}

// AbortTask aborts the task with tag on lun (ABORT TASK).
func (s *Session) AbortTask(ctx context.Context, lun, tag uint64) error {
	return s.TaskManagement(ctx, srp.TMFAbortTask, lun, tag)
}

// LUNReset resets a logical unit (LOGICAL UNIT RESET, ib_srp
// srp_reset_device). Commands outstanding on lun that were sent before the
// reset's TMF end with ErrAborted; one sent on the same channel after it
// runs at the target and ends with its response. With several channels a
// command sent on another channel while the reset is under way may reach
// the target on either side of it; it is taken as aborted if it was sent
// before the TMF was, so a caller that needs certainty keeps commands off
// lun during the reset (as Linux's SCSI error handler does) or uses one
// channel.
func (s *Session) LUNReset(ctx context.Context, lun uint64) error {
	return s.TaskManagement(ctx, srp.TMFLUNReset, lun, 0)
}

// IsSense reports whether err is a *SenseError with the given key, ASC and
// ASCQ.
func IsSense(err error, key, asc, ascq uint8) bool {
	var se *SenseError
	return errors.As(err, &se) && se.Key == key && se.ASC == asc && se.ASCQ == ascq
}
