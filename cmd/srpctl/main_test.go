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

// TestErrorPrintedOnce: a failed command's error reaches the user once, on
// stderr, with exit status 1: a task management function the target
// refuses (srptd has no NACA, so CLEAR ACA is FUNCTION NOT SUPPORTED,
// SRP r16a table 24 code 04h) and a CDB with an opcode no device has
// (ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE), whose raw sense bytes
// stay on stdout.
func TestErrorPrintedOnce(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	for _, tc := range []struct {
		args       []string
		wantStderr string
		once       string
	}{
		{[]string{"tmf", info[0], "clear-aca"}, "srpctl: CLEAR ACA lun 0: function not supported (0x04)\n", "function not supported"},
		{[]string{"scsi", info[0], "ff 00 00 00 00 00"}, "srpctl: scsi CHECK CONDITION: ILLEGAL REQUEST (key 0x5), asc/ascq 20h/00h INVALID COMMAND OPERATION CODE\n", "INVALID COMMAND OPERATION CODE"},
		{[]string{"read", info[0], "--bogus"}, "srpctl: unknown flag: --bogus\n", "--bogus"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != 1 || stderr.String() != tc.wantStderr {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, stderr.String(), tc.wantStderr)
		}
		if n := strings.Count(stdout.String()+stderr.String(), tc.once); n != 1 {
			t.Errorf("%v: %q printed %d times:\nstdout:\n%s\nstderr:\n%s", tc.args, tc.once, n, stdout.String(), stderr.String())
		}
	}
}
