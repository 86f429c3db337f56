package scsi

import "encoding/binary"

// Mode page lengths in bytes, headers included (SBC-3 §6.4, SPC-4 §7.5).
const (
	pageRWErrLen   = 12 // 01h Read-Write Error Recovery (PAGE LENGTH 0Ah)
	pageCachingLen = 20 // 08h Caching (PAGE LENGTH 12h)
	pageControlLen = 12 // 0Ah Control (PAGE LENGTH 0Ah)
	pageIELen      = 12 // 1Ch Informational Exceptions Control (PAGE LENGTH 0Ah)
)

// modePages holds one set of mode page values (current, default or
// changeable), each page with its 2-byte header.
type modePages struct {
	rwErr   [pageRWErrLen]byte
	caching [pageCachingLen]byte
	control [pageControlLen]byte
	ie      [pageIELen]byte
}

// Control mode page fields (SPC-4 §7.5.8, table 434).
func (m *modePages) tst() byte    { return m.control[2] >> 5 }
func (m *modePages) dsense() bool { return m.control[2]&0x04 != 0 }
func (m *modePages) qerr() byte   { return (m.control[3] >> 1) & 0x03 }
func (m *modePages) tas() bool    { return m.control[5]&0x40 != 0 }
func (m *modePages) swp() bool    { return m.control[4]&0x08 != 0 }

// wce is the caching page's WCE bit (SBC-3 §6.4.5, table 183).
func (m *modePages) wce() bool { return m.caching[2]&0x04 != 0 }

// page returns the page with code pc, or nil.
func (m *modePages) page(pc byte) []byte {
	switch pc {
	case 0x01:
		return m.rwErr[:]
	case 0x08:
		return m.caching[:]
	case 0x0A:
		return m.control[:]
	case 0x1C:
		return m.ie[:]
	}
	return nil
}

// modePageOrder lists the page codes in MODE SENSE "all pages" order.
var modePageOrder = [...]byte{0x01, 0x08, 0x0A, 0x1C}

// defaultModePages returns the default values, LIO's where LIO has them
// (spc_modesense_*): caching DRA=1; control GLTSD=1, QAM=1 (SIMPLE tasks
// may be reordered), TAS=1, BUSY TIMEOUT PERIOD unlimited, EXTENDED SELF-TEST
// COMPLETION TIME 30 s; informational exceptions DEXCPT=1 (none reported).
func defaultModePages(lu *LogicalUnit) modePages {
	var m modePages
	m.rwErr[0], m.rwErr[1] = 0x01, pageRWErrLen-2
	m.caching[0], m.caching[1] = 0x08, pageCachingLen-2
	if lu.cfg.WriteCache && lu.syncer != nil {
		m.caching[2] = 0x04
	}
	m.caching[12] = 0x20
	m.control[0], m.control[1] = 0x0A, pageControlLen-2
	m.control[2] = 0x02
	m.control[3] = 0x10
	m.control[5] = 0x40
	m.control[8], m.control[9] = 0xFF, 0xFF
	m.control[11] = 30
	m.ie[0], m.ie[1] = 0x1C, pageIELen-2
	m.ie[2] = 0x08
	return m
}

// changeableModePages returns the changeable-values mask: WCE (only with a
// volatile cache to enable); TST, D_SENSE, QERR, SWP, TAS; the informational
// exceptions PERF, EWASC, DEXCPT, LOGERR, MRIE, INTERVAL TIMER and REPORT
// COUNT.
func (lu *LogicalUnit) changeableModePages() modePages {
	var m modePages
	m.rwErr[0], m.rwErr[1] = 0x01, pageRWErrLen-2
	m.caching[0], m.caching[1] = 0x08, pageCachingLen-2
	if lu.syncer != nil {
		m.caching[2] = 0x04
	}
	m.control[0], m.control[1] = 0x0A, pageControlLen-2
	m.control[2] = 0xE0 | 0x04
	m.control[3] = 0x06
	m.control[4] = 0x08 // SWP
	m.control[5] = 0x40
	m.ie[0], m.ie[1] = 0x1C, pageIELen-2
	m.ie[2] = 0x99
	m.ie[3] = 0x0F
	for i := 4; i < pageIELen; i++ {
		m.ie[i] = 0xFF
	}
	return m
}

// execModeSense: MODE SENSE(6) SPC-4 §6.11, MODE SENSE(10) §6.12.
func execModeSense(c *cmdCtx) failure {
	lu := c.lu
	ten := c.cdb[0] == opModeSense10
	dbd := c.cdb[1]&0x08 != 0
	llbaa := ten && c.cdb[1]&0x10 != 0
	pc := c.cdb[2] >> 6
	code := c.cdb[2] & 0x3F
	sub := c.cdb[3]
	var alloc int
	if ten {
		alloc = int(be16(c.cdb[7:]))
	} else {
		alloc = int(c.cdb[4])
	}
	if pc == 3 && lu.cfg.ModePages == nil {
		return fail(ReasonSavingNotSupported)
	}
	var pages modePages
	switch pc {
	case 0:
		lu.mu.Lock()
		pages = lu.mode
		lu.mu.Unlock()
	case 1:
		pages = lu.changeableModePages()
	case 2:
		pages = lu.modeDefs
	case 3:
		lu.mu.Lock()
		pages = lu.saved
		lu.mu.Unlock()
	}
	if lu.cfg.ModePages != nil {
		// PS: the pages are savable (SPC-4 §7.5.7).
		for _, p := range modePageOrder {
			pages.page(p)[0] |= 0x80
		}
	}
	var body []byte
	if code == 0x3F {
		if sub != 0 && sub != 0xFF {
			return badCDB(3, -1)
		}
		for _, p := range modePageOrder {
			body = append(body, pages.page(p)...)
		}
	} else {
		p := pages.page(code)
		if p == nil {
			return badCDB(2, 5)
		}
		// Subpage FFh asks for every subpage of the page: here only
		// subpage 0 exists.
		if sub != 0 && sub != 0xFF {
			return badCDB(3, -1)
		}
		body = append(body, p...)
	}
	devSpecific := byte(0x10) // DPOFUA
	if lu.cfg.ReadOnly || lu.swp.Load() || c.ro {
		devSpecific |= 0x80 // WP
	}
	var bd []byte
	if !dbd {
		blocks := lu.blocks.Load()
		if llbaa {
			bd = make([]byte, 16)
			if pc != 1 {
				binary.BigEndian.PutUint64(bd, blocks)
				binary.BigEndian.PutUint32(bd[12:], lu.bsz)
			}
		} else {
			bd = make([]byte, 8)
			if pc != 1 {
				binary.BigEndian.PutUint32(bd, uint32(min(blocks, 0xFFFFFFFF)))
				bd[5], bd[6], bd[7] = byte(lu.bsz>>16), byte(lu.bsz>>8), byte(lu.bsz)
			}
		}
	}
	var b []byte
	if ten {
		b = make([]byte, 8, 8+len(bd)+len(body))
		b[3] = devSpecific
		if llbaa && !dbd {
			b[4] = 0x01 // LONGLBA
		}
		binary.BigEndian.PutUint16(b[6:], uint16(len(bd)))
	} else {
		b = make([]byte, 4, 4+len(bd)+len(body))
		b[2] = devSpecific
		b[3] = byte(len(bd))
	}
	b = append(append(b, bd...), body...)
	if ten {
		binary.BigEndian.PutUint16(b, uint16(len(b)-2))
	} else {
		b[0] = byte(len(b) - 1)
	}
	return c.putDataIn(b, alloc)
}

// execModeSelect: MODE SELECT(6) SPC-4 §6.9, MODE SELECT(10) §6.10. Only
// bits in the changeable mask may differ from the current values; any other
// difference is INVALID FIELD IN PARAMETER LIST pointing at it. SP=1 saves
// the pages through LUConfig.ModePages (without one, SP=1 is INVALID FIELD
// IN CDB). A change gives the other
// I_T nexuses MODE PARAMETERS CHANGED (SPC-4 §7.5.2).
func execModeSelect(c *cmdCtx) failure {
	lu := c.lu
	ten := c.cdb[0] == opModeSelect10
	var plen, hl int
	if ten {
		plen, hl = int(be16(c.cdb[7:])), 8
	} else {
		plen, hl = int(c.cdb[4]), 4
	}
	if f := c.needsParamList(plen); f.failed() {
		return f
	}
	if plen == 0 {
		return ok
	}
	save := c.cdb[1]&0x01 != 0
	if save && lu.cfg.ModePages == nil {
		return badCDB(1, 0)
	}
	if c.cdb[1]&0x10 == 0 {
		return badCDB(1, 4)
	}
	if plen < hl {
		return fail(ReasonParamListLength)
	}
	p := c.cmd.DataOut[:plen]
	var bdl int
	long := false
	if ten {
		if p[2] != 0 {
			return badParam(2, -1)
		}
		long = p[4]&0x01 != 0
		bdl = int(be16(p[6:]))
	} else {
		if p[1] != 0 {
			return badParam(1, -1)
		}
		bdl = int(p[3])
	}
	dlen := 8
	if long {
		dlen = 16
	}
	if bdl%dlen != 0 {
		return badParam(hl-1, -1)
	}
	if hl+bdl > plen {
		return fail(ReasonParamListLength)
	}
	for off := hl; off < hl+bdl; off += dlen {
		var bl uint32
		if long {
			bl = be32(p[off+12:])
		} else {
			bl = be24(p[off+5:])
		}
		if bl != lu.bsz {
			if long {
				return badParam(off+12, -1)
			}
			return badParam(off+5, -1)
		}
	}
	chg := lu.changeableModePages()
	lu.mu.Lock()
	defer lu.mu.Unlock()
	next := lu.mode
	for off := hl + bdl; off < plen; {
		if plen-off < 2 {
			return fail(ReasonParamListLength)
		}
		if p[off]&0x40 != 0 { // SPF: no subpages are supported
			return badParam(off, 6)
		}
		code := p[off] & 0x3F
		cur := next.page(code)
		if cur == nil {
			return badParam(off, 5)
		}
		mask := chg.page(code)
		if int(p[off+1]) != len(cur)-2 {
			return badParam(off+1, -1)
		}
		if off+len(cur) > plen {
			return fail(ReasonParamListLength)
		}
		for i := 2; i < len(cur); i++ {
			if d := (p[off+i] ^ cur[i]) &^ mask[i]; d != 0 {
				return badParam(off+i, bitLen(d)-1)
			}
		}
		var np [pageCachingLen]byte
		copy(np[:], cur)
		for i := 2; i < len(cur); i++ {
			np[i] = cur[i]&^mask[i] | p[off+i]&mask[i]
		}
		if code == 0x0A {
			if tst := np[2] >> 5; tst > 1 {
				return badParam(off+2, 7)
			}
			if (np[3]>>1)&3 == 2 {
				return badParam(off+3, 2)
			}
		}
		copy(cur, np[:len(cur)])
		off += len(cur)
	}
	if save && next != lu.saved {
		// SP=1: every savable page is saved, those sent included.
		if err := lu.cfg.ModePages.Save(next.image()); err != nil {
			lu.logger().Warn("scsi: saving mode pages failed", "err", err)
			return fail(ReasonInternalFailure)
		}
		lu.saved = next
	}
	if next != lu.mode {
		lu.mode = next
		lu.applyModeLocked()
		for k := range lu.uas {
			if k != c.s.key {
				lu.establishUALocked(k, ReasonUAModeChanged)
			}
		}
	}
	return ok
}

// applyModeLocked pushes the current mode values to the fast-path copies.
// lu.mu must be held.
func (lu *LogicalUnit) applyModeLocked() {
	lu.wce.Store(lu.mode.wce())
	lu.dsenseBit.Store(lu.mode.dsense())
	lu.swp.Store(lu.mode.swp())
	lu.ts.mu.Lock()
	lu.ts.perNexus = lu.mode.tst() == 1
	lu.ts.mu.Unlock()
}

func bitLen(b byte) int {
	n := 0
	for b != 0 {
		n++
		b >>= 1
	}
	return n
}
