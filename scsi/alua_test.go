package scsi

import (
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

var (
	cdbRTPG       = []byte{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	cdbReadCap16  = []byte{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}
	cdbModeSense6 = []byte{0x1A, 0, 0x3F, 0, 255, 0}
)

func cdbSTPG(n uint32) []byte {
	return []byte{0xA4, 0x0A, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 0, 0}
}

// TestALUAAccessStates sets this gateway's group through every state and
// checks which commands each state serves and the sense of the refused ones
// (SPC-4 §5.11.2.4–5.11.2.5; sense 02/04/0A–0C, Annex D).
func TestALUAAccessStates(t *testing.T) {
	f := newFixture(t, LUConfig{})
	other := PortGroup{ID: 2, State: ALUAActiveOptimized, Preferred: true, Ports: []uint16{2}}
	if err := f.tg.SetPortGroups([]PortGroup{{ID: 0, State: ALUAStandby}, other}); err != nil {
		t.Fatal(err)
	}
	// The change is a unit attention first.
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)

	read10 := cdb10(0x28, 0, 0, 1)
	write10 := cdb10(0x2A, 0, 0, 1)
	type cmd struct {
		name string
		cdb  []byte
		out  []byte
		in   int
	}
	cmds := []cmd{
		{"TEST UNIT READY", cdbTUR(), nil, 0},
		{"READ(10)", read10, nil, 512},
		{"WRITE(10)", write10, make([]byte, 512), 0},
		{"INQUIRY", cdbInquiry(false, 0, 96), nil, 96},
		{"REPORT TARGET PORT GROUPS", cdbRTPG, nil, 256},
		{"READ CAPACITY(16)", cdbReadCap16, nil, 32},
		{"MODE SENSE(6)", cdbModeSense6, nil, 255},
	}
	// served[state][command]; the rest get the state's ASCQ.
	served := map[ALUAState]map[string]bool{
		ALUAActiveOptimized:    {"TEST UNIT READY": true, "READ(10)": true, "WRITE(10)": true, "INQUIRY": true, "REPORT TARGET PORT GROUPS": true, "READ CAPACITY(16)": true, "MODE SENSE(6)": true},
		ALUAActiveNonOptimized: {"TEST UNIT READY": true, "READ(10)": true, "WRITE(10)": true, "INQUIRY": true, "REPORT TARGET PORT GROUPS": true, "READ CAPACITY(16)": true, "MODE SENSE(6)": true},
		ALUAStandby:            {"INQUIRY": true, "REPORT TARGET PORT GROUPS": true, "READ CAPACITY(16)": true, "MODE SENSE(6)": true},
		ALUAUnavailable:        {"INQUIRY": true, "REPORT TARGET PORT GROUPS": true, "READ CAPACITY(16)": true},
		ALUATransitioning:      {"INQUIRY": true, "REPORT TARGET PORT GROUPS": true},
	}
	ascq := map[ALUAState]uint8{ALUATransitioning: 0x0A, ALUAStandby: 0x0B, ALUAUnavailable: 0x0C}
	for _, st := range []ALUAState{ALUAStandby, ALUAUnavailable, ALUATransitioning, ALUAActiveNonOptimized, ALUAActiveOptimized} {
		if st != ALUAStandby {
			if err := f.tg.SetPortGroupState(0, st); err != nil {
				t.Fatal(err)
			}
			f.in(cdbInquiry(false, 0, 96), 96) // INQUIRY neither reports nor clears the UA
			wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)
		}
		for _, c := range cmds {
			r := f.run(f.s, 0, c.cdb, c.out, c.in)
			if served[st][c.name] {
				if r.Status != sense.StatusGood {
					t.Errorf("%v: %s: status %#x sense % x, want GOOD", st, c.name, r.Status, r.Sense)
				}
				continue
			}
			s, _ := sense.Parse(r.Sense)
			if r.Status != sense.StatusCheckCondition || s.Key != sense.KeyNotReady || s.ASC != 0x04 || s.ASCQ != ascq[st] {
				t.Errorf("%v: %s: status %#x sense %x/%x/%x, want NOT READY 04/%02x", st, c.name, r.Status, s.Key, s.ASC, s.ASCQ, ascq[st])
			}
		}
	}
	if err := f.tg.SetPortGroupState(7, ALUAStandby); err == nil {
		t.Fatal("SetPortGroupState of an unknown group succeeded")
	}
}

// TestReportTPGGroups: every gateway's group, with its state, PREF, the
// supported states, the status code of the last change and its ports (SPC-4
// §6.37 tables 306–310).
func TestReportTPGGroups(t *testing.T) {
	f := newFixture(t, LUConfig{})
	if err := f.tg.SetPortGroups([]PortGroup{{ID: 0, State: ALUAActiveNonOptimized}, {ID: 2, State: ALUAActiveOptimized, Preferred: true, Ports: []uint16{2, 3}}}); err != nil {
		t.Fatal(err)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)
	wantBytes(t, "RTPG", f.in(cdbRTPG, 256), hx(`0000001c`+
		`01 8f 0000 00 00 00 01 0000 0001`+
		`80 8f 0002 00 00 00 02 0000 0002 0000 0003`))
	if err := f.tg.SetPortGroupState(2, ALUAStandby); err != nil {
		t.Fatal(err)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)
	// STATUS CODE 02h: altered by an implicit change.
	wantBytes(t, "RTPG after", f.in(cdbRTPG, 256)[16:24], hx(`82 8f 0002 00 02 00 02`))
	if err := f.tg.SetPortGroups([]PortGroup{{ID: 1}, {ID: 1}}); err == nil {
		t.Fatal("a group listed twice was accepted")
	}
}

// TestSetTPG: explicit ALUA through SET TARGET PORT GROUPS (SPC-4 §6.46).
func TestSetTPG(t *testing.T) {
	f := newFixture(t, LUConfig{})
	if err := f.tg.SetPortGroups([]PortGroup{{ID: 0, State: ALUAStandby}, {ID: 2, State: ALUAActiveOptimized, Ports: []uint16{2}}}); err != nil {
		t.Fatal(err)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)
	sb := f.tg.NewSession(nexusB)
	t.Cleanup(sb.Close)
	wantSense(t, f.run(sb, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x29, 0x00)

	// Bad parameter lists change nothing.
	s := wantSense(t, f.run(sb, 0, cdbSTPG(8), hx(`00000000 0f 00 0000`), 0), sense.KeyIllegalRequest, 0x26, 0x00)
	if s.SKS != [3]byte{0x80 | 0x08 | 3, 0, 4} {
		t.Errorf("transitioning asked for: SKS % x, want field byte 4 bit 3", s.SKS)
	}
	s = wantSense(t, f.run(sb, 0, cdbSTPG(8), hx(`00000000 00 00 0009`), 0), sense.KeyIllegalRequest, 0x26, 0x00)
	if s.SKS != [3]byte{0x80, 0, 6} {
		t.Errorf("unknown group: SKS % x, want field byte 6", s.SKS)
	}
	// Another gateway's group cannot be changed from here...
	wantSense(t, f.run(sb, 0, cdbSTPG(12), hx(`00000000 00 00 0000 02 00 0002`), 0), sense.KeyIllegalRequest, 0x26, 0x00)
	wantSense(t, f.run(sb, 0, cdbSTPG(6), hx(`00000000 0000`), 0), sense.KeyIllegalRequest, 0x1A, 0x00)
	wantSense(t, f.run(sb, 0, cdbTUR(), nil, 0), sense.KeyNotReady, 0x04, 0x0B)

	// ... but named with its current state it is accepted beside a change
	// of this gateway's group.
	if r := f.run(sb, 0, cdbSTPG(12), hx(`00000000 00 00 0000 00 00 0002`), 0); r.Status != sense.StatusGood {
		t.Fatalf("STPG: status %#x sense % x", r.Status, r.Sense)
	}
	// The requesting nexus gets no unit attention; the other does.
	if r := f.run(sb, 0, cdbTUR(), nil, 0); r.Status != sense.StatusGood {
		t.Fatalf("TUR through the requester after STPG: % x", r.Sense)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x06)
	// STATUS CODE 01h: altered by SET TARGET PORT GROUPS.
	wantBytes(t, "RTPG", f.in(cdbRTPG, 256)[4:12], hx(`00 8f 0000 00 01 00 01`))
	if pg := f.tg.PortGroups(); len(pg) != 2 || pg[0].State != ALUAActiveOptimized || len(pg[0].Ports) != 1 || pg[0].Ports[0] != 1 {
		t.Fatalf("PortGroups = %+v", pg)
	}
	// SET TARGET PORT GROUPS is in REPORT SUPPORTED OPERATION CODES.
	b := f.in([]byte{0xA3, 0x0C, 0x02, 0xA4, 0, 0x0A, 0, 0, 1, 0, 0, 0}, 256)
	wantBytes(t, "RSOC STPG", b, hx(`00 03 000c a4 0a 00 00 00 00 ff ff ff ff 00 00`))
}

// TestALUAGroupDesignator: VPD 83h names the configured group (designator
// type 5) and RTPG reports it.
func TestALUAGroupDesignator(t *testing.T) {
	lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	tg := NewTarget(TargetConfig{TargetPortGroup: 5})
	if err := tg.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, tg: tg, lu: lu, s: tg.NewSession(nexusA)}
	t.Cleanup(f.s.Close)
	f.run(f.s, 0, cdbTUR(), nil, 0)
	b := f.in(cdbInquiry(true, 0x83, 255), 255)
	found := false
	for p := 4; p+4 <= len(b); p += 4 + int(b[p+3]) {
		if b[p+1]&0x0F == 5 {
			found = true
			wantBytes(t, "TPG designator", b[p:p+8], hx(`41 95 00 04 0000 0005`))
		}
	}
	if !found {
		t.Fatalf("no target port group designator in % x", b)
	}
	wantBytes(t, "RTPG", f.in(cdbRTPG, 256), hx(`0000000c 80 8f 0005 00 00 00 01 0000 0001`))
}
