package scsi

import (
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

// Page bytes from SBC-3 §6.4.5 table 183 (caching), SPC-4 §7.5.8 table 434
// (control), §7.5.11 (informational exceptions), SBC-3 §6.4.6
// (read-write error recovery), with LIO's default values.
const (
	pgRWErr   = `01 0a 00 00 00 00 00 00 00 00 00 00`
	pgCaching = `08 12 00 00 00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 00`
	pgControl = `0a 0a 02 10 00 40 00 00 ff ff 00 1e`
	pgIE      = `1c 0a 08 00 00 00 00 00 00 00 00 00`
)

func TestModeSense6AllPages(t *testing.T) {
	f := newFixture(t, LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	got := f.in([]byte{0x1A, 0, 0x3F, 0, 255, 0}, 255)
	want := hx(`43 00 10 08` + // length 67, medium 0, DPOFUA, block descriptor length 8
		`00000800 00 000200` + // 2048 blocks of 512 bytes
		pgRWErr + pgCaching + pgControl + pgIE)
	wantBytes(t, "MODE SENSE(6) 3F", got, want)
	// DBD=1, single page.
	wantBytes(t, "MODE SENSE(6) 0A DBD", f.in([]byte{0x1A, 0x08, 0x0A, 0, 255, 0}, 255), hx(`0f 00 10 00`+pgControl))
	// Subpage FFh of all pages = the same pages.
	wantBytes(t, "3F/FF", f.in([]byte{0x1A, 0, 0x3F, 0xFF, 255, 0}, 255), want)
}

func TestModeSense10(t *testing.T) {
	f := newFixture(t, LUConfig{Backstore: backstore.NewRAM(1 << 20)})
	// LLBAA=1: long LBA block descriptor (16 bytes), LONGLBA set.
	got := f.in([]byte{0x5A, 0x10, 0x08, 0, 0, 0, 0, 0x01, 0x00, 0}, 256)
	wantBytes(t, "MODE SENSE(10) LLBAA", got, hx(`00 2a 00 10 01 00 00 10`+`0000000000000800 00000000 00000200`+pgCaching))
	// Changeable values: WCE not changeable without a volatile cache.
	got = f.in([]byte{0x5A, 0x08, 0x4A, 0, 0, 0, 0, 0x01, 0x00, 0}, 256)
	wantBytes(t, "changeable control", got, hx(`00 12 00 10 00 00 00 00`+`0a 0a e4 06 08 40 00 00 00 00 00 00`))
	// Saved values are not supported.
	wantSense(t, f.run(f.s, 0, []byte{0x5A, 0x08, 0xC8, 0, 0, 0, 0, 0x01, 0x00, 0}, nil, 256), sense.KeyIllegalRequest, 0x39, 0x00)
	// Unknown page: byte 2 bit 5.
	wantField(t, f.run(f.s, 0, []byte{0x5A, 0x08, 0x19, 0, 0, 0, 0, 0x01, 0x00, 0}, nil, 256), 0x24, true, 2, 5)
	// Default values of the caching page.
	got = f.in([]byte{0x5A, 0x08, 0x88, 0, 0, 0, 0, 0x01, 0x00, 0}, 256)
	wantBytes(t, "default caching", got, hx(`00 1a 00 10 00 00 00 00`+pgCaching))
}

func modeSelect10(page []byte) ([]byte, []byte) {
	param := append(hx(`0000 00 00 00 00 0000`), page...)
	return []byte{0x55, 0x10, 0, 0, 0, 0, 0, byte(len(param) >> 8), byte(len(param)), 0}, param
}

func TestModeSelect(t *testing.T) {
	fb := backstore.NewFault(backstore.NewRAM(1 << 20)) // has Sync: WCE changeable
	f := newFixture(t, LUConfig{Backstore: fb})
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0)

	// D_SENSE=1 on the control page: sense becomes descriptor format.
	cdb, p := modeSelect10(hx(`0a 0a 06 10 00 40 00 00 ff ff 00 1e`))
	f.good(cdb, p)
	r := f.run(f.s, 0, cdb16(0x88, 0, 4096, 1), nil, 512)
	if s := wantSense(t, r, sense.KeyIllegalRequest, 0x21, 0x00); !s.Descriptor {
		t.Fatal("D_SENSE=1 but fixed format sense")
	}
	// The other nexus is told MODE PARAMETERS CHANGED; it then sees
	// descriptor sense too.
	r = f.run(s2, 0, cdbTUR(), nil, 0)
	if s := wantSense(t, r, sense.KeyUnitAttention, 0x2A, 0x01); !s.Descriptor {
		t.Fatal("UA not in descriptor format")
	}
	// Not to the nexus that changed them.
	f.good(cdbTUR(), nil)

	// Changing a non-changeable bit (GLTSD, byte 2 bit 1): parameter
	// pointer at that byte and bit (header 8 + page byte 2 = 10).
	cdb, p = modeSelect10(hx(`0a 0a 04 10 00 40 00 00 ff ff 00 1e`))
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x26, false, 10, 1)
	// TST=010b is reserved.
	cdb, p = modeSelect10(hx(`0a 0a 46 10 00 40 00 00 ff ff 00 1e`))
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x26, false, 10, 7)
	// Wrong page length.
	cdb, p = modeSelect10(hx(`0a 0b 06 10 00 40 00 00 ff ff 00 1e 00`))
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x26, false, 9, -1)
	// Unknown page.
	cdb, p = modeSelect10(hx(`19 02 00 00`))
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x26, false, 8, 5)
	// SP=1: not savable.
	cdb, p = modeSelect10(hx(pgCaching))
	cdb[1] = 0x11
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x24, true, 1, 0)
	// PF=0.
	cdb[1] = 0x00
	wantField(t, f.run(f.s, 0, cdb, p, 0), 0x24, true, 1, 4)
	// A truncated page.
	cdb, p = modeSelect10(hx(`08 12 04 00`))
	wantSense(t, f.run(f.s, 0, cdb, p, 0), sense.KeyIllegalRequest, 0x1A, 0x00)
	// Block descriptor with another block length.
	param := hx(`00 00 00 08 00000000 00 000400`)
	wantField(t, f.run(f.s, 0, []byte{0x15, 0x10, 0, 0, byte(len(param)), 0}, param, 0), 0x26, false, 9, -1)
	// Same block length with a caching page: WCE=1 accepted.
	param = append(hx(`00 00 00 08 00000000 00 000200`), hx(`08 12 04 00 00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 00`)...)
	f.good([]byte{0x15, 0x10, 0, 0, byte(len(param)), 0}, param)
	if !f.lu.wce.Load() {
		t.Fatal("WCE not set")
	}
	// LUN RESET returns to default values (no saved values).
	if resp := f.s.TaskManagement(testCtx(t), TMFLUNReset, EncodeLUN(0), 0); resp != TMFComplete {
		t.Fatalf("LUN RESET: %v", resp)
	}
	if f.lu.wce.Load() || f.lu.dsense() {
		t.Fatal("mode pages not reset")
	}
}

func TestQErrAbortsOnCheckCondition(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	// QERR=01b, TAS=0.
	cdb, p := modeSelect10(hx(`0a 0a 02 12 00 00 00 00 ff ff 00 1e`))
	f.good(cdb, p)
	ctx := testCtx(t)
	blk.block(3)
	done := make(chan Result, 1)
	go func() {
		done <- f.s.Execute(ctx, &Command{Tag: 500, CDB: cdb16(0x88, 0, 3, 1), DataIn: make([]byte, 512)})
	}()
	blk.waitStarted(t, 3)
	wantSense(t, f.run(f.s, 0, cdb16(0x88, 0, 9999, 1), nil, 512), sense.KeyIllegalRequest, 0x21, 0x00)
	blk.release(3)
	if r := <-done; !r.Aborted {
		t.Fatalf("QERR=01b did not abort the running task: %+v", r)
	}
}

func TestModeSubpageFFAndLongParamList(t *testing.T) {
	f := newFixture(t, LUConfig{})
	wantBytes(t, "08/FF", f.in([]byte{0x1A, 0x08, 0x08, 0xFF, 255, 0}, 255), hx(`17 00 10 00`+pgCaching))
	wantField(t, f.run(f.s, 0, []byte{0x1A, 0x08, 0x08, 0x01, 255, 0}, nil, 255), 0x24, true, 3, -1)
	// A data-out longer than the PARAMETER LIST LENGTH: the excess is ignored.
	cdb, p := modeSelect10(hx(pgControl))
	r := f.run(f.s, 0, cdb, append(p, 0xEE, 0xEE), 0)
	if r.Status != sense.StatusGood || r.DataOutUsed != len(p) || r.DataOutWanted != len(p) {
		t.Fatalf("%+v", r)
	}
	// Shorter: INVALID FIELD IN COMMAND INFORMATION UNIT.
	wantSense(t, f.run(f.s, 0, cdb, p[:len(p)-1], 0), sense.KeyIllegalRequest, 0x0E, 0x03)
}

func TestSavedModePages(t *testing.T) {
	store := ModePageFile{Path: t.TempDir() + "/lun0.mode"}
	fb := backstore.NewFault(backstore.NewRAM(1 << 20))
	f := newFixture(t, LUConfig{Backstore: fb, ModePages: store})
	// PS=1 on every page (SPC-4 §7.5.7); saved values start as defaults.
	wantBytes(t, "saved caching", f.in([]byte{0x1A, 0x08, 0xC8, 0, 255, 0}, 255), hx(`17 00 10 00 88`+pgCaching[2:]))
	// MODE SELECT(6) with SP=1: WCE=1 and D_SENSE=1 become current and saved.
	param := append(hx(`00 00 00 00`), hx(`08 12 04 00 00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 00`)...)
	param = append(param, hx(`0a 0a 06 10 00 40 00 00 ff ff 00 1e`)...)
	f.good([]byte{0x15, 0x11, 0, 0, byte(len(param)), 0}, param)
	wantBytes(t, "saved control", f.in([]byte{0x1A, 0x08, 0xCA, 0, 255, 0}, 255), hx(`0f 00 10 00 8a 0a 06 10 00 40 00 00 ff ff 00 1e`))
	// A later SP=0 change is current only; LUN RESET restores the saved values.
	cdb, p := modeSelect10(hx(pgCaching))
	f.good(cdb, p)
	if f.lu.wce.Load() {
		t.Fatal("WCE still set")
	}
	if resp := f.s.TaskManagement(testCtx(t), TMFLUNReset, 0, 0); resp != TMFComplete {
		t.Fatal(resp)
	}
	if !f.lu.wce.Load() || !f.lu.dsense() {
		t.Fatal("LUN RESET did not restore saved values")
	}
	// A new logical unit on the same store starts from the saved values.
	lu2, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewFault(backstore.NewRAM(1 << 20)), ModePages: store})
	if err != nil {
		t.Fatal(err)
	}
	if !lu2.wce.Load() || !lu2.dsense() {
		t.Fatal("saved values not loaded")
	}
	// A damaged image is refused.
	bad := ModePageFile{Path: t.TempDir() + "/bad.mode"}
	if err := bad.Save([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(1 << 20), ModePages: bad}); err == nil {
		t.Fatal("damaged image accepted")
	}
}

// SWP=1 on the control page: medium writes fail with LOGICAL UNIT
// SOFTWARE WRITE PROTECTED and MODE SENSE reports WP (SPC-4 §7.5.8).
func TestSoftwareWriteProtect(t *testing.T) {
	f := newFixture(t, LUConfig{ThinProvisioning: true})
	cdb, p := modeSelect10(hx(`0a 0a 02 10 08 40 00 00 ff ff 00 1e`))
	f.good(cdb, p)
	wantSense(t, f.run(f.s, 0, cdb16(0x8A, 0, 0, 1), make([]byte, 512), 0), sense.KeyDataProtect, 0x27, 0x02)
	wantSense(t, f.run(f.s, 0, cdb16(0x93, 0, 0, 1), make([]byte, 512), 0), sense.KeyDataProtect, 0x27, 0x02)
	unmap := hx(`0016 0010 00000000 0000000000000000 00000001 00000000`)
	wantSense(t, f.run(f.s, 0, []byte{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}, unmap, 0), sense.KeyDataProtect, 0x27, 0x02)
	f.in(cdb16(0x88, 0, 0, 1), 512)
	if b := f.in([]byte{0x1A, 0x08, 0x0A, 0, 255, 0}, 255); b[2] != 0x90 {
		t.Fatalf("device-specific parameter %#x, want 90", b[2])
	}
	cdb, p = modeSelect10(hx(pgControl))
	f.good(cdb, p)
	f.good(cdb16(0x8A, 0, 0, 1), make([]byte, 512))
}
