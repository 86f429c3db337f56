package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
)

// TestALUAGateway: a gateway in standby, with a peer group, reports both in
// REPORT TARGET PORT GROUPS (its ports numbered from relative_port), refuses
// media commands with 02/04/0B, and serves them after the admin API makes it
// active/optimized, with ASYMMETRIC ACCESS STATE CHANGED in between.
func TestALUAGateway(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "srptd.toml")
	if err := os.WriteFile(conf, []byte(`
[target]
demo_mode = true
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "1MiB"
[alua]
group = 2
relative_port = 3
state = "standby"
[[alua.peer]]
group = 1
state = "active/optimized"
preferred = true
ports = [1]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	dr := launch(t, "-config", conf, "-data-dir", dir)
	s := dr.login(t)
	ctx := testCtx(t)
	run := func(cdb []byte, in int) (initiator.Result, []byte) {
		t.Helper()
		buf := make([]byte, in)
		cmd := &initiator.Command{CDB: cdb}
		if in > 0 {
			cmd.DataIn = [][]byte{buf}
		}
		r, err := s.Execute(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return r, buf[:r.DataInLen]
	}
	wantSense := func(cdb []byte, key, asc, ascq uint8) {
		t.Helper()
		r, _ := run(cdb, 0)
		d, err := sense.Parse(r.Sense)
		if r.Status != sense.StatusCheckCondition || err != nil || d.Key != key || d.ASC != asc || d.ASCQ != ascq {
			t.Fatalf("CDB % x: status %#x sense % x, want %x/%02x/%02x", cdb, r.Status, r.Sense, key, asc, ascq)
		}
	}
	tur := make([]byte, 6)
	rtpg := []byte{0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	wantSense(tur, sense.KeyUnitAttention, 0x29, 0x00)
	wantSense(tur, sense.KeyNotReady, 0x04, 0x0B)
	r, b := run(rtpg, 256)
	// Group 1 (peer): AO, PREF, port 1; group 2 (this srptd): standby, PREF
	// (the default), port 3.
	want := "00000018" + "808f000100000001" + "00000001" + "828f000200000001" + "00000003"
	if r.Status != 0 || hex.EncodeToString(b) != want {
		t.Fatalf("RTPG status %#x: %x, want %s", r.Status, b, want)
	}

	if code, body := dr.admin(t, "PUT", "/alua/2", adminapi.ALUAState{State: "sideways"}, nil); code != 400 {
		t.Fatalf("bad state: %d %s", code, body)
	}
	if code, body := dr.admin(t, "PUT", "/alua/9", adminapi.ALUAState{State: "standby"}, nil); code != 404 {
		t.Fatalf("unknown group: %d %s", code, body)
	}
	if code, body := dr.admin(t, "PUT", "/alua/2", adminapi.ALUAState{State: "active/optimized"}, nil); code != 204 {
		t.Fatalf("set state: %d %s", code, body)
	}
	wantSense(tur, sense.KeyUnitAttention, 0x2A, 0x06)
	if r, _ := run(tur, 0); r.Status != 0 {
		t.Fatalf("TUR after the change: %#x % x", r.Status, r.Sense)
	}
	var groups []adminapi.PortGroup
	dr.admin(t, "GET", "/alua", nil, &groups)
	if len(groups) != 2 || groups[1].Group != 2 || groups[1].State != "active/optimized" || !groups[1].Local || groups[0].Local {
		t.Fatalf("GET /alua: %+v", groups)
	}
	var saved adminapi.Saved
	if code, body := dr.admin(t, "POST", "/save", nil, &saved); code != 200 {
		t.Fatalf("save: %d %s", code, body)
	}
	b, _ = os.ReadFile(saved.Path)
	if !strings.Contains(string(b), `state = "active/optimized"`) || !strings.Contains(string(b), "relative_port = 3") {
		t.Fatalf("saved configuration lacks the ALUA state:\n%s", b)
	}
}

// TestImageSharedByALUAGateways: two gateways ([alua], each its own data
// directory) export one file image together and see each other's writes
// at once; an srptd that is not a gateway is still kept off the image.
func TestImageSharedByALUAGateways(t *testing.T) {
	img := filepath.Join(t.TempDir(), "shared.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(alua string) string {
		return writeConfig(t, "[target]\ndemo_mode=true\n[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\""+img+"\"\nserial=\"shared0\"\n"+alua)
	}
	a := launch(t, "-config", conf("[alua]\ngroup=1\nrelative_port=1\n[[alua.peer]]\ngroup=2\nstate=\"ano\"\nports=[2]\n"), "-data-dir", t.TempDir())
	b := launch(t, "-config", conf("[alua]\ngroup=2\nrelative_port=2\nstate=\"ano\"\n[[alua.peer]]\ngroup=1\nports=[1]\n"), "-data-dir", t.TempDir())
	err := run(testCtx(t), []string{"-config", conf(""), "-data-dir", t.TempDir()}, io.Discard, io.Discard, func(ready) { t.Error("an srptd without [alua] started on the gateways' image") })
	if want := "lun[0].path: " + img + " is in use by another srptd (or another LUN)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("srptd without [alua]: err %v, want %q", err, want)
	}
	// --check agrees: a third gateway may open the image, an srptd
	// without [alua] may not.
	var out bytes.Buffer
	if err := run(testCtx(t), []string{"-check", "-config", conf("[alua]\ngroup=3\nrelative_port=3\n"), "-data-dir", t.TempDir()}, &out, io.Discard, nil); err != nil || out.String() != "configuration OK\n" {
		t.Errorf("--check of a third gateway: %v %q", err, out.String())
	}
	if err := run(testCtx(t), []string{"-check", "-config", conf(""), "-data-dir", t.TempDir()}, io.Discard, io.Discard, nil); err == nil || !strings.Contains(err.Error(), img+" is in use by another srptd") {
		t.Errorf("--check without [alua]: %v", err)
	}

	ctx := testCtx(t)
	block := make([]byte, 512)
	for i := range block {
		block[i] = byte(i*7 + 3)
	}
	// WRITE(10) of LBA 5 through A, READ(10) of it through B (SBC-3 §5.35, §5.15).
	sa, sb := a.login(t), b.login(t)
	for _, s := range []*initiator.Session{sa, sb} {
		// each session's first command meets POWER ON OCCURRED
		_, _ = s.Execute(ctx, &initiator.Command{CDB: make([]byte, 6)})
	}
	if r, err := sa.Execute(ctx, &initiator.Command{CDB: []byte{0x2A, 0, 0, 0, 0, 5, 0, 0, 1, 0}, DataOut: [][]byte{block}}); err != nil || r.Status != 0 {
		t.Fatalf("WRITE through A: %v status %#x sense % x", err, r.Status, r.Sense)
	}
	got := make([]byte, 512)
	if r, err := sb.Execute(ctx, &initiator.Command{CDB: []byte{0x28, 0, 0, 0, 0, 5, 0, 0, 1, 0}, DataIn: [][]byte{got}}); err != nil || r.Status != 0 {
		t.Fatalf("READ through B: %v status %#x sense % x", err, r.Status, r.Sense)
	}
	if !bytes.Equal(got, block) {
		t.Fatalf("B reads % x..., A wrote % x...", got[:8], block[:8])
	}
}
