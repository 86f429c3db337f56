package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionAndManPages: --version prints the build; man DIR writes
// srpctl(8) and a page per subcommand, generated from the command
// definitions (so every flag is in them), and none for itself.
func TestVersionAndManPages(t *testing.T) {
	var out bytes.Buffer
	c := newRootCmd()
	c.SetOut(&out)
	c.SetArgs([]string{"--version"})
	if err := c.Execute(); err != nil || !strings.HasPrefix(out.String(), "srpctl ") || !strings.Contains(out.String(), " go1.") {
		t.Fatalf("--version: %v %q", err, out.String())
	}
	dir := t.TempDir()
	c = newRootCmd()
	c.SetArgs([]string{"man", dir})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	for page, want := range map[string]string{
		"srpctl.8":                 `.TH "SRPCTL" "8"`,
		"srpctl-login.8":           `\fB--single\fP`,
		"srpctl-target-lun-add.8":  `\fB--block-size\fP`,
		"srpctl-completion-bash.8": "bash",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %v, want %q in it", page, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "srpctl-man.8")); err == nil {
		t.Error("the hidden man command has a page")
	}
}
