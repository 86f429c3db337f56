package scsi

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// testCtx returns a context bounded by the test deadline (or 30 s).
func testCtx(t testing.TB) context.Context {
	d := time.Now().Add(30 * time.Second)
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok && dl.Before(d) {
			d = dl.Add(-time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var nexusA = Nexus{InitiatorPortID: "0000000000000000aaaaaaaaaaaaaaaa", TargetPortID: "0000000000000000tttttttttttttttt", RelativeTargetPort: 1}
var nexusB = Nexus{InitiatorPortID: "0000000000000000bbbbbbbbbbbbbbbb", TargetPortID: "0000000000000000tttttttttttttttt", RelativeTargetPort: 1}

type fixture struct {
	t   testing.TB
	tg  *Target
	lu  *LogicalUnit
	s   Session
	tag uint64
}

// newFixture builds a target with cfg's LU at LUN 0 and one session whose
// POWER ON unit attention is already consumed.
func newFixture(t testing.TB, cfg LUConfig) *fixture {
	t.Helper()
	if cfg.Backstore == nil {
		cfg.Backstore = backstore.NewRAM(1 << 20)
	}
	lu, err := NewLogicalUnit(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tg := NewTarget(TargetConfig{})
	if err := tg.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, tg: tg, lu: lu}
	f.s = tg.NewSession(nexusA)
	t.Cleanup(f.s.Close)
	r := f.run(f.s, 0, cdbTUR(), nil, 0)
	wantSense(t, r, sense.KeyUnitAttention, 0x29, 0x00)
	return f
}

func (f *fixture) run(s Session, lun uint64, cdb, out []byte, inLen int) Result {
	f.tag++
	cmd := &Command{Tag: f.tag, LUN: EncodeLUN(lun), CDB: cdb, DataOut: out, DataIn: make([]byte, inLen)}
	r := s.Execute(testCtx(f.t), cmd)
	checkResultValid(f.t, cdb, r)
	return r
}

// in runs a data-in command and returns the data, failing on non-GOOD.
func (f *fixture) in(cdb []byte, inLen int) []byte {
	f.t.Helper()
	f.tag++
	cmd := &Command{Tag: f.tag, LUN: EncodeLUN(0), CDB: cdb, DataIn: make([]byte, inLen)}
	r := f.s.Execute(testCtx(f.t), cmd)
	if r.Status != sense.StatusGood {
		f.t.Fatalf("CDB % x: status %#x sense % x", cdb, r.Status, r.Sense)
	}
	return cmd.DataIn[:r.DataInLen]
}

// good runs a command on the fixture session and requires GOOD.
func (f *fixture) good(cdb, out []byte) {
	f.t.Helper()
	r := f.run(f.s, 0, cdb, out, 0)
	if r.Status != sense.StatusGood {
		f.t.Fatalf("CDB % x: status %#x sense % x", cdb, r.Status, r.Sense)
	}
}

// checkResultValid asserts the invariants every Result must satisfy.
func checkResultValid(t testing.TB, cdb []byte, r Result) {
	t.Helper()
	if r.Aborted {
		return
	}
	switch r.Status {
	case sense.StatusGood, sense.StatusConditionMet, sense.StatusReservationConflict, sense.StatusTaskAborted, sense.StatusBusy, sense.StatusTaskSetFull:
		if len(r.Sense) != 0 {
			t.Fatalf("CDB % x: status %#x with sense", cdb, r.Status)
		}
	case sense.StatusCheckCondition:
		if d, err := sense.Parse(r.Sense); err != nil || d.Truncated {
			t.Fatalf("CDB % x: CHECK CONDITION with bad sense % x", cdb, r.Sense)
		}
		if r.DataInLen != 0 {
			t.Fatalf("CDB % x: CHECK CONDITION with data-in", cdb)
		}
	default:
		t.Fatalf("CDB % x: unexpected status %#x", cdb, r.Status)
	}
}

func wantSense(t testing.TB, r Result, key, asc, ascq uint8) sense.Data {
	t.Helper()
	if r.Status != sense.StatusCheckCondition {
		t.Fatalf("status %#x, want CHECK CONDITION %x/%02x/%02x", r.Status, key, asc, ascq)
	}
	s, err := sense.Parse(r.Sense)
	if err != nil || s.Truncated {
		t.Fatalf("bad sense % x", r.Sense)
	}
	if s.Key != key || s.ASC != asc || s.ASCQ != ascq {
		t.Fatalf("sense %x/%02x/%02x, want %x/%02x/%02x", s.Key, s.ASC, s.ASCQ, key, asc, ascq)
	}
	return s
}

// wantField asserts an ILLEGAL REQUEST with a field pointer.
func wantField(t testing.TB, r Result, asc uint8, cd bool, byteOff int, bit int) {
	t.Helper()
	s := wantSense(t, r, sense.KeyIllegalRequest, asc, 0)
	if !s.SKSValid {
		t.Fatalf("no sense key specific field: % x", r.Sense)
	}
	want := byte(0x80)
	if cd {
		want |= 0x40
	}
	if bit >= 0 {
		want |= 0x08 | byte(bit)
	}
	if s.SKS[0] != want || int(s.SKS[1])<<8|int(s.SKS[2]) != byteOff {
		t.Fatalf("SKS % x, want %02x %04x", s.SKS, want, byteOff)
	}
}

// hx decodes hex written with spaces and newlines.
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

func wantBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got % x\nwant % x", what, got, want)
	}
}

// CDB builders (SBC-3/SPC-4 layouts).
func cdbTUR() []byte { return make([]byte, 6) }

func cdb16(op byte, flags byte, lba uint64, n uint32) []byte {
	c := make([]byte, 16)
	c[0], c[1] = op, flags
	for i := 0; i < 8; i++ {
		c[2+i] = byte(lba >> (56 - 8*i))
	}
	c[10], c[11], c[12], c[13] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return c
}

func cdb10(op byte, flags byte, lba uint32, n uint16) []byte {
	return []byte{op, flags, byte(lba >> 24), byte(lba >> 16), byte(lba >> 8), byte(lba), 0, byte(n >> 8), byte(n), 0}
}

func cdbInquiry(evpd bool, page byte, alloc uint16) []byte {
	c := []byte{0x12, 0, page, byte(alloc >> 8), byte(alloc), 0}
	if evpd {
		c[1] = 1
	}
	return c
}

func cdbRC16(alloc uint32) []byte {
	c := cdb16(0x9E, 0x10, 0, alloc)
	return c
}
