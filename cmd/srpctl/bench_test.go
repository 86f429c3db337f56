package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchStopsWhenLUNRemoved: a LUN removed under a running bench
// answers LOGICAL UNIT NOT SUPPORTED (ILLEGAL REQUEST, 25h/00h) to every
// command; bench stops with that error instead of running (and logging
// every failed command) until --runtime ends.
func TestBenchStopsWhenLUNRemoved(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	sock := filepath.Join(data, "srptd.sock")
	if out, err := srpctl(ctx, sock, "lun", "add", "--lun", "1", "--backstore", "ram", "--size", "16MiB"); err != nil {
		t.Fatalf("lun add: %v %s", err, out)
	}
	c := newBenchCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs([]string{info[0], "-l", "1", "--rw", "randwrite", "--qd", "4", "--runtime", "10m"})
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.ExecuteContext(ctx) }()

	// Remove the LUN once it has served commands.
	for {
		js, err := srpctl(ctx, sock, "luns", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var luns []struct {
			LUN      uint64 `json:"lun"`
			Counters struct {
				Commands uint64 `json:"commands"`
			} `json:"counters"`
		}
		if err := json.Unmarshal([]byte(js), &luns); err != nil {
			t.Fatalf("%v in %q", err, js)
		}
		if len(luns) == 2 && luns[1].LUN == 1 && luns[1].Counters.Commands > 100 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("bench ended before the removal: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatal("bench issued no commands")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if o, err := srpctl(ctx, sock, "lun", "remove", "1"); err != nil {
		t.Fatalf("lun remove: %v %s", err, o)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "LOGICAL UNIT NOT SUPPORTED") || !strings.HasPrefix(err.Error(), "--lun 1: the target reports no such LUN, only LUN 0 (REPORT LUNS): bench stopped after ") {
			t.Fatalf("bench: %v\n%s", err, out.String())
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("bench ran on for %v", time.Since(start))
		}
	case <-ctx.Done():
		t.Fatal("bench did not stop after the LUN was removed")
	}
}

// TestBenchMissingLUN: a --lun the target does not have is refused naming
// it and the LUNs the target reports (REPORT LUNS), with the sense the
// target answered: by bench (over one target, and over two with --verify,
// where INQUIRY VPD 83h meets it), and by the other commands with --lun.
func TestBenchMissingLUN(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	if out, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "lun", "add", "--lun", "3", "--backstore", "ram", "--size", "1m"); err != nil {
		t.Fatalf("lun add: %v %s", err, out)
	}
	const lunNotSupported = "scsi CHECK CONDITION: ILLEGAL REQUEST (key 0x5), asc/ascq 25h/00h LOGICAL UNIT NOT SUPPORTED"
	const want = "--lun 7: the target reports no such LUN, only LUNs 0, 3 (REPORT LUNS): "
	out, err := benchOutput(ctx, info[0], "--lun", "7", "--runtime", "300ms")
	if err == nil || err.Error() != want+lunNotSupported {
		t.Errorf("bench --lun 7: %v, want %q\n%s", err, want+lunNotSupported, out)
	}
	out, err = benchOutput(ctx, info[0], info[0], "--lun", "7", "--verify", "--size", "1m")
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "ILLEGAL REQUEST") {
		t.Errorf("bench --verify over two targets, --lun 7: %v, want %q...\n%s", err, want, out)
	}
	c := newReadcapCmd()
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	c.SetArgs([]string{info[0], "--lun", "7"})
	if err := c.ExecuteContext(ctx); err == nil || err.Error() != want+lunNotSupported {
		t.Errorf("readcap --lun 7: %v, want %q", err, want+lunNotSupported)
	}
	// LUN 3 is there: an error of its own is left as it is.
	c = newInquiryCmd()
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	c.SetArgs([]string{info[0], "--lun", "3", "--vpd", "0x99"})
	if err := c.ExecuteContext(ctx); err == nil || strings.Contains(err.Error(), "--lun") || !strings.Contains(err.Error(), "INVALID FIELD IN CDB") {
		t.Errorf("inquiry --lun 3 --vpd 0x99: %v, want INVALID FIELD IN CDB alone", err)
	}
}

// TestBenchSizeArguments: --bs and --size take adminapi.ParseSize's
// forms (fractions of binary units too), a bad one is refused naming its
// flag, and a queue depth whose buffers would exceed 1 GiB is refused
// before login (the target string names no listener) instead of
// allocating them.
func TestBenchSizeArguments(t *testing.T) {
	ctx := adminTestCtx(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--qd", "100000", "--bs", "64k"}, "--qd 100000 x --bs 65536 x 2 buffers per I/O (data-in and data-out) = 12500 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
		{[]string{"--qd", "1000000", "--bs", "1.5k"}, "--qd 1000000 x --bs 1536 x 2 buffers per I/O (data-in and data-out) = 2929.7 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
		{[]string{"--bs", "1e99"}, `--bs: bad size "1e99": more than 4 EiB`},
		{[]string{"--bs", "-4k"}, `--bs: bad size "-4k": negative`},
		{[]string{"--bs", "4kB"}, `--bs: bad size "4kB": KB is a power of 1000 to some programs and of 1024 to others; write 4KiB or 4k for the power of 1024, or the bytes`},
	} {
		_, err := benchOutput(ctx, append([]string{"id_ext=1,ioc_guid=1,dest=127.0.0.1:1"}, tc.args...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("bench %q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchBufferArithmetic: the refusal of too many buffers states their
// true total: two of --bs per I/O of a timed run (exactly 1 GiB at --qd 1
// and --bs 512m is within the limit, --bs 1g is 2048 MiB), one of a
// --verify run.
func TestBenchBufferArithmetic(t *testing.T) {
	for _, tc := range []struct {
		qd, bs, perIO int
		want          string
	}{
		{1, 512 << 20, 2, ""},
		{1, 1 << 30, 1, ""},
		{1, 1 << 30, 2, "--qd 1 x --bs 1073741824 x 2 buffers per I/O (data-in and data-out) = 2048 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
		{2, 1 << 30, 1, "--qd 2 x --bs 1073741824 x 1 buffer per I/O = 2048 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
		{1 << 20, 1000, 2, "--qd 1048576 x --bs 1000 x 2 buffers per I/O (data-in and data-out) = 2000 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
		{1 << 20, 1 << 62, 2, "--qd 1048576 x --bs 4611686018427387904 x 2 buffers per I/O (data-in and data-out) = 9223372036854775808 MiB: more than the 1024 MiB of data buffers bench allocates at most; lower --qd or --bs"},
	} {
		err := checkBenchBuffers(tc.qd, tc.bs, tc.perIO)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("qd %d, bs %d, %d per I/O: %v, want %q", tc.qd, tc.bs, tc.perIO, err, tc.want)
		}
	}
}

// TestBenchRefusesAboveMaxTransfer: a --bs above the LUN's MAXIMUM
// TRANSFER LENGTH (VPD page B0h; srptd's default is 8 MiB) is refused
// before any I/O, naming the limit, instead of every command failing with
// INVALID FIELD IN CDB; a --bs at the limit runs.
func TestBenchRefusesAboveMaxTransfer(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	run := func(target, bs string) (string, error) {
		return benchOutput(ctx, target, "--bs", bs, "--qd", "1", "--runtime", "300ms", "--rw", "read")
	}
	// 1g at --qd 1 is also more than bench's buffers (two of --bs per
	// I/O): the LUN's limit is the reason given, lowering --qd cannot help.
	for _, tc := range []struct{ target, bs string }{{info[0] + ",max_sect=65535", "16m"}, {info[0], "1g"}} {
		out, err := run(tc.target, tc.bs)
		if err == nil || !strings.Contains(err.Error(), "above the LUN's maximum transfer length") || !strings.Contains(err.Error(), "(8388608 bytes, VPD page B0h)") {
			t.Fatalf("--bs %s: %v\n%s", tc.bs, err, out)
		}
	}
	if out, err := run(info[0]+",max_sect=65535", "8m"); err != nil || !strings.Contains(out, " failed=0;") {
		t.Fatalf("--bs 8m: %v\n%s", err, out)
	}
}

// TestBenchSummaryCompletedAndFailed: a run in which some I/Os fail (the
// writes of randrw on a read-only LUN get DATA PROTECT) reports its
// completed and its failed I/Os each under its own name, the failures
// apart from the completions: IOPS is the completed I/Os per second, and
// the run ends with an error counting the failures out of all I/Os.
func TestBenchSummaryCompletedAndFailed(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	sock := filepath.Join(data, "srptd.sock")
	if out, err := srpctl(ctx, sock, "lun", "add", "--lun", "1", "--backstore", "ram", "--size", "16MiB", "--read-only"); err != nil {
		t.Fatalf("lun add: %v %s", err, out)
	}
	c := newBenchCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(io.Discard)
	c.SetArgs([]string{info[0], "-l", "1", "--rw", "randrw", "--rwmixread", "50", "--qd", "2", "--runtime", "500ms"})
	err := c.ExecuteContext(ctx)
	m := regexp.MustCompile(`(?m)^  I/Os: completed=(\d+) failed=(\d+); IOPS=(\d+), `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no completed/failed line in\n%s", out.String())
	}
	completed, _ := strconv.ParseInt(m[1], 10, 64)
	failed, _ := strconv.ParseInt(m[2], 10, 64)
	iops, _ := strconv.ParseFloat(m[3], 64)
	if completed == 0 || failed == 0 {
		t.Fatalf("completed %d, failed %d: want both (reads complete, writes fail)\n%s", completed, failed, out.String())
	}
	// The reads alone make the IOPS (about as many writes failed: the
	// mix is drawn per I/O).
	rt := regexp.MustCompile(` runtime=(\d+\.\d)s\n`).FindStringSubmatch(out.String())
	if rt == nil {
		t.Fatalf("no runtime in\n%s", out.String())
	}
	secs, _ := strconv.ParseFloat(rt[1], 64)
	if got := iops * secs; got < 0.85*float64(completed) || got > 1.15*float64(completed) {
		t.Errorf("IOPS %v over %v s is %v I/Os, want about the %d completed\n%s", iops, secs, got, completed, out.String())
	}
	if strings.Contains(out.String(), "ios=") || strings.Contains(out.String(), "errors=") {
		t.Errorf("ambiguous ios=/errors= in\n%s", out.String())
	}
	want := fmt.Sprintf("%d of %d I/Os failed", failed, completed+failed)
	if err == nil || err.Error() != want {
		t.Errorf("bench: %v, want %q", err, want)
	}
}

// TestBenchQueueDepthBound: a queue depth no channel count could carry is
// refused before login (the target string names no listener), naming the
// per-channel limit; one above the credits the target grants (srptd's
// default req_lim of 128: 127 commands per channel) is refused after
// login, before any I/O, naming that limit; one within them runs.
func TestBenchQueueDepthBound(t *testing.T) {
	ctx := adminTestCtx(t)
	start := time.Now()
	_, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1,ch_count=4", "--qd", "100000", "--runtime", "2s")
	want := "--qd 100000: more than the 16384 I/Os bench keeps in flight over 4 channel(s) (4096 per channel; a target grants a channel 128 credits by default); lower --qd, or raise --channels"
	if err == nil || err.Error() != want {
		t.Errorf("--qd 100000: %v, want %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing --qd 100000 took %v", d)
	}

	info, _ := startSrptd(t, ctx)
	one := info[0] + ",ch_count=1"
	out, err := benchOutput(ctx, one, "--qd", "200", "--runtime", "300ms")
	want = "--qd 200: more than the 127 commands the target lets this session have in flight (1 channel(s) x 127; its req_lim is 128 per channel); lower --qd, or raise --channels"
	if err == nil || err.Error() != want {
		t.Errorf("--qd 200 on one channel: %v, want %q\n%s", err, want, out)
	}
	if strings.Contains(out, "IOPS") {
		t.Errorf("--qd 200 ran I/O:\n%s", out)
	}
	if out, err := benchOutput(ctx, one, "--qd", "127", "--runtime", "300ms", "--size", "1m"); err != nil || !strings.Contains(out, "iodepth=127 channels=1") {
		t.Errorf("--qd 127 on one channel: %v\n%s", err, out)
	}
}

// TestBenchRefusesSizeAndChannels: --channels 0 (or past ch_count's 255)
// is refused before login, naming the range; a --size beyond the LUN is
// refused before any I/O, naming the capacity READ CAPACITY reported,
// while a --size of the whole LUN runs.
func TestBenchRefusesSizeAndChannels(t *testing.T) {
	ctx := adminTestCtx(t)
	for _, n := range []string{"0", "-1", "256"} {
		_, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1", "--channels", n)
		if want := "--channels " + n + ": 1 to 255 RDMA channels"; err == nil || err.Error() != want {
			t.Errorf("--channels %s: %v, want %q", n, err, want)
		}
	}

	info, data := startSrptd(t, ctx)
	if out, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "lun", "add", "--lun", "1", "--backstore", "ram", "--size", "16MiB"); err != nil {
		t.Fatalf("lun add: %v %s", err, out)
	}
	for size, bytes := range map[string]string{"32m": "33554432", "16.5MiB": "17301504"} {
		out, err := benchOutput(ctx, info[0], "-l", "1", "--size", size, "--runtime", "300ms")
		want := "--size " + size + " (" + bytes + " bytes): larger than LUN 1's capacity of 16777216 bytes (32768 blocks of 512 bytes, READ CAPACITY)"
		if err == nil || err.Error() != want {
			t.Errorf("--size %s of a 16 MiB LUN: %v, want %q\n%s", size, err, want, out)
		}
	}
	if out, err := benchOutput(ctx, info[0], "-l", "1", "--size", "16m", "--runtime", "300ms", "--channels", "1"); err != nil || !strings.Contains(out, " failed=0;") || !strings.Contains(out, "channels=1 ") {
		t.Errorf("--size 16m --channels 1 of a 16 MiB LUN: %v\n%s", err, out)
	}
}

// TestBenchLargeIOWithoutMaxSect: --bs 1m runs against a target string
// without max_sect (bench sizes the session's max_sect for one SRP_CMD
// per I/O; ib_srp's default of 1024 sectors is 512 KiB); a max_sect the
// target string sets is kept, and a --bs over it refused before login,
// naming the max_sect it needs.
func TestBenchLargeIOWithoutMaxSect(t *testing.T) {
	ctx := adminTestCtx(t)
	_, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1,max_sect=1024", "--bs", "1m")
	if want := "--bs 1048576: above TARGET's max_sect 1024 x 512 bytes; raise it to max_sect=2048, or leave it out"; err == nil || err.Error() != want {
		t.Errorf("--bs 1m, max_sect=1024: %v, want %q", err, want)
	}
	info, _ := startSrptd(t, ctx)
	for _, rw := range []string{"read", "write"} {
		out, err := benchOutput(ctx, info[0], "--bs", "1m", "--rw", rw, "--qd", "2", "--size", "16m", "--runtime", "300ms")
		if err != nil || !regexp.MustCompile(`completed=[1-9]\d* failed=0;`).MatchString(out) {
			t.Errorf("--bs 1m --rw %s without max_sect: %v\n%s", rw, err, out)
		}
	}
}

// TestBenchVerifyRefusesRuntime: --verify (and --verify-only) cover the
// whole region, so a --runtime given with them is refused before login,
// pointing at --size, rather than ignored.
func TestBenchVerifyRefusesRuntime(t *testing.T) {
	for _, args := range [][]string{
		{"--verify", "--runtime", "2s"},
		{"--verify-only", "--verify-seed", "7", "--runtime", "2s"},
	} {
		c := newBenchCmd()
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		c.SetArgs(append([]string{"id_ext=1,ioc_guid=1,dest=127.0.0.1:1"}, args...))
		want := "--runtime: a --verify run writes and reads back the whole region (--size) --loops times, however long that takes; bound it with --size instead"
		if err := c.ExecuteContext(adminTestCtx(t)); err == nil || err.Error() != want {
			t.Errorf("bench %q: %v, want %q", args, err, want)
		}
	}
}

// TestBenchVerifyRefusesIgnoredFlags: a --verify run writes the whole
// region and then reads it back, with no read/write mix and buffers
// registered once; --rw rw or randrw, --rwmixread and --register-each
// given with it are refused before login rather than ignored, as are
// --loops and --verify-seed without it. --rw randwrite (the order) is
// taken.
func TestBenchVerifyRefusesIgnoredFlags(t *testing.T) {
	ctx := adminTestCtx(t)
	const how = "a --verify pass writes the whole region, then reads it all back"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--verify", "--rw", "randrw"}, "--rw randrw: " + how + ", with no read/write mix; --rw orders it: randwrite or randread for a random order, write or read for an ascending one"},
		{[]string{"--verify-only", "--verify-seed", "7", "--rw", "rw"}, "--rw rw: " + how + ", with no read/write mix; --rw orders it: randwrite or randread for a random order, write or read for an ascending one"},
		{[]string{"--verify", "--rwmixread", "70"}, "--rwmixread: " + how + ", with no read/write mix to set"},
		{[]string{"--verify", "--register-each"}, "--register-each: a --verify run registers each worker's buffer once; it has no per-command registration"},
	} {
		_, err := benchOutput(ctx, append([]string{"id_ext=1,ioc_guid=1,dest=127.0.0.1:1"}, tc.args...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("bench %q: %v, want %q", tc.args, err, tc.want)
		}
	}
	// The other way round: a timed run refuses what only --verify uses.
	for _, f := range []string{"--loops", "--verify-seed"} {
		_, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1", f, "3")
		if want := f + ": only a --verify or --verify-only run takes it; a timed run has no passes and writes no seed"; err == nil || err.Error() != want {
			t.Errorf("bench %s 3: %v, want %q", f, err, want)
		}
	}
	// The order is honoured: the run gets as far as the login.
	if _, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1", "--verify", "--rw", "randwrite", "--connect-timeout", "2s"); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("bench --verify --rw randwrite: %v, want a refused connection", err)
	}
}

// TestBenchVerifyCPUProfile: --cpuprofile profiles a --verify run too,
// instead of being ignored by it.
func TestBenchVerifyCPUProfile(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	out, err := benchOutput(ctx, info[0], "--verify", "--size", "1m", "--bs", "64k", "--qd", "4", "--cpuprofile", prof)
	if err != nil || !strings.Contains(out, "mismatches=0 io_errors=0") {
		t.Fatalf("bench --verify --cpuprofile: %v\n%s", err, out)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v", prof, err)
	}
}

// benchOutput runs srpctl bench with args and returns what it printed
// (standard output and error) and its error.
func benchOutput(ctx context.Context, args ...string) (string, error) {
	c := newBenchCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.ExecuteContext(ctx)
	return out.String(), err
}

// TestBenchRefusesLessThanABlock: --bs 0 is refused before login (the
// target string names no listener) as less than a logical block, not as
// a non-multiple; against a LUN of 4096-byte blocks, a --bs of 512 is
// refused naming the LUN's block size, and one of 6k as not a multiple.
func TestBenchRefusesLessThanABlock(t *testing.T) {
	ctx := adminTestCtx(t)
	_, err := benchOutput(ctx, "id_ext=1,ioc_guid=1,dest=127.0.0.1:1", "--bs", "0")
	if want := "--bs 0: an I/O needs at least one logical block (512 bytes or more)"; err == nil || err.Error() != want {
		t.Errorf("--bs 0: %v, want %q", err, want)
	}

	info, data := startSrptd(t, ctx)
	if out, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "lun", "add", "--lun", "1", "--backstore", "ram", "--size", "16MiB", "--block-size", "4096"); err != nil {
		t.Fatalf("lun add: %v %s", err, out)
	}
	for bs, want := range map[string]string{
		"512": "--bs 512: less than one logical block of LUN 1 (4096 bytes); an I/O needs at least one",
		"6k":  "--bs 6144 is not a multiple of LUN 1's 4096-byte logical block",
	} {
		if out, err := benchOutput(ctx, info[0], "-l", "1", "--bs", bs, "--runtime", "300ms"); err == nil || err.Error() != want {
			t.Errorf("--bs %s on 4096-byte blocks: %v, want %q\n%s", bs, err, want, out)
		}
	}
}

// TestBenchRidesOutLogout: the target logs the initiator out
// (SRP_T_LOGOUT) in the middle of a run; the commands in flight are
// re-issued once srpctl has logged in again, as the SCSI midlayer would
// re-queue them, so the run ends without a failed I/O, in both modes
// (submitted from completions, and --blocking).
func TestBenchRidesOutLogout(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	sock := filepath.Join(data, "srptd.sock")
	for _, mode := range []string{"submit", "blocking"} {
		t.Run(mode, func(t *testing.T) {
			c := newBenchCmd()
			var out bytes.Buffer
			c.SetOut(&out)
			c.SetErr(&out)
			args := []string{info[0], "--rw", "randrw", "--qd", "16", "--channels", "2", "--runtime", "3s", "--size", "64m"}
			if mode == "blocking" {
				args = append(args, "--blocking")
			}
			c.SetArgs(args)
			done := make(chan error, 1)
			go func() { done <- c.ExecuteContext(ctx) }()
			// Log the initiator out once its channels carry commands.
			var ipid string
			for ipid == "" {
				js, err := srpctl(ctx, sock, "sessions", "--json")
				if err != nil {
					t.Fatal(err)
				}
				var rows []struct {
					InitiatorPort string
					Commands      uint64
				}
				if err := json.Unmarshal([]byte(js), &rows); err != nil {
					t.Fatalf("%v in %q", err, js)
				}
				if len(rows) == 2 && rows[0].Commands > 100 && rows[1].Commands > 100 {
					ipid = rows[0].InitiatorPort
					break
				}
				select {
				case err := <-done:
					t.Fatalf("bench ended before the logout: %v\n%s", err, out.String())
				case <-ctx.Done():
					t.Fatal("bench issued no commands")
				case <-time.After(20 * time.Millisecond):
				}
			}
			if o, err := srpctl(ctx, sock, "logout", ipid); err != nil {
				t.Fatalf("logout: %v %s", err, o)
			}
			select {
			case err := <-done:
				if err != nil || !strings.Contains(out.String(), " failed=0;") {
					t.Fatalf("bench across a logout: %v\n%s", err, out.String())
				}
			case <-ctx.Done():
				t.Fatalf("bench did not end after the logout\n%s", out.String())
			}
		})
	}
}
