package pr

import "encoding/binary"

// In performs PERSISTENT RESERVE IN (CDB opcode 5Eh, SPC-4 §6.15) from n and
// writes the parameter data into dst. It writes min(ALLOCATION LENGTH (CDB
// bytes 7–8), len(dst), length of the parameter data) bytes and returns
// that count; truncation is not an error, and the length fields still give
// the full length (SPC-4 §4.2.5.6).
//
// Service actions: READ KEYS (00h, table 201), READ RESERVATION (01h, tables
// 202–203), REPORT CAPABILITIES (02h, table 204), READ FULL STATUS (03h,
// tables 206–207). Another service action, or a CDB shorter than 10 bytes,
// gets INVALID FIELD IN CDB. While an SPC-2 reservation exists, any PERSISTENT
// RESERVE IN gets RESERVATION CONFLICT (SPC-2 §5.5.1), before the service
// action is checked.
func (s *State) In(n Nexus, cdb []byte, dst []byte) (int, Outcome) {
	if len(cdb) < 10 || cdb[0] != OpPersistentReserveIn {
		return 0, badCDB(0, 7)
	}
	alloc := int(binary.BigEndian.Uint16(cdb[7:9]))
	s.mu.Lock()
	if s.rsv != nil {
		s.mu.Unlock()
		return 0, conflict
	}
	if err := s.refreshLocked(); err != nil {
		s.mu.Unlock()
		s.log.Warn("shared persistent reservation state not read", "err", err)
		return 0, outcome(InternalTargetFailure)
	}
	var data []byte
	switch cdb[1] & 0x1f {
	case InReadKeys:
		data = s.c.readKeys()
	case InReadReservation:
		data = s.c.readReservation()
	case InReportCapabilities:
		data = s.reportCapabilities()
	case InReadFullStatus:
		data = s.c.readFullStatus()
	default:
		s.mu.Unlock()
		return 0, badCDB(1, 4)
	}
	s.mu.Unlock()
	m := min(alloc, len(dst), len(data))
	copy(dst, data[:m])
	return m, good
}

// readKeys builds READ KEYS parameter data: PRgeneration (bytes 0–3),
// ADDITIONAL LENGTH (4–7), then each registration's 8-byte key.
func (c *core) readKeys() []byte {
	b := make([]byte, 8, 8+8*len(c.regs))
	binary.BigEndian.PutUint32(b[0:], c.gen)
	binary.BigEndian.PutUint32(b[4:], uint32(8*len(c.regs)))
	for _, r := range c.regs {
		b = binary.BigEndian.AppendUint64(b, r.key)
	}
	return b
}

// readReservation builds READ RESERVATION parameter data: PRgeneration,
// ADDITIONAL LENGTH (0, or 10h with a reservation), then the reservation
// descriptor: key (8–15; zero for all-registrants types, SPC-4 §5.13.10),
// obsolete (16–19), reserved (20), SCOPE|TYPE (21), obsolete (22–23).
func (c *core) readReservation() []byte {
	if c.res == nil {
		b := make([]byte, 8)
		binary.BigEndian.PutUint32(b[0:], c.gen)
		return b
	}
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b[0:], c.gen)
	binary.BigEndian.PutUint32(b[4:], 16)
	if !c.res.typ.AllRegistrants() {
		binary.BigEndian.PutUint64(b[8:], c.byID(c.res.holder).key)
	}
	b[21] = ScopeLU<<4 | byte(c.res.typ)
	return b
}

// reportCapabilities builds REPORT CAPABILITIES parameter data (8 bytes):
// LENGTH 8; CRH=1, SIP_C=1, ATP_C=1, PTPL_C if a Persister is configured;
// TMV=1, ALLOW COMMANDS=011b (TEST UNIT READY allowed through WR_EX and
// EX_AC; MODE SENSE, READ BUFFER, ... allowed through WR_EX, see Classify),
// PTPL_A; type mask with all six types (byte 4 = EAh, byte 5 = 01h).
func (s *State) reportCapabilities() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[0:], 8)
	b[2] = 0x10 | 0x08 | 0x04 // CRH, SIP_C, ATP_C
	if s.cfg.Persister != nil || s.cfg.Shared != nil {
		b[2] |= 0x01 // PTPL_C
	}
	b[3] = 0x80 | 0x3<<4 // TMV, ALLOW COMMANDS 011b
	if s.c.aptpl {
		b[3] |= 0x01 // PTPL_A
	}
	b[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02 // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
	b[5] = 0x01                             // EX_AC_AR
	return b
}

// readFullStatus builds READ FULL STATUS parameter data: PRgeneration,
// ADDITIONAL LENGTH, then per registration a full status descriptor (SPC-4
// table 207): key (0–7), reserved (8–11), ALL_TG_PT bit 1 | R_HOLDER bit 0
// (12), SCOPE|TYPE if R_HOLDER (13), reserved (14–17), RELATIVE TARGET PORT
// IDENTIFIER (18–19; zero for ALL_TG_PT, where it is undefined),
// ADDITIONAL DESCRIPTOR LENGTH (20–23), TransportID (24–).
func (c *core) readFullStatus() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[0:], c.gen)
	for i := range c.regs {
		r := &c.regs[i]
		var d [24]byte
		binary.BigEndian.PutUint64(d[0:], r.key)
		if r.allTgPt {
			d[12] |= 0x02
		} else {
			binary.BigEndian.PutUint16(d[18:], r.rtpi)
		}
		if c.isHolder(r) {
			d[12] |= 0x01
			d[13] = ScopeLU<<4 | byte(c.res.typ)
		}
		binary.BigEndian.PutUint32(d[20:], uint32(len(r.transportID)))
		b = append(b, d[:]...)
		b = append(b, r.transportID...)
	}
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}
