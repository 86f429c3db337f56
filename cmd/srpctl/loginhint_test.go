package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoginRejectHints: a login refused for its IU length names the
// max_it_iu_size the target accepts (srptd's max_req_size, found by
// probing), and that string then logs in; a login refused for want of an
// ACL prints this initiator's port ID, demo_mode (which admits everyone)
// and the srpctl target acl add line, which then admits it.
func TestLoginRejectHints(t *testing.T) {
	ctx := adminTestCtx(t)
	cfg := filepath.Join(t.TempDir(), "srptd.toml")
	if err := os.WriteFile(cfg, []byte(`
[target]
max_req_size = 4000
demo_mode = false
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "1MiB"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	info, data := startSrptdArgs(t, ctx, "--config", cfg)
	sock := filepath.Join(data, "srptd.sock")
	login := func(target string) (string, error) {
		c := newLoginCmd()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs([]string{target})
		err := c.ExecuteContext(ctx)
		return out.String(), err
	}

	// srpctl's default initiator asks for 8260-byte IUs: refused first for
	// the length (ib_srpt checks it before the ACL), then, by the probe's
	// smaller logins, for the ACL.
	_, err := login(info[0])
	want := "the target accepts initiator-to-target IUs of up to"
	if err == nil || strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "with a smaller IU: srp login rejected on channel 0: RDMA channel limit reached") {
		t.Fatalf("IU length reject without an ACL: %v", err)
	}
	const pre = "  srpctl target acl add "
	i := strings.Index(err.Error(), pre)
	if i < 0 || !strings.Contains(err.Error(), "this initiator's port ID is 0x") || !strings.Contains(err.Error(), "admit every initiator with demo_mode = true in the [target] section of srptd's configuration (or srptd --demo)") {
		t.Fatalf("ACL reject: %v\nwant the port ID, demo_mode and the acl add line", err)
	}
	id := strings.TrimSpace(err.Error()[i+len(pre):])
	if out, err := srpctl(ctx, sock, "acl", "add", id); err != nil {
		t.Fatalf("acl add %s: %v %s", id, err, out)
	}

	_, err = login(info[0])
	want = "the target accepts initiator-to-target IUs of up to 4000 bytes (this login asked for 8260): add max_it_iu_size=4000 to the target string"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "smaller IU") {
		t.Fatalf("IU length reject: %v\nwant %q", err, want)
	}
	if out, err := login(info[0] + ",max_it_iu_size=4000"); err != nil || !strings.Contains(out, "req_it_iu_len      4000") {
		t.Fatalf("login with the suggested max_it_iu_size: %v\n%s", err, out)
	}
}

// TestLoginRejectChannelLimit: a login whose first channel the target
// admits and a later one it refuses with 0x10006 (its channel limit per
// I_T nexus, here srptd's max_channels = 2) names the limit and the
// ch_count to use, not a missing ACL or demo_mode.
func TestLoginRejectChannelLimit(t *testing.T) {
	ctx := adminTestCtx(t)
	cfg := filepath.Join(t.TempDir(), "srptd.toml")
	if err := os.WriteFile(cfg, []byte(`
[target]
max_channels = 2
demo_mode = true
[[port]]
listen = ["127.0.0.1:0"]
[[lun]]
lun = 0
backstore = "ram"
size = "1MiB"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	info, _ := startSrptdArgs(t, ctx, "--config", cfg)
	c := newLoginCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs([]string{info[0] + ",ch_count=3"})
	err := c.ExecuteContext(ctx)
	want := "the target admitted 2 channel(s) of this session and refused the next"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "lower ch_count (bench: --channels) to 2 or less") {
		t.Fatalf("login with ch_count=3: %v\nwant %q", err, want)
	}
	if strings.Contains(err.Error(), "acl add") || strings.Contains(err.Error(), "demo_mode = true") {
		t.Errorf("channel limit explained as a missing ACL: %v", err)
	}
}
