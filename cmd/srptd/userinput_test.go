package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/internal/adminapi"
)

// TestConfigErrorsValues: values that parse but make no sense are refused
// by -check, with the key named.
func TestConfigErrorsValues(t *testing.T) {
	base := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n" // lines 1-2
	lun := func(extra string) string { return base + "[[lun]]\nlun=0\nbackstore=\"ram\"\n" + extra }
	for _, tc := range []struct{ cfg, want string }{
		// NaN parses as a float; it is no size.
		{lun("size=\"NaN\"\n"), `srptd.toml:6: lun[0].size: bad size "NaN"`},
		{lun("size=\"nanKiB\"\n"), `srptd.toml:6: lun[0].size: bad size "nanKiB"`},
		// Less than one 512-byte block, and not whole blocks.
		{lun("size=100\n"), "srptd.toml:6: lun[0].size: 100 bytes is not a multiple of block_size 512"},
		{lun("size=\"1000B\"\n"), "srptd.toml:6: lun[0].size: 1000 bytes is not a multiple of block_size 512"},
		// Sizes beyond what a backstore can hold, as integers and strings.
		{lun("size=9223372036854775807\n"), "srptd.toml:6: lun[0].size: size 9223372036854775807 is more than 4 EiB"},
		{lun("size=\"5TiB\"\n"), "srptd.toml:6: lun[0].size: 5497558138880 bytes is more than the 4 TiB a ram backstore can have"},
		// Receive buffers allocated at login beyond what a machine holds:
		// the allocation would end the process (64 GiB here).
		{base + "[target]\nrq_size=65535\nmax_req_size=\"1MiB\"\n", "srptd.toml:4: target.rq_size: 65535 IUs of max_req_size 1048576 bytes need 65535 MiB of receive buffers, more than the 1024 MiB allowed"},
		{base + "[target]\nuse_srq=true\nmax_req_size=\"1MiB\"\n", "srptd.toml:3: target.srq_size: 4095 IUs of max_req_size 1048576 bytes need 4095 MiB"},
		{base + "[target]\nrq_size=1\nmax_req_size=\"2GiB\"\n", "srptd.toml:5: target.max_req_size: 2147483648 bytes out of range 96..1048576"},
		// Names go into log lines, tables and metric labels.
		{lun("size=\"1MiB\"\nname=\"a\\nb\"\n"), `srptd.toml:7: lun[0].name: "a\nb" has control characters`},
		{base + "name=\"" + strings.Repeat("p", 65) + "\"\n", "srptd.toml:3: port[0].name: \"ppp"},
		// A negative integer in an unsigned key is shown as written.
		{base + "[[lun]]\nlun=-1\nbackstore=\"ram\"\nsize=\"1MiB\"\n", "srptd.toml:4: lun[0].lun: -1 out of range 0..16383"},
		{lun("size=\"1MiB\"\n") + "[[acl]]\ninitiator=\"192.0.2.1\"\nluns={0=-2}\n", "srptd.toml:9: acl[0].luns.0: target LUN -2 is not configured"},
		{lun("size=\"1MiB\"\n") + "[[acl]]\ninitiator=\"192.0.2.1\"\nread_only=[-3]\n", "srptd.toml:9: acl[0].read_only: LUN -3 is not configured"},
		{base + "[target]\nshutdown_timeout=\"-5s\"\n", "srptd.toml:4: target.shutdown_timeout: -5s is negative"},
		{base + "service_guid=\"zzzzzzzzzzzzzzzz\"\n", `srptd.toml:3: port[0].service_guid: "zzzzzzzzzzzzzzzz": want 16 hex digits (optionally xxxx:xxxx:xxxx:xxxx)`},
	} {
		path := writeConfig(t, tc.cfg)
		err := run(testCtx(t), []string{"-check", "-config", path}, io.Discard, io.Discard, nil)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), filepath.Dir(path)+"/")
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("config %q:\n got %q\nwant %q", tc.cfg, got, tc.want)
		}
	}
}

// TestMissingImageNamed: a LUN whose image is missing and that srptd may
// not create (no size, or read-only), or a missing block device, is named
// as such at start and through POST /luns, as --check names it, instead
// of "open PATH: no such file or directory".
func TestMissingImageNamed(t *testing.T) {
	img := filepath.Join(t.TempDir(), "gone.img")
	base := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\npath=\"" + img + "\"\n"
	for _, tc := range []struct{ extra, want string }{
		{"backstore=\"file\"\n", img + " does not exist (srptd creates a missing image only with a size, and not read-only)"},
		{"backstore=\"file\"\nsize=\"1MiB\"\nread_only=true\n", img + " does not exist (srptd creates a missing image only with a size, and not read-only)"},
		{"backstore=\"block\"\n", img + ": no such block device"},
	} {
		if err := runErr(t, base+tc.extra); !strings.Contains(err.Error(), "lun[0].path: "+tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.extra, err, tc.want)
		}
	}
	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")
	code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": img}, nil)
	if code != 400 || !strings.Contains(body, "lun.path: "+img+" does not exist") {
		t.Errorf("POST /luns: %d %s", code, body)
	}
}

// runErr runs srptd with a configuration expected to fail at start and
// returns the error; it fails the test if srptd started serving.
func runErr(t *testing.T, cfg string) error {
	t.Helper()
	started := false
	// A start that should have failed is stopped at once, not at the
	// test's deadline.
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	err := run(ctx, []string{"-config", writeConfig(t, cfg)}, io.Discard, io.Discard, func(ready) { started = true; cancel() })
	if started {
		t.Fatalf("srptd started with\n%s", cfg)
	}
	if err == nil {
		t.Fatalf("no error with\n%s", cfg)
	}
	return err
}

// TestAdminHugeRAMLUN: POST /luns with the largest JSON integer size is a
// 400 naming the key, and srptd keeps serving.
func TestAdminHugeRAMLUN(t *testing.T) {
	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")
	for _, size := range []any{int64(9223372036854775807), "1000TiB"} {
		code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "ram", "size": size}, nil)
		if code != 400 || !strings.Contains(body, "size") {
			t.Errorf("size %v: %d %s", size, code, body)
		}
	}
	var luns []adminapi.LUN
	if code, body := dr.admin(t, "GET", "/luns", nil, &luns); code != 200 || len(luns) != 1 {
		t.Fatalf("GET /luns after: %d %s", code, body)
	}
}

// TestLUNSmallerThanABlock: an existing image shorter than one logical
// block would be a LUN of zero blocks (READ CAPACITY cannot express it).
func TestLUNSmallerThanABlock(t *testing.T) {
	img := filepath.Join(t.TempDir(), "tiny.img")
	if err := os.WriteFile(img, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runErr(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\""+img+"\"\n")
	if want := ":6: lun[0].path: " + img + " holds 100 bytes, less than one 512-byte block"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want %q", err, want)
	}
}

// TestLUNPartialBlock: an image whose length is not a whole number of
// logical blocks is refused, naming its path, its length and the block
// size, at start, by --check and through POST /luns: a logical unit of
// whole blocks would leave the bytes after the last whole block out of
// every initiator's reach while the file holds them.
func TestLUNPartialBlock(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "odd.img")
	if err := os.WriteFile(img, make([]byte, 1434), 0o600); err != nil { // 2 blocks of 512 and 410 bytes
		t.Fatal(err)
	}
	cfg := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\"" + img + "\"\n"
	want := ":6: lun[0].path: " + img + " holds 1434 bytes, not a whole number of 512-byte blocks: its last 410 bytes would be out of the initiators' reach; extend it to 1536 bytes (truncate -s 1536 " + img + ")"
	if err := runErr(t, cfg); !strings.HasSuffix(err.Error(), want) {
		t.Errorf("start: %v\nwant %q", err, want)
	}
	if err := run(testCtx(t), []string{"-check", "-config", writeConfig(t, cfg)}, io.Discard, io.Discard, nil); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("--check: %v\nwant %q", err, want)
	}
	// Read-only, with a size: the start serves the file's length too.
	if err := runErr(t, cfg+"read_only=true\nsize=\"1MiB\"\n"); !strings.Contains(err.Error(), "lun[0].path: "+img+" holds 1434 bytes, not a whole number of 512-byte blocks") {
		t.Errorf("read-only: %v", err)
	}
	// 3 blocks of 2048 bytes are 1.5 blocks of 4096: 2048-byte blocks
	// serve all of it.
	even := filepath.Join(dir, "even.img")
	if err := os.WriteFile(even, make([]byte, 3*2048), 0o600); err != nil {
		t.Fatal(err)
	}
	dr := launch(t, "-data-dir", filepath.Join(dir, "data"), "-listen", "127.0.0.1:0")
	code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": img}, nil)
	if code != 400 || !strings.Contains(body, "lun.path: "+img+" holds 1434 bytes, not a whole number of 512-byte blocks") {
		t.Errorf("POST /luns %s: %d %s", img, code, body)
	}
	code, body = dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": even, "block_size": 4096}, nil)
	if code != 400 || !strings.Contains(body, "holds 6144 bytes, not a whole number of 4096-byte blocks: its last 2048 bytes would be out of the initiators' reach; extend it to 8192 bytes (truncate -s 8192 "+even+") or set block_size = 2048") {
		t.Errorf("POST /luns %s, block_size 4096: %d %s", even, code, body)
	}
	// The LUN was not added: the same file with 2048-byte blocks is.
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": even, "block_size": 2048}, nil); code/100 != 2 {
		t.Errorf("POST /luns %s, block_size 2048: %d %s", even, code, body)
	}
}

// TestTwoLUNsOneImage: two LUNs on one file would be two disks sharing
// their blocks; the second is refused, also through a hard link.
func TestTwoLUNsOneImage(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "a.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "b.img")
	if err := os.Link(img, link); err != nil {
		t.Fatal(err)
	}
	for _, second := range []string{img, link} {
		err := runErr(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n"+
			"[[lun]]\nlun=0\nbackstore=\"file\"\npath=\""+img+"\"\n"+
			"[[lun]]\nlun=1\nbackstore=\"file\"\npath=\""+second+"\"\n")
		if want := ":10: lun[1].path: " + second + " is already the backstore of LUN 0"; !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want %q", err, want)
		}
	}

	// The admin API refuses it too.
	dr := launch(t, "-data-dir", filepath.Join(dir, "data"), "-listen", "127.0.0.1:0")
	code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": filepath.Join(dir, "data", "lun0.img")}, nil)
	if code != 400 || !strings.Contains(body, "is already the backstore of LUN 0") {
		t.Fatalf("add LUN on lun0.img: %d %s", code, body)
	}
}

// TestNoShrink: a configured size below the image's length is refused and
// the image keeps its length (truncating it would lose written data).
func TestNoShrink(t *testing.T) {
	img := filepath.Join(t.TempDir(), "big.img")
	if err := os.WriteFile(img, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runErr(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\""+img+"\"\nsize=\"1MiB\"\n")
	if want := ":7: lun[0].size: 1048576 bytes is less than the 2097152 bytes of " + img; !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want %q", err, want)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 2<<20 {
		t.Fatalf("image after refusal: %v %v", fi, err)
	}
}

// storedSerial reads LUN n's serial from DIR/identity.json.
func storedSerial(t *testing.T, dir, n string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct{ LUNs map[string]string }
	if err := json.Unmarshal(b, &id); err != nil {
		t.Fatal(err)
	}
	return id.LUNs[n]
}

// TestMissingImageIsANewDisk: when the default LUN's image was deleted,
// srptd creates an empty one; it must not present it under the old serial
// (initiators would take the empty disk for the one they wrote).
func TestMissingImageIsANewDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	dr := launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	if err := dr.stop(); err != nil {
		t.Fatal(err)
	}
	first := storedSerial(t, dir, "0")
	if first == "" {
		t.Fatal("no serial stored")
	}
	// A restart with the image in place keeps the serial.
	dr = launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	if err := dr.stop(); err != nil {
		t.Fatal(err)
	}
	if s := storedSerial(t, dir, "0"); s != first {
		t.Fatalf("serial changed across a plain restart: %q → %q", first, s)
	}
	if err := os.Remove(filepath.Join(dir, "lun0.img")); err != nil {
		t.Fatal(err)
	}
	dr = launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	var luns []adminapi.LUN
	dr.admin(t, "GET", "/luns", nil, &luns)
	if len(luns) != 1 || luns[0].Serial == first || luns[0].Serial == "" {
		t.Fatalf("recreated image served as %+v (old serial %q)", luns, first)
	}
	if !strings.Contains(dr.errOut.String(), "LUN image was missing") {
		t.Errorf("no warning:\n%s", dr.errOut.String())
	}
}

// TestBadStoredSerial: an unusable serial in identity.json is reported
// against identity.json, not the configuration.
func TestBadStoredSerial(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte(`{"ports":{},"luns":{"0":"bad\u0001serial"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The image exists: a missing one would be a new disk with a new serial.
	if err := os.WriteFile(filepath.Join(dir, "lun0.img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	err := run(ctx, []string{"-data-dir", dir, "-listen", "127.0.0.1:0"}, io.Discard, io.Discard, func(ready) { cancel() })
	if want := filepath.Join(dir, "identity.json") + ": luns.0: serial"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want %q", err, want)
	}
}

// TestWriteFileAtomicNamesTarget: a failed save names the file being
// written, not its temporary sibling.
func TestWriteFileAtomicNamesTarget(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "srptd.toml")
	err := writeFileAtomic(p, []byte("x"), 0o600)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != p || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want a PathError on %s", err, p)
	}
}

// TestAdminSocketNotASocket: admin.socket naming an existing file (or a
// directory) is an error naming it, and the file is left alone.
func TestAdminSocketNotASocket(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(f, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f, dir} {
		err := run(testCtx(t), []string{"-data-dir", filepath.Join(dir, "data"), "-listen", "127.0.0.1:0", "-admin", p}, io.Discard, io.Discard, nil)
		if want := "admin socket " + p + ": " + p + " exists and is not a unix socket"; err == nil || err.Error() != want {
			t.Errorf("err %v, want %q", err, want)
		}
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "keep me" {
		t.Fatalf("file after: %q %v", b, err)
	}
}

// TestPprofInUseBeforeLoginInfo: a -pprof address in use stops srptd
// before it prints login_info (initiators must not be told of a target
// that is about to exit).
func TestPprofInUseBeforeLoginInfo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out syncBuf
	err = run(testCtx(t), []string{"-data-dir", t.TempDir(), "-listen", "127.0.0.1:0", "-pprof", l.Addr().String()}, &out, io.Discard, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "--pprof: ") {
		t.Fatalf("err %v", err)
	}
	if out.String() != "" {
		t.Fatalf("printed %q", out.String())
	}
}

// TestSecondPortFailsBeforeLoginInfo: when the second port cannot listen,
// srptd exits without having printed the first port's login_info.
func TestSecondPortFailsBeforeLoginInfo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := writeConfig(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[port]]\nlisten=[\""+l.Addr().String()+"\"]\n")
	var out syncBuf
	err = run(testCtx(t), []string{"-config", cfg}, &out, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), ":4: port[1].listen: "+l.Addr().String()) {
		t.Fatalf("err %v", err)
	}
	if out.String() != "" {
		t.Fatalf("printed %q", out.String())
	}
}

// TestSetupErrorWithoutLoginWarning: a setup error is the only thing
// srptd says; the demo mode warning about refused logins comes only from
// a srptd that serves.
func TestSetupErrorWithoutLoginWarning(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logs syncBuf
	err = run(testCtx(t), []string{"-data-dir", t.TempDir(), "-listen", "0.0.0.0:0", "-metrics", l.Addr().String()}, io.Discard, &logs, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "--metrics: ") {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(logs.String(), "demo mode") {
		t.Fatalf("logged about demo mode before failing:\n%s", logs.String())
	}
}

// TestTruncatedIdentity: a damaged identity.json stops srptd with its path
// and what removing it would mean; it is not silently regenerated (the
// LUNs would change serials).
func TestTruncatedIdentity(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "identity.json")
	if err := os.WriteFile(p, []byte(`{"ports":{"iwarp0":"4e76`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	err := run(ctx, []string{"-data-dir", dir, "-listen", "127.0.0.1:0"}, io.Discard, io.Discard, func(ready) { t.Error("srptd started"); cancel() })
	if err == nil || !strings.HasPrefix(err.Error(), "data directory: "+p+": ") || !strings.Contains(err.Error(), "or remove it") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"ports":{"iwarp0":"4e76` {
		t.Fatalf("identity.json rewritten: %q", b)
	}
}

// TestOwnFilesAreNoBackstores: srptd's identity, lock and configuration
// files cannot be exported as LUNs (initiators would overwrite them).
func TestOwnFilesAreNoBackstores(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	dr := launch(t, "-data-dir", dir, "-listen", "127.0.0.1:0")
	for _, name := range []string{"identity.json", "lock"} {
		p := filepath.Join(dir, name)
		code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "file", "path": p}, nil)
		if code != 400 || !strings.Contains(body, p+" is srptd's own "+name+", not a backstore") {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	if err := dr.stop(); err != nil {
		t.Fatal(err)
	}
	// The configuration file itself, named in the configuration.
	cfg := filepath.Join(t.TempDir(), "srptd.toml")
	text := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\"" + cfg + "\"\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(testCtx(t), []string{"-config", cfg}, io.Discard, io.Discard, func(ready) { t.Error("srptd started") })
	if err == nil || !strings.Contains(err.Error(), cfg+" is srptd's own srptd.toml, not a backstore") {
		t.Fatalf("err %v", err)
	}
}

// TestAdminErrorTexts: 404 and 409 answers read as sentences, without a
// "conflict:" or "not found" tag (srpctl prints them as they are).
func TestAdminErrorTexts(t *testing.T) {
	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")
	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		want         string
	}{
		{"DELETE", "/luns/7", nil, 404, `{"error":"no LUN 7"}`},
		{"POST", "/luns", map[string]any{"lun": 0, "backstore": "ram", "size": "1MiB"}, 409, `{"error":"LUN 0 exists; remove it first"}`},
		{"DELETE", "/acls/192.0.2.9", nil, 404, `{"error":"no ACL for 192.0.2.9"}`},
		{"DELETE", "/sessions/42", nil, 404, `{"error":"no session \"42\""}`},
	} {
		code, body := dr.admin(t, tc.method, tc.path, tc.body, nil)
		if code != tc.code || strings.TrimSpace(body) != tc.want {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
}

// TestAdminLUNIdentityUnique: a LUN added at run time may not present the
// unit serial number or the NAA designator of a running one.
func TestAdminLUNIdentityUnique(t *testing.T) {
	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "ram", "size": "1MiB", "serial": "abc1"}, nil); code != 200 && code != 201 {
		t.Fatalf("add LUN 1: %d %s", code, body)
	}
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"lun": 2, "backstore": "ram", "size": "1MiB", "serial": "abc1"}, `lun.serial: \"abc1\" is the serial of LUN 1 already`},
		{map[string]any{"lun": 2, "backstore": "ram", "size": "1MiB", "serial": "x-abc1"}, "lun.serial: gives LUN 2 the NAA designator 6001405abc1000000000000000000000 (VPD 83h) of LUN 1"},
		{map[string]any{"lun": 2, "backstore": "ram", "size": "1MiB", "wwn": "6001405abc1000000000000000000000"}, "lun.wwn: gives LUN 2 the NAA designator"},
	} {
		code, body := dr.admin(t, "POST", "/luns", tc.body, nil)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%v: %d %s, want 400 with %q", tc.body, code, body, tc.want)
		}
	}
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 2, "backstore": "ram", "size": "1MiB", "serial": "abc2"}, nil); code != 200 && code != 201 {
		t.Fatalf("add LUN 2: %d %s", code, body)
	}
}

// TestImageLockedAcrossDaemons: a second srptd (another data directory)
// exporting an image the first serves writable is refused; read-only
// exports share an image.
func TestImageLockedAcrossDaemons(t *testing.T) {
	img := filepath.Join(t.TempDir(), "shared.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(ro bool) string {
		c := "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"file\"\npath=\"" + img + "\"\n"
		if ro {
			c += "read_only=true\n"
		}
		return writeConfig(t, c)
	}
	first := launch(t, "-config", cfg(false))
	for _, ro := range []bool{false, true} {
		err := run(testCtx(t), []string{"-config", cfg(ro)}, io.Discard, io.Discard, func(ready) { t.Error("second srptd started") })
		if want := ":6: lun[0].path: " + img + " is in use by another srptd (or another LUN)"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("read_only=%v: err %v, want %q", ro, err, want)
		}
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// Unlocked at exit; read-only exports share.
	launch(t, "-config", cfg(true))
	launch(t, "-config", cfg(true))
}

// TestAdminAddLUNWithoutDataDir: without a data directory a file LUN needs
// a path, and the error says why.
func TestAdminAddLUNWithoutDataDir(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	dr := launch(t, "-config", writeConfig(t, "[[port]]\nlisten=[\"127.0.0.1:0\"]\n"), "-admin", sock)
	code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "size": "1MiB"}, nil)
	if code != 400 || !strings.Contains(body, "lun.path: required: srptd runs without a data directory") {
		t.Fatalf("%d %s", code, body)
	}
}

// withPhysicalMemory makes the machine n bytes of memory large for the
// test.
func withPhysicalMemory(t *testing.T, n int64) {
	old := physicalMemory
	physicalMemory = func() int64 { return n }
	t.Cleanup(func() { physicalMemory = old })
}

// TestRAMLUNBeyondMemory: on a machine of 1 GiB, a RAM LUN of 2 GiB could
// never be filled: srptd --check, a start and POST /luns (srpctl target
// lun add) refuse it, naming both sizes; RAM LUNs allocate as they are
// written, so one of the whole memory is accepted.
func TestRAMLUNBeyondMemory(t *testing.T) {
	withPhysicalMemory(t, 1<<30)
	ram := func(size string) string {
		return "[[port]]\nlisten=[\"127.0.0.1:0\"]\n[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"" + size + "\"\n"
	}
	want := "srptd.toml:6: lun[0].size: 2147483648 bytes (2.0 GiB) is more than the 1073741824 bytes (1.0 GiB) of physical memory of this machine (MemTotal); a ram backstore keeps its data in memory"
	check := func(cfg string) error {
		return run(testCtx(t), []string{"-check", "-config", writeConfig(t, cfg)}, io.Discard, io.Discard, nil)
	}
	if err := check(ram("2GiB")); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("--check, 2 GiB RAM LUN: %v, want %q", err, want)
	}
	if err := runErr(t, ram("2GiB")); !strings.HasSuffix(err.Error(), want) {
		t.Errorf("start, 2 GiB RAM LUN: %v, want %q", err, want)
	}
	if err := check(ram("1GiB")); err != nil {
		t.Errorf("--check, 1 GiB RAM LUN: %v", err)
	}

	dr := launch(t, "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")
	code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "ram", "size": "2GiB"}, nil)
	if want := "lun.size: 2147483648 bytes (2.0 GiB) is more than the 1073741824 bytes (1.0 GiB) of physical memory"; code != 400 || !strings.Contains(body, want) {
		t.Errorf("POST /luns, 2 GiB RAM LUN: %d %s, want 400 %q", code, body, want)
	}
	if code, body := dr.admin(t, "POST", "/luns", map[string]any{"lun": 1, "backstore": "ram", "size": "1GiB"}, nil); code != 201 {
		t.Errorf("POST /luns, 1 GiB RAM LUN: %d %s", code, body)
	}
}

// TestMemTotal reads MemTotal from a meminfo file in bytes, and 0 (no
// limit known) from a file without a well-formed one.
func TestMemTotal(t *testing.T) {
	for text, want := range map[string]int64{
		"MemTotal:       16314252 kB\nMemFree:          123 kB\n": 16314252 << 10,
		"MemFree: 1 kB\nMemTotal: 1048576 kB\n":                   1 << 30,
		"MemFree: 1 kB\n":                                         0,
		"MemTotal: lots kB\n":                                     0,
		"MemTotal: 1048576 MB\n":                                  0,
		"MemTotal: -5 kB\n":                                       0,
	} {
		p := filepath.Join(t.TempDir(), "meminfo")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := memTotal(p); got != want {
			t.Errorf("%q: %d, want %d", text, got, want)
		}
	}
	if got := memTotal(filepath.Join(t.TempDir(), "missing")); got != 0 {
		t.Errorf("missing file: %d", got)
	}
}

// TestListenWithoutPortSection: --listen serves a configuration file that
// has no [[port]]: --check accepts it and a start listens on the address
// given (and logs in there, with --demo); without --listen the missing
// port is named along with the flag that provides it.
func TestListenWithoutPortSection(t *testing.T) {
	cfg := writeConfig(t, "[[lun]]\nlun=0\nbackstore=\"ram\"\nsize=\"1MiB\"\n")
	var out bytes.Buffer
	if err := run(testCtx(t), []string{"-check", "-config", cfg, "-listen", "127.0.0.1:0"}, &out, io.Discard, nil); err != nil || out.String() != "configuration OK\n" {
		t.Errorf("--check --listen: %v %q", err, out.String())
	}
	dr := launch(t, "-config", cfg, "-listen", "127.0.0.1:0", "--demo")
	if len(dr.lines) != 1 || !strings.Contains(dr.lines[0], ",dest=127.0.0.1:") {
		t.Fatalf("login_info %q", dr.lines)
	}
	dr.login(t)
	err := run(testCtx(t), []string{"-check", "-config", cfg}, io.Discard, io.Discard, nil)
	if want := "srptd.toml: port: at least one [[port]] is required (or --listen HOST:PORT)"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("no port, no --listen: %v, want %q", err, want)
	}
}
