package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckOpensWhatStartOpens: --check finds what would stop a start
// (each named by file, line and key) and says "configuration OK" only when
// the start succeeds; it creates nothing.
func TestCheckOpensWhatStartOpens(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := "[[port]]\nlisten = [\"127.0.0.1:0\"]\n" // lines 1-2
	lun := func(n int, backstore, path, extra string) string {
		return "[[lun]]\nlun = " + string(rune('0'+n)) + "\nbackstore = \"" + backstore + "\"\npath = \"" + path + "\"\n" + extra
	}
	for _, tc := range []struct{ name, cfg, want string }{
		{"directory", port + lun(0, "file", dir, ""), "srptd.toml:6: lun[0].path: " + dir + " is neither a regular file nor a block device"},
		{"file as block", port + lun(0, "block", img, ""), "srptd.toml:6: lun[0].path: " + img + " is not a block device"},
		{"missing block", port + lun(0, "block", img+".nope", ""), "srptd.toml:6: lun[0].path: " + img + ".nope: no such block device"},
		{"missing without size", port + lun(0, "file", img+".new", ""), "srptd.toml:6: lun[0].path: " + img + ".new does not exist"},
		{"missing directory", port + lun(0, "file", filepath.Join(dir, "no", "x.img"), "size = \"1MiB\"\n"), "srptd.toml:6: lun[0].path: image " + filepath.Join(dir, "no", "x.img") + ": stat " + filepath.Join(dir, "no")},
		{"one file twice", port + lun(0, "file", img, "") + lun(1, "file", img, ""), "srptd.toml:10: lun[1].path: " + img + " is already the backstore of lun[0]"},
		{"one new file twice", port + lun(0, "file", img+".new", "size = \"1MiB\"\n") + lun(1, "file", dir+"/./disk.img.new", "size = \"1MiB\"\n"), "srptd.toml:11: lun[1].path: " + dir + "/./disk.img.new" + " is already the backstore of lun[0]"},
		{"address twice", "[[port]]\nlisten = [\"127.0.0.1:5599\"]\n[[port]]\nlisten = [\"127.0.0.1:5599\"]\n", "srptd.toml:4: port[1].listen: 127.0.0.1:5599 is listed twice (also in port[0].listen)"},
		{"address in use", "[[port]]\nlisten = [\"" + busy.Addr().String() + "\"]\n", "srptd.toml:2: port[0].listen: " + busy.Addr().String() + ": "},
		{"metrics in use", port + "[metrics]\nlisten = \"" + busy.Addr().String() + "\"\n", "srptd.toml:4: metrics.listen: listen tcp " + busy.Addr().String() + ": bind: address already in use"},
		{"admin socket directory missing", port + "[admin]\nsocket = \"" + filepath.Join(dir, "no", "srptd.sock") + "\"\n", "srptd.toml:4: admin.socket: " + filepath.Join(dir, "no", "srptd.sock") + ": stat " + filepath.Join(dir, "no") + ": no such file or directory"},
		{"admin socket path too long", port + "[admin]\nsocket = \"/" + strings.Repeat("a", 120) + "\"\n", "srptd.toml:4: admin.socket: 121 bytes, longer than the 107 a unix socket path can have"},
	} {
		cfg := writeConfig(t, tc.cfg)
		var out bytes.Buffer
		err := run(testCtx(t), []string{"-check", "-config", cfg}, &out, io.Discard, nil)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), filepath.Dir(cfg)+"/")
		}
		if !strings.HasPrefix(got, tc.want) || out.Len() != 0 {
			t.Errorf("%s:\n got %q (printed %q)\nwant %q", tc.name, got, out.String(), tc.want)
		}
	}

	// A good configuration: OK, and the image it would create is not
	// created by the check.
	newImg := filepath.Join(dir, "new.img")
	good := writeConfig(t, port+lun(0, "file", img, "")+lun(1, "file", newImg, "size = \"1MiB\"\n"))
	var out bytes.Buffer
	if err := run(testCtx(t), []string{"-check", "-config", good}, &out, io.Discard, nil); err != nil || out.String() != "configuration OK\n" {
		t.Fatalf("good configuration: %v %q", err, out.String())
	}
	if _, err := os.Stat(newImg); err == nil {
		t.Fatal("--check created an image")
	}

	// A running srptd holds its data directory and its images.
	data := filepath.Join(dir, "data")
	held := writeConfig(t, port+lun(0, "file", img, ""))
	launch(t, "--config", held, "--data-dir", data)
	err = run(testCtx(t), []string{"-check", "-config", held, "-data-dir", data}, io.Discard, io.Discard, nil)
	for _, want := range []string{"data directory " + data + " is in use by another srptd", "lun[0].path: " + img + " is in use by another srptd", "admin socket " + filepath.Join(data, "srptd.sock") + ": another srptd is serving"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check beside a running srptd: %v\nwant %q", err, want)
		}
	}
}
