package target

import (
	"bytes"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// wantWP is fixed-format sense DATA PROTECT (7), WRITE PROTECTED (27h/00h):
// response code 70h, sense key in byte 2, additional sense length 10 in
// byte 7, ASC/ASCQ in bytes 12/13 (SPC-4 §4.5.3, table 27).
var wantWP = []byte{0x70, 0, 0x07, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x27, 0x00, 0, 0, 0, 0}

// TestReadOnlyACL: an ACL's ReadOnly map, keyed by the initiator's LUN
// numbers, protects that mapping over the wire: the SRP_RSP carries CHECK
// CONDITION with the 18 sense bytes, and the core never sees the write.
func TestReadOnlyACL(t *testing.T) {
	m, err := ParseInitiator(testInitiator.String())
	if err != nil {
		t.Fatal(err)
	}
	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(1 << 20), BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	e := newEnvCore(t, func(c *Config) {
		c.DemoMode = false
		c.ACLs = []ACL{{Initiator: m, LUNs: map[uint64]uint64{0: 0, 5: 0}, ReadOnly: map[uint64]bool{5: true}}}
	}, scsiCore{st})
	i := e.login(defaultLogin())
	// The logical unit's power-on unit attention (LUNs 0 and 5 are one
	// logical unit, so one I_T_L nexus), then the data path.
	i.sendIU(&srp.Cmd{Tag: 100, LUN: scsi.EncodeLUN(5), CDB: make([]byte, 16)})
	if r := i.rspIU(); r.Status != 0x02 {
		t.Fatalf("first TEST UNIT READY: status %#x, want the power-on unit attention", r.Status)
	}
	src, s := i.buf(0, 4096)
	fill(src, 9)
	i.sendIU(&srp.Cmd{Tag: 1, LUN: scsi.EncodeLUN(5), CDB: cdb10(0x2a, 0, 8), DataOut: direct(s)})
	r := i.rspIU()
	if r.Tag != 1 || r.Status != 0x02 || r.Flags != srp.SnsValid || !bytes.Equal(r.Sense, wantWP) {
		t.Fatalf("write to read-only LUN 5: %+v sense % x", r, r.Sense)
	}
	// The same logical unit as LUN 0 is writable, and LUN 5 reads it.
	i.sendIU(&srp.Cmd{Tag: 2, LUN: scsi.EncodeLUN(0), CDB: cdb10(0x2a, 0, 8), DataOut: direct(s)})
	checkGood(t, i.rspIU(), 2)
	dst, d := i.buf(8192, 4096)
	i.sendIU(&srp.Cmd{Tag: 3, LUN: scsi.EncodeLUN(5), CDB: cdb10(0x28, 0, 8), DataIn: direct(d)})
	checkGood(t, i.rspIU(), 3)
	if !bytes.Equal(dst, src) {
		t.Fatal("read through the read-only mapping differs")
	}
	// Counters: the refused write moved no data (the core checks the
	// mapping before the fabric fetches data-out), the other fetched its
	// 4096 bytes, one read returned 4096 bytes; the unit attention was
	// one more CHECK CONDITION.
	if s := e.port.Sessions(); len(s) != 1 || s[0].CheckConditions != 2 || s[0].Commands != 4 || s[0].WriteBytes != 4096 || s[0].ReadBytes != 4096 || s[0].MaxOutstanding < 1 {
		t.Fatalf("counters %+v", s)
	}
}
