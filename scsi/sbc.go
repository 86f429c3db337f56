package scsi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"

	"github.com/gosrp/gosrp/backstore"
)

// blockField places the LOGICAL BLOCK ADDRESS and TRANSFER LENGTH (or
// VERIFICATION LENGTH / NUMBER OF LOGICAL BLOCKS) fields in the SBC-3 CDBs of
// one length: byte offset and width in bytes of each, big-endian.
type blockField struct {
	lbaOff, lbaWidth int
	lbaMask          uint64
	lenOff, lenWidth int
	// zero256: a TRANSFER LENGTH of 0 means 256 blocks (READ(6), WRITE(6)).
	zero256 bool
}

// blockFields holds the layouts of the 6-, 10-, 12- and 16-byte read,
// write, verify, write and verify, write same, synchronize cache and
// pre-fetch CDBs (SBC-3 §5), indexed by cdbSizeIndex. The 6-byte LBA is the
// low 21 bits of bytes 1..3.
var blockFields = [4]blockField{
	{lbaOff: 1, lbaWidth: 3, lbaMask: 0x1FFFFF, lenOff: 4, lenWidth: 1, zero256: true},
	{lbaOff: 2, lbaWidth: 4, lbaMask: 1<<32 - 1, lenOff: 7, lenWidth: 2},
	{lbaOff: 2, lbaWidth: 4, lbaMask: 1<<32 - 1, lenOff: 6, lenWidth: 4},
	{lbaOff: 2, lbaWidth: 8, lbaMask: 1<<64 - 1, lenOff: 10, lenWidth: 4},
}

// cdbSizeIndex maps an opcode's group code (SPC-4 §4.3.2) to its
// blockFields row: group 0 → 6 bytes, 1 and 2 → 10, 5 → 12, others → 16.
func cdbSizeIndex(op byte) int {
	switch op >> 5 {
	case 0:
		return 0
	case 1, 2:
		return 1
	case 5:
		return 2
	default:
		return 3
	}
}

// beField reads a big-endian unsigned field of 1 to 8 bytes.
func beField(b []byte) uint64 {
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

// lbaLen decodes the LOGICAL BLOCK ADDRESS and length fields of cdb through
// blockFields and returns the byte offset of the length field for field
// pointers. The caller has validated the CDB length (opcode table).
func lbaLen(cdb []byte) (lba uint64, n uint32, lenField int) {
	l := &blockFields[cdbSizeIndex(cdb[0])]
	lba = beField(cdb[l.lbaOff:l.lbaOff+l.lbaWidth]) & l.lbaMask
	n = uint32(beField(cdb[l.lenOff : l.lenOff+l.lenWidth]))
	if n == 0 && l.zero256 {
		n = 256
	}
	return lba, n, l.lenOff
}

// xferRange decodes a data transfer CDB (READ, WRITE, WRITE AND VERIFY)
// and checks its TRANSFER LENGTH against the MAXIMUM TRANSFER LENGTH and
// its range against the capacity; size is the transfer in bytes.
func (c *cmdCtx) xferRange() (lba uint64, n uint32, size int, f failure) {
	lu := c.lu
	lba, n, lf := lbaLen(c.cdb)
	if f := lu.checkXfer(n, lf); f.failed() {
		return 0, 0, 0, f
	}
	if f := lu.checkRange(lba, uint64(n)); f.failed() {
		return 0, 0, 0, f
	}
	return lba, n, int(n) << lu.shift, ok
}

// checkRange enforces SBC-3 §4.5: LBA + length must not pass the capacity.
func (lu *LogicalUnit) checkRange(lba uint64, n uint64) failure {
	end := lba + n
	if end < lba || end > lu.blocks.Load() {
		return fail(ReasonLBAOutOfRange)
	}
	return ok
}

// checkXfer enforces the MAXIMUM TRANSFER LENGTH of the Block Limits page,
// as LIO's sbc_parse_cdb (INVALID FIELD IN CDB on the length field).
func (lu *LogicalUnit) checkXfer(n uint32, lenField int) failure {
	if uint64(n)<<lu.shift > uint64(lu.cfg.MaxTransferBytes) {
		return badCDB(lenField, -1)
	}
	return ok
}

// needsDataOut checks the data-out length equals the CDB's. LIO's
// target_cmd_size_check rejects a WRITE-type command whose data-out
// length differs with INVALID FIELD IN COMMAND INFORMATION UNIT.
func (c *cmdCtx) needsDataOut(want int) failure {
	c.res.DataOutWanted = want
	n := len(c.cmd.DataOut)
	if c.cmd.ViewOut {
		// Not fetched yet: placed into the backstore's memory later.
		n = c.cmd.DataOutLen
	}
	if n != want {
		return fail(ReasonInvalidCommandIU)
	}
	c.res.DataOutUsed = want
	return ok
}

// needsParamList checks the data-out holds the CDB's PARAMETER LIST
// LENGTH. Unlike data CDBs, a longer data-out is accepted and the excess
// ignored (an overflow residual), as LIO does for non-data commands.
func (c *cmdCtx) needsParamList(plen int) failure {
	c.res.DataOutWanted = plen
	if len(c.cmd.DataOut) < plen {
		return fail(ReasonInvalidCommandIU)
	}
	c.res.DataOutUsed = plen
	return ok
}

// execRead: READ(6/10/12/16), SBC-3 §5.9–5.13. Data goes straight from the
// backstore into the command's data-in buffer. DPO and FUA need no action:
// the backstore holds no data that is not already readable.
func execRead(c *cmdCtx) failure {
	lu := c.lu
	lba, n, want, f := c.xferRange()
	if f.failed() {
		return f
	}
	c.res.DataInWanted = want
	m := min(want, len(c.cmd.DataIn))
	if m == 0 {
		return ok
	}
	if cmd := c.cmd; cmd.ViewIn && cmd.Attr == TaskSimple && lu.viewer != nil && cmd.viewTS == nil {
		views, err := lu.viewer.View(cmd.DataInViews[:0], lu.byteOff(lba), int64(m))
		if err == nil {
			lu.ts.holdView(c.s.key)
			cmd.DataInViews, cmd.viewTS, cmd.viewKey = views, &lu.ts, c.s.key
			c.res.DataInLen = m
			return ok
		}
		// ReadAt below meets the same error and reports it.
		clear(views)
	}
	if got, err := lu.bs.ReadAt(c.cmd.DataIn[:m], lu.byteOff(lba)); err != nil {
		// INFORMATION names the first block in error (SBC-3 §4.18.1):
		// the backstore read the blocks before it.
		bad := lba + uint64(got)>>lu.shift
		lu.logger().Warn("scsi: read failed", "lba", bad, "blocks", n, "err", err)
		return ioFailure(err, false, bad)
	}
	c.res.DataInLen = m
	return ok
}

// writeProtect fails medium writes on a read-only logical unit (DATA
// PROTECT, WRITE PROTECTED) or while the control mode page's SWP bit is set
// (DATA PROTECT, LOGICAL UNIT SOFTWARE WRITE PROTECTED; SPC-4 §7.5.8).
func (lu *LogicalUnit) writeProtect() failure {
	if lu.cfg.ReadOnly {
		return fail(ReasonWriteProtected)
	}
	if lu.swp.Load() {
		return fail(ReasonSoftwareWriteProtected)
	}
	return ok
}

// writeThrough reports whether a write must be durable before status:
// FUA set or the caching page's WCE=0 (SBC-3 §4.15).
func (lu *LogicalUnit) writeThrough(fua bool) bool {
	return lu.syncer != nil && (fua || !lu.wce.Load())
}

// writeBlocks writes data at lba with the write-ordering lock held shared
// and makes it durable when required.
func (lu *LogicalUnit) writeBlocks(data []byte, lba uint64, fua bool) failure {
	lu.writeMu.RLock()
	n, err := lu.bs.WriteAt(data, lu.byteOff(lba))
	lu.writeMu.RUnlock()
	// INFORMATION names the first block in error (SBC-3 §4.18.1): the
	// backstore wrote the blocks before it; a failed flush leaves every
	// block of the command in doubt.
	bad := lba + uint64(n)>>lu.shift
	if err == nil && lu.writeThrough(fua) {
		bad, err = lba, lu.flush.Sync()
	}
	if err != nil {
		lu.logger().Warn("scsi: write failed", "lba", bad, "bytes", len(data), "err", err)
		return ioFailure(err, true, bad)
	}
	return ok
}

// writeData checks a medium write of the command (write protection, the
// transfer range, the data-out length) and returns its data and first LBA;
// the data is empty for a transfer length of 0.
func (c *cmdCtx) writeData() ([]byte, uint64, failure) {
	lba, want, f := c.writeRange()
	if f.failed() {
		return nil, 0, f
	}
	return c.cmd.DataOut[:want], lba, ok
}

// writeRange checks a medium write of the command (write protection, the
// transfer range, the data-out length) and returns its first LBA and its
// length in bytes.
func (c *cmdCtx) writeRange() (uint64, int, failure) {
	if f := c.lu.writeProtect(); f.failed() {
		return 0, 0, f
	}
	lba, _, want, f := c.xferRange()
	if f.failed() {
		return 0, 0, f
	}
	return lba, want, c.needsDataOut(want)
}

// writeFUA reports the FUA bit of a WRITE CDB (WRITE(6) has none).
func writeFUA(cdb []byte) bool { return cdb[0] != opWrite6 && cdb[1]&0x08 != 0 }

// isWrite reports whether op is WRITE(6/10/12/16).
func isWrite(op byte) bool {
	return op == opWrite6 || op == opWrite10 || op == opWrite12 || op == opWrite16
}

// execWrite: WRITE(6/10/12/16), SBC-3 §5.31–5.34.
func execWrite(c *cmdCtx) failure {
	if c.cmd.ViewOut {
		return c.writeViews()
	}
	data, lba, f := c.writeData()
	if f.failed() || len(data) == 0 {
		return f
	}
	return c.lu.writeBlocks(data, lba, writeFUA(c.cdb))
}

// writeViews begins a WRITE whose data-out the fabric places where it
// will lie (Command.ViewOut): it checks the write (writeRange), then
// gives the backstore's memory for the range in DataOutViews, counted as
// a placement (beginPlace) until placed. When a COMPARE AND WRITE or a
// resize holds or awaits the write lock, the data-out goes to a buffer
// instead, written once it is there: the fabric's goroutine, which may be
// running this, must never wait for the lock, whose holder waits for the
// placements that goroutine delivers.
func (c *cmdCtx) writeViews() failure {
	lu, cmd := c.lu, c.cmd
	lba, want, f := c.writeRange()
	if f.failed() || want == 0 {
		return f
	}
	c.lba, c.fua = lba, writeFUA(c.cdb)
	// A logical unit without WriteView (the LUN was mapped to another
	// since Check) takes the buffer too.
	if lu.wviewer == nil || !lu.beginPlace() {
		cmd.DataOutViews = append(cmd.DataOutViews[:0], make([]byte, want))
		cmd.DataOutBuffered = true
		c.place = placeBuffer
		return ok
	}
	views, err := lu.wviewer.WriteView(cmd.DataOutViews[:0], lu.byteOff(lba), int64(want))
	if err != nil {
		lu.endPlace()
		clear(views)
		cmd.DataOutViews = views[:0]
		lu.logger().Warn("scsi: write failed", "lba", lba, "bytes", want, "err", err)
		return ioFailure(err, true, lba)
	}
	cmd.DataOutViews, cmd.DataOutBuffered = views, false
	c.place = placeMedium
	return ok
}

// execWriteAndVerify: WRITE AND VERIFY(10/12/16), SBC-3 §5.36–5.38. The
// data is written and made durable; with BYTCHK=1 the medium is read back
// and compared.
func execWriteAndVerify(c *cmdCtx) failure {
	data, lba, f := c.writeData()
	if f.failed() || len(data) == 0 {
		return f
	}
	if f := c.lu.writeBlocks(data, lba, true); f.failed() {
		return f
	}
	if c.cdb[1]&0x02 != 0 {
		return c.lu.compare(data, lba, false)
	}
	return ok
}

// compare reads len(data) bytes at lba and compares them with data. A
// difference is MISCOMPARE with the byte offset of the first difference in
// the INFORMATION field (SBC-3 §5.27, §5.2). repeat compares data (one
// block) against every block of count blocks.
func (lu *LogicalUnit) compare(data []byte, lba uint64, repeat bool) failure {
	return lu.compareN(data, lba, uint64(len(data))>>lu.shift, repeat)
}

func (lu *LogicalUnit) compareN(data []byte, lba uint64, blocks uint64, repeat bool) failure {
	bsz := uint64(lu.bsz)
	chunk := min(blocks, uint64(1<<20)/bsz)
	buf := make([]byte, chunk*bsz)
	for done := uint64(0); done < blocks; {
		k := min(chunk, blocks-done)
		b := buf[:k*bsz]
		if _, err := lu.bs.ReadAt(b, lu.byteOff(lba+done)); err != nil {
			return ioFailure(err, false, lba+done)
		}
		for i := uint64(0); i < k; i++ {
			var want []byte
			if repeat {
				want = data[:bsz]
			} else {
				want = data[(done+i)*bsz : (done+i+1)*bsz]
			}
			got := b[i*bsz : (i+1)*bsz]
			if !bytes.Equal(want, got) {
				j := 0
				for want[j] == got[j] {
					j++
				}
				f := fail(ReasonMiscompare)
				f.infoValid, f.info = true, (done+i)*bsz+uint64(j)
				return f
			}
		}
		done += k
	}
	return ok
}

// execVerify: VERIFY(10/12/16), SBC-3 §5.27–5.29. BYTCHK 00b reads the
// range to check it is readable; 01b compares the data-out with the
// medium; 11b compares one data-out block with every block; 10b is
// reserved.
func execVerify(c *cmdCtx) failure {
	lu := c.lu
	lba, n, lf := lbaLen(c.cdb)
	bytchk := (c.cdb[1] >> 1) & 0x03
	if bytchk == 2 {
		return badCDB(1, 2)
	}
	if bytchk != 0 {
		if f := lu.checkXfer(n, lf); f.failed() {
			return f
		}
	}
	if f := lu.checkRange(lba, uint64(n)); f.failed() {
		return f
	}
	switch bytchk {
	case 0:
		c.res.DataOutWanted = 0
		if n == 0 {
			return ok
		}
		bsz := uint64(lu.bsz)
		chunk := min(uint64(n), uint64(1<<20)/bsz)
		buf := make([]byte, chunk*bsz)
		for done := uint64(0); done < uint64(n); {
			if c.ctx.Err() != nil {
				return ok // Execute reports the abort
			}
			k := min(chunk, uint64(n)-done)
			if _, err := lu.bs.ReadAt(buf[:k*bsz], lu.byteOff(lba+done)); err != nil {
				return ioFailure(err, false, lba+done)
			}
			done += k
		}
		return ok
	case 1:
		want := int(n) << lu.shift
		if f := c.needsDataOut(want); f.failed() {
			return f
		}
		if n == 0 {
			return ok
		}
		return lu.compare(c.cmd.DataOut[:want], lba, false)
	default: // 3
		want := 0
		if n > 0 {
			want = int(lu.bsz)
		}
		if f := c.needsDataOut(want); f.failed() {
			return f
		}
		if n == 0 {
			return ok
		}
		return lu.compareN(c.cmd.DataOut[:want], lba, uint64(n), true)
	}
}

// execCompareAndWrite: COMPARE AND WRITE, SBC-3 §5.2. The data-out holds
// NUMBER OF LOGICAL BLOCKS of verify data then as many of write data. The
// compare and the write are one atomic operation with respect to every other
// write to the logical unit.
func execCompareAndWrite(c *cmdCtx) failure {
	lu := c.lu
	if f := lu.writeProtect(); f.failed() {
		return f
	}
	lba := be64(c.cdb[2:])
	n := uint64(c.cdb[13])
	if n > uint64(lu.cfg.MaxCompareAndWriteBlocks) {
		return badCDB(13, -1)
	}
	if f := lu.checkRange(lba, n); f.failed() {
		return f
	}
	half := int(n) << lu.shift
	if f := c.needsDataOut(2 * half); f.failed() {
		return f
	}
	if n == 0 {
		return ok
	}
	verify, data := c.cmd.DataOut[:half], c.cmd.DataOut[half:2*half]
	var f failure
	if cw, isCW := lu.bs.(backstore.CompareAndWriter); isCW {
		// The backstore's compare-and-write is atomic against every writer
		// of the medium, other gateways included; the shared lock still
		// orders it against this unit's own writes.
		lu.writeMu.RLock()
		f = compareAndWriteFailure(cw.CompareAndWrite(verify, data, lu.byteOff(lba)), lba)
		lu.writeMu.RUnlock()
	} else {
		lu.lockExclusive()
		f = lu.compare(verify, lba, false)
		if !f.failed() {
			if _, err := lu.bs.WriteAt(data, lu.byteOff(lba)); err != nil {
				f = ioFailure(err, true, lba)
			}
		}
		lu.unlockExclusive()
	}
	if f.failed() {
		return f
	}
	if lu.writeThrough(c.cdb[1]&0x08 != 0) {
		if err := lu.flush.Sync(); err != nil {
			return ioFailure(err, true, lba)
		}
	}
	return ok
}

// compareAndWriteFailure maps a backstore.CompareAndWriter result: a
// miscompare is MISCOMPARE DURING VERIFY OPERATION with the offset of the
// first differing byte in INFORMATION (SBC-3 §5.2), anything else an I/O
// failure.
func compareAndWriteFailure(err error, lba uint64) failure {
	var mis *backstore.MiscompareError
	switch {
	case err == nil:
		return ok
	case errors.As(err, &mis):
		f := fail(ReasonMiscompare)
		f.infoValid, f.info = true, uint64(mis.Offset)
		return f
	}
	return ioFailure(err, true, lba)
}

// execWriteSame: WRITE SAME(10/16), SBC-3 §5.42–5.43. NUMBER OF LOGICAL
// BLOCKS 0 is rejected (WSNZ=1, as LIO). With UNMAP=1 on a thin
// provisioned unit and an all-zero block (or NDOB=1) the range is
// deallocated (reads then return zeros, LBPRZ=1); otherwise the block is
// written to every LBA.
func execWriteSame(c *cmdCtx) failure {
	lu := c.lu
	if f := lu.writeProtect(); f.failed() {
		return f
	}
	lba, n, lf := lbaLen(c.cdb)
	unmap := c.cdb[1]&0x08 != 0
	ndob := c.cdb[0] == opWriteSame16 && c.cdb[1]&0x01 != 0
	if n == 0 || uint64(n) > lu.cfg.MaxWriteSameBlocks {
		return badCDB(lf, -1)
	}
	if f := lu.checkRange(lba, uint64(n)); f.failed() {
		return f
	}
	var block []byte
	if ndob {
		if f := c.needsDataOut(0); f.failed() {
			return f
		}
		block = make([]byte, lu.bsz)
	} else {
		if f := c.needsDataOut(int(lu.bsz)); f.failed() {
			return f
		}
		block = c.cmd.DataOut[:lu.bsz]
	}
	off, length := lu.byteOff(lba), int64(n)<<lu.shift
	var err error
	if unmap && lu.unmapper != nil && allZero(block) {
		unlock := lu.lockForUnmap()
		err = lu.unmapper.Unmap(off, length)
		unlock()
	} else {
		lu.writeMu.RLock()
		err = lu.writeSame(c.ctx, block, off, int64(n))
		lu.writeMu.RUnlock()
	}
	if err == nil && lu.writeThrough(false) {
		err = lu.flush.Sync()
	}
	if err != nil {
		return ioFailure(err, true, lba)
	}
	return ok
}

// writeSame writes block count times from byte offset off, stopping early
// (with ctx's error) when ctx ends.
func (lu *LogicalUnit) writeSame(ctx context.Context, block []byte, off int64, count int64) error {
	if lu.samer != nil {
		return lu.samer.WriteSame(block, off, count)
	}
	per := max(int64(1), min(count, int64(1<<20)/int64(len(block))))
	buf := bytes.Repeat(block, int(per))
	for count > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(count, per)
		if _, err := lu.bs.WriteAt(buf[:k*int64(len(block))], off); err != nil {
			return err
		}
		off += k * int64(len(block))
		count -= k
	}
	return nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// execUnmap: UNMAP, SBC-3 §5.28, validated as LIO's sbc_execute_unmap:
// every descriptor is checked before any range is deallocated.
func execUnmap(c *cmdCtx) failure {
	lu := c.lu
	if lu.unmapper == nil {
		return fail(ReasonInvalidOpcode)
	}
	if f := lu.writeProtect(); f.failed() {
		return f
	}
	plen := int(be16(c.cdb[7:]))
	if f := c.needsParamList(plen); f.failed() {
		return f
	}
	if plen == 0 {
		return ok
	}
	if plen < 8 {
		return fail(ReasonParamListLength)
	}
	p := c.cmd.DataOut[:plen]
	size := plen - 8
	if bd := int(be16(p[2:])); bd <= size {
		size = bd
	}
	nd := size / 16
	if nd > int(lu.cfg.MaxUnmapDescriptors) {
		return badParam(2, -1)
	}
	for i := 0; i < nd; i++ {
		d := p[8+16*i:]
		lba, cnt := be64(d), be32(d[8:])
		if cnt > lu.cfg.MaxUnmapBlocks {
			return badParam(8+16*i+8, -1)
		}
		if f := lu.checkRange(lba, uint64(cnt)); f.failed() {
			return f
		}
	}
	defer lu.lockForUnmap()()
	for i := 0; i < nd; i++ {
		d := p[8+16*i:]
		lba, cnt := be64(d), be32(d[8:])
		if cnt == 0 {
			continue
		}
		if err := lu.unmapper.Unmap(lu.byteOff(lba), int64(cnt)<<lu.shift); err != nil {
			return ioFailure(err, true, lba)
		}
	}
	return ok
}

// execSyncCache: SYNCHRONIZE CACHE(10/16), SBC-3 §5.22–5.23. NUMBER OF
// LOGICAL BLOCKS 0 means through the last LBA. The whole backstore is
// flushed (fdatasync), which covers the range.
func execSyncCache(c *cmdCtx) failure {
	lu := c.lu
	lba, n, _ := lbaLen(c.cdb)
	if n == 0 {
		if lba >= lu.blocks.Load() && !(lba == 0 && lu.blocks.Load() == 0) {
			return fail(ReasonLBAOutOfRange)
		}
	} else if f := lu.checkRange(lba, uint64(n)); f.failed() {
		return f
	}
	if lu.syncer != nil {
		if err := lu.flush.Sync(); err != nil {
			return ioFailure(err, true, lba)
		}
	}
	return ok
}

// execPreFetch: PRE-FETCH(10/16), SBC-3 §5.7–5.8. The range is
// validated and nothing is loaded: the core keeps no cache of its own, and
// SBC-3 completes a PRE-FETCH whose blocks are not (all) held in a cache
// with GOOD status rather than CONDITION MET. GOOD is also what libiscsi's
// PRE-FETCH tests and the Linux sd driver accept as success.
func execPreFetch(c *cmdCtx) failure {
	lu := c.lu
	lba, n, _ := lbaLen(c.cdb)
	return lu.checkRange(lba, uint64(n))
}

// lastLBA is READ CAPACITY's RETURNED LOGICAL BLOCK ADDRESS: the last
// block's LBA, 0 for a logical unit without blocks.
func (lu *LogicalUnit) lastLBA() uint64 {
	if n := lu.blocks.Load(); n > 0 {
		return n - 1
	}
	return 0
}

// execReadCapacity10: READ CAPACITY(10), SBC-3 §5.15. A capacity beyond
// 2^32 blocks reports FFFFFFFFh so the initiator uses READ CAPACITY(16).
func execReadCapacity10(c *cmdCtx) failure {
	lu := c.lu
	pmi := c.cdb[8]&0x01 != 0
	if !pmi && be32(c.cdb[2:]) != 0 {
		return badCDB(2, -1)
	}
	b := make([]byte, 8)
	last := lu.lastLBA()
	binary.BigEndian.PutUint32(b, uint32(min(last, 0xFFFFFFFF)))
	binary.BigEndian.PutUint32(b[4:], lu.bsz)
	return c.putDataIn(b, 8)
}

// execReadCapacity16: READ CAPACITY(16), SBC-3 §5.16 (32 bytes).
func execReadCapacity16(c *cmdCtx) failure {
	lu := c.lu
	alloc := int(be32(c.cdb[10:]))
	pmi := c.cdb[14]&0x01 != 0
	if !pmi && be64(c.cdb[2:]) != 0 {
		return badCDB(2, -1)
	}
	b := make([]byte, 32)
	last := lu.lastLBA()
	binary.BigEndian.PutUint64(b, last)
	binary.BigEndian.PutUint32(b[8:], lu.bsz)
	b[13] = lu.pbExp // LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT
	if lu.unmapper != nil {
		b[14] = 0x80 | 0x40 // LBPME, LBPRZ
	}
	return c.putDataIn(b, alloc)
}

// Provisioning status values of GET LBA STATUS descriptors (SBC-3 table 39).
const (
	lbaMapped      = 0x0
	lbaDeallocated = 0x1
)

// maxLBAStatusDescriptors bounds one GET LBA STATUS response.
const maxLBAStatusDescriptors = 64

// execGetLBAStatus: GET LBA STATUS, SBC-3 §5.6. Blocks partly allocated
// are reported mapped.
func execGetLBAStatus(c *cmdCtx) failure {
	lu := c.lu
	lba := be64(c.cdb[2:])
	alloc := int(be32(c.cdb[10:]))
	blocks := lu.blocks.Load()
	if lba >= blocks {
		return fail(ReasonLBAOutOfRange)
	}
	maxD := min(maxLBAStatusDescriptors, max(1, (alloc-8)/16))
	b := make([]byte, 8, 8+16*maxD)
	type desc struct {
		lba, n uint64
		st     byte
	}
	var ds []desc
	add := func(start, end uint64, st byte) {
		if l := len(ds); l > 0 && ds[l-1].st == st && ds[l-1].lba+ds[l-1].n == start && ds[l-1].n+(end-start) <= 0xFFFFFFFF {
			ds[l-1].n += end - start
			return
		}
		ds = append(ds, desc{start, end - start, st})
	}
	pos := lba
	for pos < blocks && len(ds) < maxD {
		if lu.allocStat == nil || lu.unmapper == nil {
			// Without logical block provisioning every LBA is mapped.
			add(pos, min(blocks, pos+0xFFFFFFFF), lbaMapped)
			break
		}
		off := lu.byteOff(pos)
		mapped, l, err := lu.allocStat.AllocationStatus(off, lu.byteOff(blocks)-off)
		if err != nil {
			return ioFailure(err, false, pos)
		}
		endByte := uint64(off + l)
		var end uint64
		st := byte(lbaMapped)
		if mapped {
			end = (endByte + uint64(lu.bsz) - 1) >> lu.shift
		} else {
			end = endByte >> lu.shift
			st = lbaDeallocated
			if end <= pos {
				end, st = pos+1, lbaMapped
			}
		}
		end = min(end, blocks, pos+0xFFFFFFFF)
		add(pos, end, st)
		pos = end
	}
	if len(ds) > maxD {
		ds = ds[:maxD]
	}
	for _, d := range ds {
		b = binary.BigEndian.AppendUint64(b, d.lba)
		b = binary.BigEndian.AppendUint32(b, uint32(d.n))
		b = append(b, d.st, 0, 0, 0)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return c.putDataIn(b, alloc)
}

// isReadWrite reports whether op is READ or WRITE (6, 10, 12 or 16).
func isReadWrite(op byte) bool {
	switch op {
	case opRead6, opRead10, opRead12, opRead16, opWrite6, opWrite10, opWrite12, opWrite16:
		return true
	}
	return false
}

// transferLengths returns the data-out and data-in bytes a validated CDB
// asks for, or -1 for a direction whose length only execution knows: READ
// and WRITE (6, 10, 12, 16) and WRITE AND VERIFY (10, 12, 16) transfer
// TRANSFER LENGTH logical blocks (SBC-3 §5). A READ asks for no data-out
// and a WRITE for no data-in.
func (lu *LogicalUnit) transferLengths(cdb []byte) (out, in int) {
	switch cdb[0] {
	case opRead6, opRead10, opRead12, opRead16:
		_, n, _ := lbaLen(cdb)
		return 0, int(n) << lu.shift
	case opWrite6, opWrite10, opWrite12, opWrite16,
		opWriteAndVerify10, opWriteAndVerify12, opWriteAndVerify16:
		_, n, _ := lbaLen(cdb)
		return int(n) << lu.shift, 0
	}
	return -1, -1
}
