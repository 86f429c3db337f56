package pr

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// Initiator and target port IDs: 16-byte identifiers as 32 hex digits, as
// SRP nexuses carry them.
const (
	iA = "0000000000000000000000000000000a"
	iB = "0000000000000000000000000000000b"
	iC = "0000000000000000000000000000000c"
	iD = "0000000000000000000000000000000d"
	t1 = "1111111111111111111111111111111f"
	t2 = "2222222222222222222222222222222f"
)

// tid builds an SRP TransportID by hand (SPC-4 table 453): byte 0 = 04h,
// bytes 8-23 the port identifier.
func tid(ini string) []byte {
	b := make([]byte, 24)
	b[0] = 0x04
	id, err := hex.DecodeString(ini)
	if err != nil || len(id) != 16 {
		panic("bad initiator id " + ini)
	}
	copy(b[8:], id)
	return b
}

func nx(ini, tgt string, rtpi uint16) Nexus {
	return Nexus{InitiatorPortID: ini, TargetPortID: tgt, RelativeTargetPort: rtpi, TransportID: tid(ini)}
}

var (
	nA  = nx(iA, t1, 1)
	nB  = nx(iB, t1, 1)
	nC  = nx(iC, t1, 1)
	nD  = nx(iD, t1, 1)
	nA2 = nx(iA, t2, 2) // initiator A through the second target port
	nB2 = nx(iB, t2, 2)
)

// PERSISTENT RESERVE OUT CDB (SPC-4 table 208): opcode 5Fh, SA in byte 1,
// SCOPE|TYPE in byte 2, PARAMETER LIST LENGTH in bytes 5-8.
func outCDB(sa byte, typ Type, pll uint32) []byte {
	c := make([]byte, 10)
	c[0] = 0x5F
	c[1] = sa
	c[2] = byte(typ)
	binary.BigEndian.PutUint32(c[5:], pll)
	return c
}

// Basic PR OUT parameter list (SPC-4 table 213).
const (
	fAPTPL   = 0x01
	fAllTgPt = 0x04
	fSpecIPT = 0x08
)

func basic(key, saKey uint64, flags byte) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b[0:], key)
	binary.BigEndian.PutUint64(b[8:], saKey)
	b[20] = flags
	return b
}

// REGISTER AND MOVE parameter list (SPC-4 table 215).
func moveParams(key, saKey uint64, unregAPTPL byte, rtpi uint16, t []byte) []byte {
	b := make([]byte, 24+len(t))
	binary.BigEndian.PutUint64(b[0:], key)
	binary.BigEndian.PutUint64(b[8:], saKey)
	b[17] = unregAPTPL
	binary.BigEndian.PutUint16(b[18:], rtpi)
	binary.BigEndian.PutUint32(b[20:], uint32(len(t)))
	copy(b[24:], t)
	return b
}

// PERSISTENT RESERVE IN CDB (SPC-4 table 199): SA in byte 1, ALLOCATION
// LENGTH in bytes 7-8.
func inCDB(sa byte, alloc uint16) []byte {
	c := make([]byte, 10)
	c[0] = 0x5E
	c[1] = sa
	binary.BigEndian.PutUint16(c[7:], alloc)
	return c
}

type fix struct {
	t *testing.T
	s *State
}

func newFix(t *testing.T, cfg Config) *fix {
	t.Helper()
	return &fix{t: t, s: New(cfg)}
}

func (f *fix) out(n Nexus, sa byte, typ Type, param []byte) (Effects, Outcome) {
	f.t.Helper()
	return f.s.Out(n, outCDB(sa, typ, uint32(len(param))), param)
}

// must runs a PR OUT that has to succeed.
func (f *fix) must(n Nexus, sa byte, typ Type, param []byte) Effects {
	f.t.Helper()
	e, o := f.out(n, sa, typ, param)
	if !o.OK() {
		f.t.Fatalf("PR OUT sa %#x from %s/%s: %v", sa, n.InitiatorPortID[30:], n.TargetPortID[:1], o)
	}
	return e
}

func (f *fix) register(n Nexus, key uint64) {
	f.t.Helper()
	f.must(n, OutRegister, 0, basic(0, key, 0))
}

func (f *fix) reserve(n Nexus, key uint64, typ Type) {
	f.t.Helper()
	f.must(n, OutReserve, typ, basic(key, 0, 0))
}

func (f *fix) in(n Nexus, sa byte) []byte {
	f.t.Helper()
	buf := make([]byte, 4096)
	m, o := f.s.In(n, inCDB(sa, 4096), buf)
	if !o.OK() {
		f.t.Fatalf("PR IN sa %#x: %v", sa, o)
	}
	return buf[:m]
}

// keys decodes READ KEYS by hand (SPC-4 table 201).
func (f *fix) keys() (gen uint32, keys []uint64) {
	f.t.Helper()
	b := f.in(nA, InReadKeys)
	gen = binary.BigEndian.Uint32(b[0:])
	n := binary.BigEndian.Uint32(b[4:])
	if int(n) != len(b)-8 || n%8 != 0 {
		f.t.Fatalf("READ KEYS additional length %d with %d bytes", n, len(b))
	}
	for i := 8; i < len(b); i += 8 {
		keys = append(keys, binary.BigEndian.Uint64(b[i:]))
	}
	return gen, keys
}

// resv decodes READ RESERVATION (SPC-4 tables 202, 203): ok is false when
// there is no reservation.
func (f *fix) resv() (key uint64, typ Type, ok bool) {
	f.t.Helper()
	b := f.in(nA, InReadReservation)
	switch binary.BigEndian.Uint32(b[4:]) {
	case 0:
		return 0, 0, false
	case 16:
		if b[21]>>4 != 0 {
			f.t.Fatalf("scope %#x", b[21]>>4)
		}
		return binary.BigEndian.Uint64(b[8:]), Type(b[21] & 0xf), true
	}
	f.t.Fatalf("READ RESERVATION additional length %d", binary.BigEndian.Uint32(b[4:]))
	return
}

func eqKeys(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// uaFor lists the ASC<<8|ASCQ unit attentions e gives nexus n.
func uaFor(e Effects, n Nexus) []uint16 {
	var r []uint16
	for _, u := range e.UnitAttentions {
		if u.To.Contains(n) {
			r = append(r, uint16(u.ASC)<<8|uint16(u.ASCQ))
		}
	}
	return r
}

func abortsFor(e Effects, n Nexus) bool {
	for _, s := range e.Abort {
		if s.Contains(n) {
			return true
		}
	}
	return false
}

// name is a test nexus's initiator letter.
func name(n Nexus) string { return string(n.InitiatorPortID[31] - 'a' + 'A') }
