package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIdentityPerDataDir: two srptd with two data directories on one host
// are two targets (different service GUIDs, no warning); a third started
// on a copy of the first's identity.json serves the first's GUID and
// warns, naming the first's data directory.
func TestIdentityPerDataDir(t *testing.T) {
	tmp := t.TempDir()
	dirA, dirB, dirC := filepath.Join(tmp, "a"), filepath.Join(tmp, "b"), filepath.Join(tmp, "c")
	a := launch(t, "--data-dir", dirA, "--listen", "127.0.0.1:0")
	b := launch(t, "--data-dir", dirB, "--listen", "127.0.0.1:0")
	guid := func(dr *daemonRun) string {
		t.Helper()
		if len(dr.lines) != 1 {
			t.Fatalf("login_info %q", dr.lines)
		}
		id, _, _ := strings.Cut(dr.lines[0], ",")
		return id
	}
	if guid(a) == guid(b) {
		t.Fatalf("two data directories, one target port: %s", guid(a))
	}
	for _, dr := range []*daemonRun{a, b} {
		if s := dr.errOut.String(); strings.Contains(s, "same service GUID") {
			t.Errorf("warning without a clash:\n%s", s)
		}
	}

	if err := os.Mkdir(dirC, 0o700); err != nil {
		t.Fatal(err)
	}
	id, err := os.ReadFile(filepath.Join(dirA, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirC, "identity.json"), id, 0o600); err != nil {
		t.Fatal(err)
	}
	c := launch(t, "--data-dir", dirC, "--listen", "127.0.0.1:0")
	if guid(c) != guid(a) {
		t.Fatalf("copied identity.json: %s, want %s", guid(c), guid(a))
	}
	log := c.errOut.String()
	if !strings.Contains(log, "another running srptd on this host serves the same service GUID") || !strings.Contains(log, "data_dir "+dirA) {
		t.Errorf("no warning naming %s:\n%s", dirA, log)
	}

	// Once the first stops, its GUID is free: a restart of the copy does
	// not warn.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	c2 := launch(t, "--data-dir", dirC, "--listen", "127.0.0.1:0")
	if s := c2.errOut.String(); strings.Contains(s, "same service GUID") {
		t.Errorf("warning after the other srptd stopped:\n%s", s)
	}
}
