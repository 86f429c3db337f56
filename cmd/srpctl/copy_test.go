package main

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"
)

// runCopyCmd runs one srpctl command in-process and returns its error.
func runCopyCmd(t *testing.T, args ...string) error {
	t.Helper()
	c := map[string]func() *cobra.Command{"read": newReadCmd, "write": newWriteCmd}[args[0]]()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args[1:])
	return c.ExecuteContext(adminTestCtx(t))
}

// TestCopyRefusesShortResults: read --count beyond the LUN's end fails
// (the default LUN has 2097152 blocks of 512 bytes) instead of copying
// fewer blocks and succeeding, and leaves --of untouched; write --if of
// something without a length (a directory, a device) fails before login.
func TestCopyRefusesShortResults(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	dir := t.TempDir()
	of := filepath.Join(dir, "out")
	if err := os.WriteFile(of, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"read", info[0], "--of", of, "--lba", "2097151", "--count", "2", "--quiet"}, "--count 2: the LUN has 1 blocks from LBA 2097151 to its end"},
		{[]string{"read", info[0], "--of", of, "--count", "2097153", "--quiet"}, "--count 2097153: the LUN has 2097152 blocks from LBA 0 to its end"},
		{[]string{"read", info[0], "--of", of, "--count", "-2", "--quiet"}, "--count -2: a number of blocks is 0 or more"},
		{[]string{"write", info[0], "--if", dir, "--quiet"}, "--if " + dir + ": not a file, block device or stream"},
		{[]string{"write", info[0], "--if", os.DevNull, "--quiet"}, "--if /dev/null: the input is empty; nothing was written"},
	} {
		if err := runCopyCmd(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if b, err := os.ReadFile(of); err != nil || string(b) != "keep" {
		t.Errorf("--of after the refusals: %q %v", b, err)
	}
	// The last block alone is fine.
	if err := runCopyCmd(t, "read", info[0], "--of", of, "--lba", "2097151", "--count", "1", "--quiet"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(of); err != nil || fi.Size() != 512 {
		t.Fatalf("last block: %v %v", fi, err)
	}
	// A character device and a pipe take the blocks in order: no
	// "sync /dev/null: invalid argument", no "illegal seek".
	if err := runCopyCmd(t, "read", info[0], "--of", os.DevNull, "--count", "64", "--qd", "8", "--bs", "4k", "--quiet"); err != nil {
		t.Errorf("read --of /dev/null: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- b
	}()
	if err := runCopyCmd(t, "read", info[0], "--of", fifo, "--lba", "2097088", "--count", "64", "--qd", "8", "--bs", "4k", "--quiet"); err != nil {
		t.Errorf("read --of FIFO: %v", err)
	}
	if b := <-got; len(b) != 64*512 {
		t.Errorf("read --of FIFO: %d bytes arrived, want %d", len(b), 64*512)
	}
}

// TestSCSIDataLength: srpctl scsi refuses a data-in length it cannot
// allocate (it crashed out of memory) or a negative one, before logging
// in (the target string names no listener).
func TestSCSIDataLength(t *testing.T) {
	const tgt = "id_ext=1,ioc_guid=1,dest=127.0.0.1:1"
	for _, tc := range []struct{ in, want string }{
		{"99999999999", "--in 99999999999: want 0..1073741824 bytes"},
		{"-1", "--in -1: want 0..1073741824 bytes"},
	} {
		c := newSCSICmd()
		c.SetOut(&bytes.Buffer{})
		c.SetErr(&bytes.Buffer{})
		c.SetArgs([]string{tgt, "12 00 00 00 60 00", "--in", tc.in})
		if err := c.ExecuteContext(adminTestCtx(t)); err == nil || err.Error() != tc.want {
			t.Errorf("--in %s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestTimeoutFlags: timeouts that mean nothing are refused before login
// (the target string names no listener).
func TestTimeoutFlags(t *testing.T) {
	const tgt = "id_ext=1,ioc_guid=1,dest=127.0.0.1:1"
	for _, tc := range []struct{ flag, val, want string }{
		{"--connect-timeout", "0", "--connect-timeout 0s: must be positive"},
		{"--connect-timeout", "-1s", "--connect-timeout -1s: must be positive"},
		{"--cmd-timeout", "-1s", "--cmd-timeout -1s: must not be negative (0: the default)"},
		{"--fast-io-fail-tmo", "-2s", "--fast-io-fail-tmo -2s: must not be negative (0: the default)"},
		{"--dev-loss-tmo", "-3s", "--dev-loss-tmo -3s: must not be negative (0: the default)"},
	} {
		c := newReadcapCmd()
		c.SetOut(&bytes.Buffer{})
		c.SetErr(&bytes.Buffer{})
		c.SetArgs([]string{tgt, tc.flag, tc.val})
		if err := c.ExecuteContext(adminTestCtx(t)); err == nil || err.Error() != tc.want {
			t.Errorf("%s %s: %v, want %q", tc.flag, tc.val, err, tc.want)
		}
	}
}

// TestWriteFromStreamAndBlockDevice: write --if - copies stdin to its end
// (the last partial block zero-padded) with several commands in flight,
// and write --if takes a block device's whole length.
func TestWriteFromStreamAndBlockDevice(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	dir := t.TempDir()
	data := make([]byte, 1<<20+100)
	rand.Read(data)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	stdin := os.Stdin
	os.Stdin = r
	err = runCopyCmd(t, "write", info[0], "--if", "-", "--bs", "64k", "--qd", "4", "--lba", "8", "--quiet")
	os.Stdin = stdin
	r.Close()
	if err != nil {
		t.Fatalf("write --if -: %v", err)
	}
	back := filepath.Join(dir, "back")
	blocks := (len(data) + 511) / 512
	if err := runCopyCmd(t, "read", info[0], "--of", back, "--lba", "8", "--count", strconv.Itoa(blocks+1), "--quiet"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(back)
	want := append(append([]byte{}, data...), make([]byte, (blocks+1)*512-len(data))...)
	if !bytes.Equal(got, want) {
		t.Fatal("LUN after write --if - differs from stdin (zero-padded)")
	}

	if _, err := exec.LookPath("losetup"); err != nil || os.Geteuid() != 0 {
		t.Skip("block device input needs root and losetup")
	}
	img := filepath.Join(dir, "img")
	dev := make([]byte, 256<<10)
	rand.Read(dev)
	if err := os.WriteFile(img, dev, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("losetup: %v %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "-d", loop).Run()
	if err := runCopyCmd(t, "write", info[0], "--if", loop, "--quiet"); err != nil {
		t.Fatalf("write --if %s: %v", loop, err)
	}
	if err := runCopyCmd(t, "read", info[0], "--of", back, "--count", strconv.Itoa(len(dev)/512), "--quiet"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, dev) {
		t.Fatal("LUN after write --if BLOCKDEV differs from the device")
	}
}

// TestSCSIFailedDataIn: srpctl scsi does not dump the --in buffer of a
// command the target refused without a data-in residual (LOG SENSE is not
// implemented: ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE); it did
// print all --in bytes as received. A GOOD command prints what arrived.
func TestSCSIFailedDataIn(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	run := func(cdb string) (string, error) {
		c := newSCSICmd()
		c.SilenceErrors, c.SilenceUsage = true, true
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs([]string{info[0], cdb, "--in", "4096"})
		err := c.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := run("4d 00 00 00 00 00 00 10 00 00")
	if err == nil || !strings.Contains(err.Error(), "20h/00h") || strings.Contains(out, "Received 4096 bytes") || !strings.Contains(out, "No data-in reported (status CHECK CONDITION, no residual)") {
		t.Errorf("LOG SENSE: %v\n%s", err, out)
	}
	// INQUIRY allocation length 96: an underflow of 4000 bytes.
	if out, err := run("12 00 00 00 60 00"); err != nil || !strings.Contains(out, "Received 96 bytes of data:") {
		t.Errorf("INQUIRY: %v\n%s", err, out)
	}
}
