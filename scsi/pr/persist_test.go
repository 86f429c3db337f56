package pr

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// populated registers A (port 1), B (ALL_TG_PT through port 2) and C, and
// lets B hold WR_EX_RO. APTPL is set by the last REGISTER when aptpl.
func populated(t *testing.T, cfg Config, aptpl bool) *fix {
	f := newFix(t, cfg)
	var fl byte
	if aptpl {
		fl = fAPTPL
	}
	f.must(nA, OutRegister, 0, basic(0, 0x0A0A0A0A0A0A0A0A, fl))
	f.must(nB2, OutRegister, 0, basic(0, 0xB, fAllTgPt|fl))
	f.must(nC, OutRegister, 0, basic(0, 0xFFFFFFFFFFFFFFFF, fl))
	f.reserve(nB, 0xB, WriteExclusiveRegistrantsOnly)
	return f
}

// withoutGen is READ FULL STATUS parameter data with PRgeneration zeroed.
func withoutGen(b []byte) []byte {
	b = bytes.Clone(b)
	copy(b, []byte{0, 0, 0, 0})
	return b
}

func TestSaveLoadRoundTrip(t *testing.T) {
	f := populated(t, Config{Persister: &memPersister{}}, true)
	var img bytes.Buffer
	if err := f.s.Save(&img); err != nil {
		t.Fatal(err)
	}
	g := newFix(t, Config{Persister: &memPersister{}})
	if err := g.s.Load(bytes.NewReader(img.Bytes())); err != nil {
		t.Fatal(err)
	}
	if a, b := withoutGen(f.in(nA, InReadFullStatus)), g.in(nA, InReadFullStatus); !bytes.Equal(a, b) {
		t.Errorf("READ FULL STATUS after Load\n got % x\nwant % x", b, a)
	}
	// SPC-4 §6.15.2: PRgeneration restarts at zero.
	if gen := g.s.Generation(); gen != 0 {
		t.Errorf("generation %d after Load", gen)
	}
	if !g.s.APTPL() {
		t.Error("APTPL not restored")
	}
	// The loaded state behaves: B still holds, C can still use its key.
	if !g.s.Check(nB2, ClassWrite).OK() || g.s.Check(nD, ClassWrite).OK() {
		t.Error("reservation not enforced after Load")
	}
	g.must(nC, OutRegister, 0, basic(0xFFFFFFFFFFFFFFFF, 0xC, fAPTPL))
}

func TestImageFormat(t *testing.T) {
	// The documented JSON layout, read independently of Load.
	f := populated(t, Config{Persister: &memPersister{}}, true)
	var buf bytes.Buffer
	if err := f.s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	var im struct {
		Version       int
		APTPL         bool
		Registrations []struct {
			Key, Initiator, Target string
			AllTgPt                bool `json:"all_tg_pt"`
			RTPI                   uint16
			TransportID            []byte `json:"transport_id"`
		}
		Reservation *struct{ Holder, Scope, Type int }
	}
	if err := json.Unmarshal(buf.Bytes(), &im); err != nil {
		t.Fatal(err)
	}
	if im.Version != 1 || !im.APTPL || len(im.Registrations) != 3 || im.Reservation == nil {
		t.Fatalf("image %s", buf.Bytes())
	}
	r := im.Registrations
	if r[0].Key != "0x0a0a0a0a0a0a0a0a" || r[0].Initiator != iA || r[0].Target != t1 || r[0].AllTgPt || r[0].RTPI != 1 ||
		!bytes.Equal(r[0].TransportID, tid(iA)) {
		t.Errorf("registration 0: %+v", r[0])
	}
	if r[1].Key != "0x000000000000000b" || r[1].Initiator != iB || r[1].Target != "" || !r[1].AllTgPt || r[1].RTPI != 2 {
		t.Errorf("registration 1: %+v", r[1])
	}
	if r[2].Key != "0xffffffffffffffff" {
		t.Errorf("registration 2: %+v", r[2])
	}
	if *im.Reservation != (struct{ Holder, Scope, Type int }{1, 0, 5}) {
		t.Errorf("reservation %+v", *im.Reservation)
	}
}

func TestAPTPLFileRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lun0.pr.json")
	cfg := Config{Persister: File{Path: path}}
	f := populated(t, cfg, true)
	before := withoutGen(f.in(nA, InReadFullStatus))

	// "Restart": a new State restored from the file.
	g := newFix(t, cfg)
	if err := (File{Path: path}).Restore(g.s); err != nil {
		t.Fatal(err)
	}
	if after := g.in(nA, InReadFullStatus); !bytes.Equal(after, before) {
		t.Errorf("after restart\n got % x\nwant % x", after, before)
	}
	if got := g.in(nA, InReportCapabilities); got[3]&0x01 != 1 {
		t.Errorf("PTPL_A not set after restart: % x", got)
	}
	// Changes after the restart are written too: RELEASE is persisted.
	g.must(nB, OutRelease, WriteExclusiveRegistrantsOnly, basic(0xB, 0, 0))
	h := newFix(t, cfg)
	if err := (File{Path: path}).Restore(h.s); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := h.resv(); ok {
		t.Error("RELEASE not persisted")
	}
	// No temporary files are left next to the image.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries", len(ents))
	}
	// APTPL=0 in a REGISTER deletes the image: nothing persists.
	h.must(nA, OutRegister, 0, basic(0x0A0A0A0A0A0A0A0A, 0xA, 0))
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image still present after APTPL=0: %v", err)
	}
	k := newFix(t, cfg)
	if err := (File{Path: path}).Restore(k.s); err != nil {
		t.Fatal(err)
	}
	if _, keys := k.keys(); len(keys) != 0 {
		t.Errorf("restored %x without APTPL", keys)
	}
}

func TestNoAPTPLNothingPersists(t *testing.T) {
	m := &memPersister{}
	f := populated(t, Config{Persister: m}, false)
	f.must(nA, OutClear, 0, basic(0x0A0A0A0A0A0A0A0A, 0, 0))
	if _, n := m.last(); n != 0 {
		t.Errorf("persister called %d times without APTPL", n)
	}
}

func TestAPTPLWritesEveryChange(t *testing.T) {
	m := &memPersister{}
	f := populated(t, Config{Persister: m}, true)
	_, n0 := m.last()
	if n0 != 4 { // three REGISTERs and a RESERVE
		t.Errorf("%d images after setup, want 4", n0)
	}
	// A no-op (repeated RESERVE by the holder) writes nothing.
	f.reserve(nB, 0xB, WriteExclusiveRegistrantsOnly)
	if _, n := m.last(); n != n0 {
		t.Errorf("no-op RESERVE wrote an image")
	}
	f.must(nA, OutClear, 0, basic(0x0A0A0A0A0A0A0A0A, 0, 0))
	img, n := m.last()
	if n != n0+1 || !strings.Contains(string(img), `"registrations": []`) || strings.Contains(string(img), "reservation\":") {
		t.Errorf("image after CLEAR (%d): %s", n, img)
	}
}

func TestPersistFailureLeavesStateUnchanged(t *testing.T) {
	m := &memPersister{}
	f := populated(t, Config{Persister: m}, true)
	before := f.in(nA, InReadFullStatus)
	m.mu.Lock()
	m.fail = true
	m.mu.Unlock()
	for _, tc := range []struct {
		name  string
		n     Nexus
		sa    byte
		typ   Type
		param []byte
	}{
		{"REGISTER", nD, OutRegister, 0, basic(0, 0xD, fAPTPL)},
		{"REGISTER turning APTPL off", nD, OutRegister, 0, basic(0, 0xD, 0)},
		{"PREEMPT", nA, OutPreempt, ExclusiveAccess, basic(0x0A0A0A0A0A0A0A0A, 0xB, 0)},
		{"CLEAR", nA, OutClear, 0, basic(0x0A0A0A0A0A0A0A0A, 0, 0)},
	} {
		e, o := f.out(tc.n, tc.sa, tc.typ, tc.param)
		if o.Reason != InternalTargetFailure || len(e.UnitAttentions) != 0 {
			t.Errorf("%s: %v %+v", tc.name, o, e)
		}
		key, asc, ascq, _ := o.Reason.Sense()
		if o.Reason.Status() != 2 || key != 4 || asc != 0x44 || ascq != 0 {
			t.Errorf("%s: sense %x/%x/%x", tc.name, key, asc, ascq)
		}
	}
	if after := f.in(nA, InReadFullStatus); !bytes.Equal(after, before) {
		t.Errorf("state changed by failed commands\n got % x\nwant % x", after, before)
	}
}

func TestLoadRejectsBadImages(t *testing.T) {
	good := `{"version":1,"aptpl":true,"registrations":[{"key":"0x1","initiator":"a","target":"t","all_tg_pt":false,"rtpi":1}],"reservation":{"holder":0,"scope":0,"type":1}}`
	f := newFix(t, Config{})
	if err := f.s.Load(strings.NewReader(good)); err != nil {
		t.Fatalf("good image: %v", err)
	}
	for _, bad := range []string{
		``,
		`not json`,
		strings.Replace(good, `"version":1`, `"version":2`, 1),
		strings.Replace(good, `"0x1"`, `"0x0"`, 1),
		strings.Replace(good, `"0x1"`, `"zz"`, 1),
		strings.Replace(good, `"0x1"`, `"0x10000000000000000"`, 1),
		strings.Replace(good, `"initiator":"a"`, `"initiator":""`, 1),
		strings.Replace(good, `"target":"t"`, `"target":""`, 1),
		strings.Replace(good, `"all_tg_pt":false`, `"all_tg_pt":true`, 1),
		strings.Replace(good, `"holder":0`, `"holder":1`, 1),
		strings.Replace(good, `"holder":0`, `"holder":-1`, 1),
		strings.Replace(good, `"type":1`, `"type":2`, 1),
		strings.Replace(good, `"scope":0`, `"scope":1`, 1),
		strings.Replace(good, `}],`, `},{"key":"0x2","initiator":"a","target":"t","rtpi":1}],`, 1),
	} {
		if err := f.s.Load(strings.NewReader(bad)); !errors.Is(err, ErrBadImage) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// The good image is still in place.
	if _, keys := f.keys(); !eqKeys(keys, []uint64{1}) {
		t.Errorf("keys %x after rejected loads", keys)
	}
	if err := (File{Path: filepath.Join(t.TempDir(), "missing")}).Restore(f.s); err != nil {
		t.Errorf("missing file: %v", err)
	}
}
