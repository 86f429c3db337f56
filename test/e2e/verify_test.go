package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
)

// TestBenchVerify runs `srpctl bench --verify` against the target engine
// over iWARP on 127.0.0.1: two passes of CRC32C-checked random writes and
// read-backs pass, a --verify-only re-read passes, and then blocks changed
// behind its back over another login are reported — overwritten, copied to
// another LBA, left from an earlier pass — each with exit status 1.
func TestBenchVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("builds srpctl")
	}
	bin := buildSrpctl(t)
	e := startTarget(t, iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), "127.0.0.1:0")
	tgt := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", guid, guid, e.addr)
	srpctl := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		var o, s bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &s
		err := cmd.Run()
		code = -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		if ctx.Err() != nil {
			t.Fatalf("srpctl %s: %v (timed out)\n%s", strings.Join(args, " "), err, s.String())
		}
		return o.String(), s.String(), code
	}
	// LUN 0: 512-byte blocks; 16 KiB I/Os over the first 4 MiB = 256 slots
	// of 32 blocks, 8192 blocks per pass.
	common := []string{"bench", tgt, "--reconnect-delay", "200ms", "--bs", "16k", "--size", "4m", "--qd", "8", "--rw", "randwrite", "--verify-seed", "77", "--loops", "2"}
	out, errOut, code := srpctl(append(append([]string{}, common...), "--verify", "--json")...)
	var r struct {
		Seed       uint64 `json:"verify_seed"`
		Written    int64  `json:"blocks_written"`
		Read       int64  `json:"blocks_read"`
		Mismatches int64  `json:"mismatches"`
		IOErrors   int64  `json:"io_errors"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("bench --verify: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	// Two passes, each writing and reading all 8192 blocks.
	if r.Seed != 77 || r.Written != 2*8192 || r.Read != 2*8192 || r.Mismatches != 0 || r.IOErrors != 0 {
		t.Fatalf("bench --verify: %+v", r)
	}
	verifyOnly := func() (string, int) {
		t.Helper()
		out, errOut, code := srpctl(append(append([]string{}, common...), "--verify-only")...)
		return out + errOut, code
	}
	if out, code := verifyOnly(); code != 0 || !strings.Contains(out, "blocks written=0 read=8192 mismatches=0 io_errors=0") {
		t.Fatalf("--verify-only of an intact region: exit %d\n%s", code, out)
	}

	s := e.dial(t, nil)
	ctx := ctxFor(t)
	// Overwrite LBA 100 with a pattern of no verify header.
	if err := s.Write16(ctx, 0, 100, bytes.Repeat([]byte{0x55}, 512), 512, false); err != nil {
		t.Fatal(err)
	}
	// Copy LBA 200's block over LBA 300.
	blk := make([]byte, 512)
	if err := s.Read16(ctx, 0, 200, blk, 512, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Write16(ctx, 0, 300, blk, 512, false); err != nil {
		t.Fatal(err)
	}
	// Flip one payload bit of LBA 400.
	if err := s.Read16(ctx, 0, 400, blk, 512, false); err != nil {
		t.Fatal(err)
	}
	blk[300] ^= 4
	if err := s.Write16(ctx, 0, 400, blk, 512, false); err != nil {
		t.Fatal(err)
	}
	out, code = verifyOnly()
	for _, want := range []string{
		"lba 100: no verify header",
		"lba 300: misplaced: holds the block written to lba 200",
		"lba 400: corrupt: CRC32C",
		"mismatches=3",
		"verify failed: 3 of 8192 blocks mismatched, 0 I/O errors (seed 77)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--verify-only after changes: lacks %q", want)
		}
	}
	if code != 1 {
		t.Errorf("--verify-only after changes: exit status %d, want 1", code)
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}

	// A third pass's check reads the second pass's blocks: every block is
	// stale, as after lost writes.
	// LBAs 0..63 (32 KiB), all intact, checked for a third pass.
	o3, e3, code := srpctl("bench", tgt, "--bs", "16k", "--size", "32k", "--qd", "2", "--verify-seed", "77", "--loops", "3", "--verify-only")
	if code != 1 || !strings.Contains(o3, "mismatches=64") || !strings.Contains(e3, "stale: generation 2, want 3") {
		t.Errorf("--verify-only --loops 3: exit %d, want 1 and 64 stale blocks\n%s%s", code, o3, e3)
	}
}
