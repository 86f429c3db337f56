package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
)

// buildSrpctl builds cmd/srpctl into a temporary directory.
func buildSrpctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "srpctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/srpctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go build srpctl: %v\n%s", err, out)
	}
	return bin
}

// TestSrpctlAgainstTargetEngine runs the srpctl initiator commands against
// the target engine served over iWARP on 127.0.0.1.
func TestSrpctlAgainstTargetEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds srpctl")
	}
	bin := buildSrpctl(t)
	// Completions on transmit on both sides, as Linux siw reports them (and
	// as srpctl configures its device).
	e := startTarget(t, iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), "127.0.0.1:0")
	tgt := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", guid, guid, e.addr)
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		t0 := time.Now()
		defer func() { t.Logf("srpctl %s: %v", args[0], time.Since(t0).Round(time.Millisecond)) }()
		if err := cmd.Run(); err != nil {
			t.Fatalf("srpctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		if os.Getenv("E2E_DEBUG") != "" {
			t.Logf("stderr: %s", stderr.String())
		}
		return stdout.String()
	}
	out := run("login", tgt)
	for _, want := range []string{"req_lim", "max_it_iu_len      8276", "max_ti_iu_len", "immediate data     true", fmt.Sprintf("target port ID     %016x%016x", guid, guid)} {
		if !strings.Contains(out, want) {
			t.Errorf("login output lacks %q:\n%s", want, out)
		}
	}
	if out := run("luns", tgt); !strings.Contains(out, "lun 0") || !strings.Contains(out, "lun 1") {
		t.Errorf("luns:\n%s", out)
	}
	if out := run("inquiry", tgt); !strings.Contains(out, "vendor            GOSRP") {
		t.Errorf("inquiry:\n%s", out)
	}
	if out := run("readcap", tgt, "--lun", "1"); !strings.Contains(out, "block size        4096") || !strings.Contains(out, "blocks            4096") {
		t.Errorf("readcap:\n%s", out)
	}
	// write a random file (not a whole number of blocks) and read it back.
	data := make([]byte, 3<<20+1000)
	rand.Read(data)
	in := filepath.Join(dir, "in")
	os.WriteFile(in, data, 0o644)
	run("write", tgt, "-v", "--if", in, "--lba", "8", "--quiet", "--bs", "256k")
	outf := filepath.Join(dir, "out")
	blocks := (len(data) + 511) / 512
	run("read", tgt, "--of", outf, "--lba", "8", "--count", fmt.Sprint(blocks), "--quiet")
	got, _ := os.ReadFile(outf)
	if len(got) != blocks*512 || !bytes.Equal(got[:len(data)], data) || !bytes.Equal(got[len(data):], make([]byte, blocks*512-len(data))) {
		t.Fatalf("read back %d bytes, differs from the %d written", len(got), len(data))
	}
	// Raw CDB: READ CAPACITY(10), 8 bytes of data-in.
	if out := run("scsi", tgt, "25 00 00 00 00 00 00 00 00 00", "--in", "8"); !strings.Contains(out, "SCSI Status: GOOD") || !strings.Contains(out, "Received 8 bytes") || !strings.Contains(out, "00 01 ff ff 00 00 02 00") {
		t.Errorf("scsi READ CAPACITY(10):\n%s", out)
	}
	if out := run("tmf", tgt, "lun-reset"); !strings.Contains(out, "LOGICAL UNIT RESET lun 0: function complete") {
		t.Errorf("tmf:\n%s", out)
	}
	out = run("bench", tgt, "--runtime", "1s", "--qd", "8", "--bs", "4k", "--rw", "randrw", "--json", "--size", "16m")
	var r benchJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.IOs == 0 || r.Errors != 0 || r.LatP50Us <= 0 || r.LatP99Us < r.LatP50Us {
		t.Errorf("bench: %v\n%s", err, out)
	}
}

type benchJSON struct {
	IOs      int64   `json:"ios"`
	Errors   int64   `json:"errors"`
	IOPS     float64 `json:"iops"`
	LatP50Us float64 `json:"lat_p50_us"`
	LatP99Us float64 `json:"lat_p99_us"`
}

// TestSrpctlArgumentCounts: every initiator command checks its positional
// arguments and flags before connecting (tmf abort is refused, naming why; attach a
// directory to mount on; bench's
// --bs must fit a max_sect the target string sets, --qd, --channels, --runtime and --rwmixread must make sense);
// a bad one is a usage error (exit status 1 with a message), never a crash
// (Go's exit status 2) or a run that does nothing.
func TestSrpctlArgumentCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds srpctl")
	}
	bin := buildSrpctl(t)
	// Nothing listens on this address: a command that got past its checks
	// would fail later with a connection error instead.
	tgt := "id_ext=0002c90300a1b2c3,ioc_guid=0002c90300a1b2c3,dest=127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"scsi", tgt}, "arg(s)"},
		{[]string{"scsi", tgt, "00 00 00 00 00 00", "extra"}, "arg(s)"},
		{[]string{"tmf", tgt}, "arg(s)"},
		{[]string{"tmf", tgt, "abort"}, "ABORT TASK needs the tag of a command in flight"},
		{[]string{"attach", tgt}, "arg(s)"},
		{[]string{"attach", tgt, filepath.Join(t.TempDir(), "missing")}, "mount point: stat"},
		{[]string{"attach", tgt, bin}, "is not a directory"},
		{[]string{"login", tgt, "extra"}, "arg(s)"},
		{[]string{"luns"}, "arg(s)"},
		{[]string{"inquiry", tgt, "extra"}, "arg(s)"},
		{[]string{"readcap", tgt, "extra"}, "arg(s)"},
		{[]string{"inquiry", tgt, "--vpd", "256"}, "page code is 0..255"},
		// 16384 would wrap to LUN 0 in the 14-bit flat space LUN field.
		{[]string{"readcap", tgt, "--lun", "16384"}, "LUN number is 0..16383"},
		{[]string{"write", tgt, "--lun", "-1", "--if", bin}, "LUN number is 0..16383"},
		{[]string{"inquiry", tgt, "--vpd", "-2"}, "page code is 0..255"},
		{[]string{"bench", tgt, "extra"}, "several targets (gateways of one LU, through multipath) take --verify"},
		{[]string{"read", tgt, "extra", "--of", "/dev/null"}, "arg(s)"},
		// 1 MiB is 2048 sectors: over a max_sect the target string sets.
		{[]string{"bench", tgt + ",max_sect=1024", "--bs", "1m"}, "above TARGET's max_sect 1024 x 512 bytes; raise it to max_sect=2048, or leave it out"},
		{[]string{"bench", tgt + ",max_sect=100", "--bs", "51712"}, "max_sect 100 x 512 bytes; raise it to max_sect=101"},
		{[]string{"bench", tgt, "--qd", "0"}, "--qd"},
		{[]string{"bench", tgt, "--qd", "100000"}, "--qd 100000: more than the"},
		{[]string{"bench", tgt, "--channels", "0"}, "--channels 0: 1 to 255 RDMA channels"},
		{[]string{"bench", tgt, "--runtime", "0s"}, "--runtime"},
		{[]string{"bench", tgt, "--rwmixread", "101"}, "--rwmixread"},
		{[]string{"bench", tgt, "--verify-only"}, "give its --verify-seed"},
		{[]string{"login", "id_ext=1,ioc_guid=2,dgid=fe800000000000000002c903000e8acc,pkey=ffff,service_id=1,transport=iwarp"}, "iWARP/RDMA-CM addressing needs dest=IP:port"},
		{[]string{"bench", tgt, "--verify", "--loops", "0"}, "--loops 0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin, c.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		if code != 1 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "panic") {
			t.Errorf("srpctl %s: %v, exit status %d, want 1 and %q in stderr:\n%s", strings.Join(c.args, " "), err, code, c.want, stderr.String())
		}
	}
}
