package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// putDataIn copies data into the command's data-in buffer, limited by the
// CDB's allocation length and the initiator's buffer (SPC-4 §4.3.5.6).
func (c *cmdCtx) putDataIn(data []byte, alloc int) failure {
	n := min(len(data), alloc, len(c.cmd.DataIn))
	copy(c.cmd.DataIn, data[:n])
	c.res.DataInLen = n
	c.res.DataInWanted = alloc
	return ok
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
func be24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// execTestUnitReady: SPC-4 §6.47. The medium is always ready.
func execTestUnitReady(c *cmdCtx) failure { return ok }

// execRequestSense: SPC-4 §6.39. Reports (and clears) a pending unit
// attention, else NO SENSE; on a LUN without a logical unit, LOGICAL UNIT
// NOT SUPPORTED — all with GOOD status.
func execRequestSense(c *cmdCtx) failure {
	desc := c.cdb[1]&0x01 != 0
	alloc := int(c.cdb[4])
	var f failure
	if c.lu == nil {
		f = fail(ReasonLUNNotSupported)
	} else if r := c.lu.takeUA(c.s.key); r != ReasonNone {
		f = fail(r)
	}
	// Without a pending condition: NO SENSE, no additional sense
	// information (SPC-4 §6.39).
	return c.putDataIn(buildSense(f, desc), alloc)
}

// Peripheral device type and qualifier byte 0 of INQUIRY data.
const (
	pdtDisk          = 0x00 // direct access block device, qualifier 000b
	pdtNotConnected  = 0x7F // qualifier 011b, type 1Fh: no LU at this LUN
	inquiryStdLength = 96   // bytes of standard INQUIRY data
)

// VPD page codes served (SPC-4 §7.8, SBC-3 §6.6).
var vpdPages = []byte{0x00, 0x80, 0x83, 0x86, 0xB0, 0xB1, 0xB2}

// execInquiry: SPC-4 §6.6.
func execInquiry(c *cmdCtx) failure {
	evpd := c.cdb[1]&0x01 != 0
	page := c.cdb[2]
	alloc := int(be16(c.cdb[3:]))
	if !evpd {
		if page != 0 {
			return badCDB(2, -1)
		}
		return c.putDataIn(c.standardInquiry(), alloc)
	}
	if c.lu == nil {
		// No logical unit (SPC-4 §6.6.1: CHECK CONDITION only for data
		// the device server cannot return): the Supported VPD Pages page,
		// listing itself alone, with the peripheral qualifier 011b and
		// type 1Fh of the standard data (§7.8.1); the other pages describe
		// a logical unit there is not.
		if page != 0x00 {
			return badCDB(2, -1)
		}
		data := vpdHeader(0x00, []byte{0x00})
		data[0] = pdtNotConnected
		return c.putDataIn(data, alloc)
	}
	var data []byte
	switch page {
	case 0x00:
		data = vpdHeader(0x00, c.lu.supportedVPD())
	case 0x80:
		data = vpdHeader(0x80, []byte(c.lu.serial))
	case 0x83:
		data = vpdHeader(0x83, c.deviceIdentification())
	case 0x86:
		data = vpdHeader(0x86, c.lu.extendedInquiry())
	case 0xB0:
		data = vpdHeader(0xB0, c.lu.blockLimits())
	case 0xB1:
		data = vpdHeader(0xB1, c.lu.blockCharacteristics())
	case 0xB2:
		if c.lu.unmapper == nil {
			return badCDB(2, -1)
		}
		data = vpdHeader(0xB2, c.lu.provisioning())
	default:
		return badCDB(2, -1)
	}
	return c.putDataIn(data, alloc)
}

func (lu *LogicalUnit) supportedVPD() []byte {
	if lu.unmapper != nil {
		return vpdPages
	}
	return vpdPages[:len(vpdPages)-1]
}

// vpdHeader prepends the 4-byte VPD page header (SPC-4 §7.8.1) for a
// direct-access device.
func vpdHeader(page byte, body []byte) []byte {
	b := make([]byte, 4+len(body))
	b[0] = pdtDisk
	b[1] = page
	binary.BigEndian.PutUint16(b[2:], uint16(len(body)))
	copy(b[4:], body)
	return b
}

// standardInquiry builds the 96-byte standard INQUIRY data
// (SPC-4 §6.6.2, table 142).
func (c *cmdCtx) standardInquiry() []byte {
	b := make([]byte, inquiryStdLength)
	if c.lu == nil {
		b[0] = pdtNotConnected
	} else {
		b[0] = pdtDisk
	}
	b[2] = 0x06 // VERSION: SPC-4
	b[3] = 0x12 // HISUP=1, RESPONSE DATA FORMAT=2
	b[4] = byte(len(b) - 5)
	b[5] = 0x30 // TPGS=11b: implicit and explicit ALUA (REPORT/SET TARGET PORT GROUPS)
	b[7] = 0x02 // CMDQUE
	if c.lu != nil {
		copy(b[8:16], c.lu.vendor[:])
		copy(b[16:32], c.lu.product[:])
		copy(b[32:36], c.lu.rev[:])
	} else {
		copy(b[8:36], "GOSRP   NO LU           0001")
	}
	// Version descriptors (SPC-4 table 144): SAM-5, SRP, SPC-4, SBC-3.
	for i, v := range []uint16{0x00A0, 0x0940, 0x0460, 0x04C0} {
		binary.BigEndian.PutUint16(b[58+2*i:], v)
	}
	return b
}

// deviceIdentification builds the designators of VPD page 83h
// (SPC-4 §7.8.6): NAA (logical unit), T10 vendor ID (logical unit),
// relative target port and target port group (target port).
func (c *cmdCtx) deviceIdentification() []byte {
	lu := c.lu
	var b []byte
	// NAA IEEE Registered Extended: code set binary, association LU, type 3.
	b = append(b, 0x01, 0x03, 0x00, 16)
	b = append(b, lu.naa[:]...)
	// T10 vendor ID based: code set ASCII, association LU, type 1:
	// T10 VENDOR IDENTIFICATION then the unit serial number.
	t10 := append(slices.Clone(lu.vendor[:]), lu.serial...)
	b = append(b, 0x02, 0x01, 0x00, byte(len(t10)))
	b = append(b, t10...)
	proto := c.s.t.protID << 4
	// Relative target port: PIV=1, association target port, type 4.
	b = append(b, proto|0x01, 0x80|0x10|0x04, 0x00, 4, 0, 0)
	b = binary.BigEndian.AppendUint16(b, c.s.nexus.RelativeTargetPort)
	// Target port group: PIV=1, association target port, type 5.
	b = append(b, proto|0x01, 0x80|0x10|0x05, 0x00, 4, 0, 0)
	b = binary.BigEndian.AppendUint16(b, c.s.t.alua.Load().local)
	if name := c.s.nexus.TargetPortName; name != "" {
		// SCSI name strings: code set UTF-8, PIV=1, type 8; association
		// target port, then target device.
		port := fmt.Sprintf("%s,t,0x%04x", name, c.s.nexus.RelativeTargetPort)
		b = appendSCSIName(b, proto|0x03, 0x80|0x10|0x08, port)
		b = appendSCSIName(b, proto|0x03, 0x80|0x20|0x08, name)
	}
	return b
}

// appendSCSIName appends a SCSI name string designator (SPC-4 §7.8.6.11):
// the name, a terminating NUL and NUL padding to a multiple of 4 bytes.
func appendSCSIName(b []byte, b0, b1 byte, name string) []byte {
	n := (len(name) + 1 + 3) &^ 3
	if n > 252 { // the DESIGNATOR LENGTH is one byte; keep it a multiple of 4
		n = 252
		name = name[:n-1]
	}
	b = append(b, b0, b1, 0x00, byte(n))
	b = append(b, name...)
	return append(b, make([]byte, n-len(name))...)
}

// extendedInquiry is the body of VPD page 86h (SPC-4 §7.8.7): HEADSUP,
// ORDSUP, SIMPSUP; V_SUP when the backstore has a volatile cache.
func (lu *LogicalUnit) extendedInquiry() []byte {
	b := make([]byte, 0x3C)
	b[1] = 0x07 // byte 5: HEADSUP ORDSUP SIMPSUP
	if lu.syncer != nil {
		b[2] = 0x01 // byte 6: V_SUP
	}
	return b
}

// blockLimits is the body of VPD page B0h (SBC-3 §6.6.4, table 200).
func (lu *LogicalUnit) blockLimits() []byte {
	b := make([]byte, 0x3C)
	// Offsets below are page offsets minus the 4-byte header.
	b[0] = 0x01 // byte 4: WSNZ (WRITE SAME with 0 blocks is rejected, as LIO)
	b[1] = lu.cfg.MaxCompareAndWriteBlocks
	binary.BigEndian.PutUint16(b[2:], 1<<lu.pbExp) // OPTIMAL TRANSFER LENGTH GRANULARITY: a physical block
	maxXfer := lu.cfg.MaxTransferBytes >> lu.shift
	binary.BigEndian.PutUint32(b[4:], maxXfer) // MAXIMUM TRANSFER LENGTH
	binary.BigEndian.PutUint32(b[8:], maxXfer) // OPTIMAL TRANSFER LENGTH
	if lu.unmapper != nil {
		binary.BigEndian.PutUint32(b[16:], lu.cfg.MaxUnmapBlocks)          // MAXIMUM UNMAP LBA COUNT
		binary.BigEndian.PutUint32(b[20:], lu.cfg.MaxUnmapDescriptors)     // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT
		binary.BigEndian.PutUint32(b[24:], max(1, uint32(4096)>>lu.shift)) // OPTIMAL UNMAP GRANULARITY: 4 KiB
	}
	binary.BigEndian.PutUint64(b[32:], lu.cfg.MaxWriteSameBlocks) // MAXIMUM WRITE SAME LENGTH
	return b
}

// blockCharacteristics is the body of VPD page B1h (SBC-3 §6.6.2).
func (lu *LogicalUnit) blockCharacteristics() []byte {
	b := make([]byte, 0x3C)
	binary.BigEndian.PutUint16(b[0:], lu.cfg.RotationRate)
	return b
}

// provisioning is the body of VPD page B2h (SBC-3 §6.6.5): LBPU, LBPWS,
// LBPWS10, LBPRZ; provisioning type thin.
func (lu *LogicalUnit) provisioning() []byte {
	return []byte{0x00, 0x80 | 0x40 | 0x20 | 0x04, 0x02, 0x00}
}

// execReportLUNs: SPC-4 §6.33. SELECT REPORT 00h and 02h list every
// logical unit; 01h (well known logical units) lists none. With no logical
// unit at all, LUN 0 is listed, as LIO's virtual LUN 0. Having reported the
// inventory, the command clears the nexus's REPORTED LUNS DATA HAS CHANGED
// unit attentions on every logical unit (SPC-4 §6.33), so an initiator that
// rescans on that condition is not sent it again by each LU.
func execReportLUNs(c *cmdCtx) failure {
	sel := c.cdb[2]
	alloc := int(be32(c.cdb[6:]))
	if sel > 2 {
		return badCDB(2, -1)
	}
	if alloc < 16 {
		return badCDB(6, -1)
	}
	var luns []uint64
	if sel != 1 {
		luns = c.s.reportedLUNs()
	}
	b := make([]byte, 8+8*len(luns))
	binary.BigEndian.PutUint32(b, uint32(8*len(luns)))
	for i, l := range luns {
		binary.BigEndian.PutUint64(b[8+8*i:], EncodeLUN(l))
	}
	for _, lu := range *c.s.t.luns.Load() {
		lu.clearUA(c.s.key, ReasonUALUNsChanged)
	}
	return c.putDataIn(b, alloc)
}

// execReportTMFs: SPC-4 §6.36. ABORT TASK, ABORT TASK SET, CLEAR TASK SET,
// LOGICAL UNIT RESET.
func execReportTMFs(c *cmdCtx) failure {
	repd := c.cdb[2]&0x80 != 0
	alloc := int(be32(c.cdb[6:]))
	b := make([]byte, 4)
	if repd {
		b = make([]byte, 16)
		b[3] = 0x0C // ADDITIONAL DATA LENGTH
	}
	b[0] = 0x80 | 0x40 | 0x10 | 0x08 // ATS ATSS CTSS LURS
	return c.putDataIn(b, alloc)
}

// execReportOpcodes: SPC-4 §6.35, generated from the opcode table.
func execReportOpcodes(c *cmdCtx) failure {
	rctd := c.cdb[2]&0x80 != 0
	opt := c.cdb[2] & 0x07
	reqOp := c.cdb[3]
	reqSA := be16(c.cdb[4:])
	alloc := int(be32(c.cdb[6:]))
	ops := c.s.t.ops
	timeouts := func(b []byte, e *opEntry) []byte {
		b = append(b, 0x00, 0x0A, 0, 0)
		b = binary.BigEndian.AppendUint32(b, e.nominal)
		return binary.BigEndian.AppendUint32(b, e.recommended)
	}
	switch opt {
	case 0: // all commands (table 291/292)
		b := make([]byte, 4, 4+len(ops.all)*20)
		for _, e := range ops.all {
			flags := byte(0)
			if e.hasSA {
				flags |= 0x01 // SERVACTV
			}
			if rctd {
				flags |= 0x02 // CTDP
			}
			b = append(b, e.op, 0)
			b = binary.BigEndian.AppendUint16(b, e.sa)
			b = append(b, 0, flags)
			b = binary.BigEndian.AppendUint16(b, uint16(e.cdbLen()))
			if rctd {
				b = timeouts(b, e)
			}
		}
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return c.putDataIn(b, alloc)
	case 1, 2, 3:
		var e *opEntry
		hasSAs := ops.sa[reqOp] != nil
		switch opt {
		case 1:
			if hasSAs {
				return badCDB(2, 2)
			}
			if reqSA != 0 {
				return badCDB(4, -1)
			}
			e = ops.plain[reqOp]
		case 2:
			if !hasSAs && ops.plain[reqOp] != nil {
				return badCDB(2, 2)
			}
			for _, x := range ops.sa[reqOp] {
				if x.sa == reqSA {
					e = x
				}
			}
		case 3:
			if hasSAs {
				for _, x := range ops.sa[reqOp] {
					if x.sa == reqSA {
						e = x
					}
				}
			} else {
				e = ops.plain[reqOp]
			}
		}
		b := make([]byte, 4)
		if e == nil {
			b[1] = 0x01 // SUPPORT 001b: not supported
			return c.putDataIn(b, alloc)
		}
		b[1] = 0x03 // SUPPORT 011b: supported per standard
		if rctd {
			b[1] |= 0x80
		}
		binary.BigEndian.PutUint16(b[2:], uint16(e.cdbLen()))
		b = append(b, e.usage...)
		if rctd {
			b = timeouts(b, e)
		}
		return c.putDataIn(b, alloc)
	}
	return badCDB(2, 2)
}

// execStartStop: SBC-3 §5.25, as LIO's sbc_emulate_startstop: the medium
// cannot be ejected and power conditions are not supported; START and stop
// requests succeed without changing readiness.
func execStartStop(c *cmdCtx) failure {
	if c.cdb[4]&0xF0 != 0 {
		return badCDB(4, 7)
	}
	if c.cdb[4]&0x02 != 0 { // LOEJ
		return badCDB(4, 1)
	}
	return ok
}

// execPreventAllow: SPC-4 §6.13. The medium is not removable (RMB=0), so
// PREVENT 00b and 01b have nothing to act on and succeed; 10b and 11b
// (obsolete medium changer values) are invalid.
func execPreventAllow(c *cmdCtx) failure {
	if c.cdb[4]&0x03 > 1 {
		return badCDB(4, 1)
	}
	return ok
}

// execReportTimestamp: REPORT TIMESTAMP, SPC-4 §6.38 (table 309): the
// target's clock in milliseconds since the Unix epoch, TIMESTAMP ORIGIN
// 011b (set by a method outside SPC-4: the host clock).
func execReportTimestamp(c *cmdCtx) failure {
	alloc := int(be32(c.cdb[6:]))
	ms := uint64(c.s.t.clock.Now().UnixMilli())
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b, 10) // TIMESTAMP PARAMETER DATA LENGTH
	b[2] = 0x03
	for i := 0; i < 6; i++ {
		b[4+i] = byte(ms >> (40 - 8*i))
	}
	return c.putDataIn(b, alloc)
}
