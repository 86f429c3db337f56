//go:build ceph

package rbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	gorbd "github.com/ceph/go-ceph/rbd"

	"github.com/gosrp/gosrp/backstore"
)

// cluster returns the ceph.conf of the test cluster (GOSRP_CEPH_CONF, as
// scripts/test.sh sets it after scripts/ceph-up.sh) and its pool, or skips.
func cluster(t *testing.T) (conf, pool string) {
	t.Helper()
	conf = os.Getenv("GOSRP_CEPH_CONF")
	if conf == "" {
		t.Skip("GOSRP_CEPH_CONF not set: no Ceph cluster (scripts/ceph-up.sh starts one)")
	}
	pool = os.Getenv("GOSRP_CEPH_POOL")
	if pool == "" {
		pool = "rbd"
	}
	return conf, pool
}

// openNew opens a fresh image of size bytes, unique to the test; it is
// closed and removed at the end of the test.
func openNew(t *testing.T, size int64) (*Image, Config) {
	t.Helper()
	conf, pool := cluster(t)
	cfg := Config{ConfPath: conf, Pool: pool, Image: fmt.Sprintf("t-%d", time.Now().UnixNano()), CreateSize: size}
	im, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		im.Close()
		removeImage(t, cfg)
	})
	return im, cfg
}

// removeImage deletes a test's image so repeated runs do not fill the
// single-node cluster's memstore.
func removeImage(t *testing.T, cfg Config) {
	conn, err := rados.NewConn()
	if err == nil {
		defer conn.Shutdown()
		if err = conn.ReadConfigFile(cfg.ConfPath); err == nil {
			err = conn.Connect()
		}
	}
	var ioctx *rados.IOContext
	if err == nil {
		ioctx, err = conn.OpenIOContext(cfg.Pool)
	}
	if err == nil {
		defer ioctx.Destroy()
		err = gorbd.RemoveImage(ioctx, cfg.Image)
	}
	if err != nil {
		t.Logf("image %s/%s not removed: %v", cfg.Pool, cfg.Image, err)
	}
}

func TestReadWriteAcrossObjects(t *testing.T) {
	im, _ := openNew(t, 16<<20)
	if got := im.Size(); got != 16<<20 {
		t.Fatalf("Size = %d, want %d", got, 16<<20)
	}
	// A new image reads as zeros.
	buf := make([]byte, 8192)
	if _, err := im.ReadAt(buf, 4<<20-4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Fatal("new image does not read as zeros")
	}
	// Writes straddling the 4 MiB object boundary read back.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		n := 512 * (1 + rng.IntN(512))
		off := int64(512 * rng.IntN((16<<20-n)/512))
		if i == 0 {
			off = 4<<20 - 1024
		}
		w := make([]byte, n)
		for j := range w {
			w[j] = byte(rng.Uint32())
		}
		if _, err := im.WriteAt(w, off); err != nil {
			t.Fatal(err)
		}
		r := make([]byte, n)
		if _, err := im.ReadAt(r, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r, w) {
			t.Fatalf("read back at %d (%d bytes) differs", off, n)
		}
	}
	if err := im.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := im.WriteAt(make([]byte, 512), 16<<20-256); !errors.Is(err, backstore.ErrOutOfRange) {
		t.Fatalf("write past the end: %v, want ErrOutOfRange", err)
	}
}

func TestUnmapAndWriteSameReadZeros(t *testing.T) {
	im, _ := openNew(t, 12<<20)
	ones := bytes.Repeat([]byte{0xA5}, 12<<20)
	if _, err := im.WriteAt(ones, 0); err != nil {
		t.Fatal(err)
	}
	// A range below librbd's discard granularity, and one over whole objects.
	for _, r := range [][2]int64{{4096 + 512, 1024}, {3 << 20, 6 << 20}} {
		if err := im.Unmap(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, r[1]+1024)
		if _, err := im.ReadAt(got, r[0]-512); err != nil {
			t.Fatal(err)
		}
		want := append(append(bytes.Repeat([]byte{0xA5}, 512), make([]byte, r[1])...), bytes.Repeat([]byte{0xA5}, 512)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("after Unmap(%d, %d) the range (and only it) should read zeros", r[0], r[1])
		}
	}
	block := bytes.Repeat([]byte("0123456789abcdef"), 32)
	if err := im.WriteSame(block, 8192, 9); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 9*512)
	if _, err := im.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat(block, 9)) {
		t.Fatal("WriteSame did not replicate the block")
	}
}

// TestTwoGateways opens the image twice, as two gateways do: writes through
// one are read through the other at once, compare-and-write is atomic
// across both, and a resize by one is seen by the other.
func TestTwoGateways(t *testing.T) {
	a, cfg := openNew(t, 8<<20)
	cfg.CreateSize = 0
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := bytes.Repeat([]byte{7}, 4096)
	if _, err := a.WriteAt(w, 1<<20); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 4096)
	if _, err := b.ReadAt(r, 1<<20); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("B does not read A's write: %v", err)
	}

	// Compare-and-write: both gateways race from the same old block; exactly
	// one wins, the other gets a miscompare at byte 0.
	old := make([]byte, 512)
	if _, err := a.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i, g := range []*Image{a, b} {
		go func() {
			errs <- g.CompareAndWrite(old, bytes.Repeat([]byte{byte(i + 1)}, 512), 0)
		}()
	}
	var wins, miscompares int
	for range 2 {
		err := <-errs
		var mis *backstore.MiscompareError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &mis):
			if mis.Offset != 0 {
				t.Errorf("miscompare offset %d, want 0", mis.Offset)
			}
			miscompares++
		default:
			t.Fatal(err)
		}
	}
	if wins != 1 || miscompares != 1 {
		t.Fatalf("%d wins and %d miscompares, want 1 and 1", wins, miscompares)
	}
	// A miscompare later in the block reports its offset.
	cur := make([]byte, 512)
	if _, err := b.ReadAt(cur, 0); err != nil {
		t.Fatal(err)
	}
	cmp := bytes.Clone(cur)
	cmp[300] ^= 0xFF
	var mis *backstore.MiscompareError
	if err := b.CompareAndWrite(cmp, make([]byte, 512), 0); !errors.As(err, &mis) || mis.Offset != 300 {
		t.Fatalf("CompareAndWrite with byte 300 different: %v, want miscompare at 300", err)
	}
	// Away from the start of an object too (librbd counts from the object).
	off := int64(4<<20 + 1536)
	cmp = make([]byte, 512)
	cmp[77] = 1
	if err := a.CompareAndWrite(cmp, make([]byte, 512), off); !errors.As(err, &mis) || mis.Offset != 77 {
		t.Fatalf("CompareAndWrite at %d with byte 77 different: %v, want miscompare at 77", off, err)
	}

	if err := a.Resize(12 << 20); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.Refresh()
		if err != nil {
			t.Fatal(err)
		}
		if n == 12<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still sees %d bytes 10 s after A resized to %d", n, 12<<20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestOpenErrors(t *testing.T) {
	conf, pool := cluster(t)
	ctx := context.Background()
	start := time.Now()
	_, err := Open(ctx, Config{ConfPath: conf, Pool: "no-such-pool", Image: "x"})
	if !errors.Is(err, ErrNoPool) {
		t.Fatalf("missing pool: %v, want ErrNoPool", err)
	}
	_, err = Open(ctx, Config{ConfPath: conf, Pool: pool, Image: "no-such-image"})
	if !errors.Is(err, ErrNoImage) {
		t.Fatalf("missing image: %v, want ErrNoImage", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("errors took %v", d)
	}

	// A cluster nobody answers for: a monitor address with no listener.
	dead := filepath.Join(t.TempDir(), "ceph.conf")
	if err := os.WriteFile(dead, []byte("[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = Open(ctx, Config{ConfPath: dead, Pool: pool, Image: "x", ConnectTimeout: 2 * time.Second})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("unreachable cluster: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("unreachable cluster took %v to fail (ConnectTimeout 2 s)", d)
	}

	// A missing ceph.conf names the file.
	_, err = Open(ctx, Config{ConfPath: "/nonexistent/ceph.conf", Pool: pool, Image: "x"})
	if err == nil || !errors.Is(err, syscall.ENOENT) && !bytes.Contains([]byte(err.Error()), []byte("/nonexistent/ceph.conf")) {
		t.Fatalf("missing conf: %v", err)
	}
}

func TestClosed(t *testing.T) {
	im, _ := openNew(t, 1<<20)
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := im.ReadAt(make([]byte, 512), 0); !errors.Is(err, backstore.ErrOutOfRange) && !errors.Is(err, backstore.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if err := im.Sync(); !errors.Is(err, backstore.ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
}

// TestClusterStopsAnswering: with the OSD stopped (SIGSTOP), reads and writes
// fail with ETIMEDOUT within OpTimeout instead of hanging, and work again
// once it answers (SIGCONT). Needs the cluster of scripts/ceph-up.sh (its
// OSD's pid file beside ceph.conf).
func TestClusterStopsAnswering(t *testing.T) {
	conf, pool := cluster(t)
	pidFile := filepath.Join(filepath.Dir(conf), "run", "osd.0.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Skipf("no OSD pid file (%v): not a scripts/ceph-up.sh cluster", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	cfg := Config{ConfPath: conf, Pool: pool, Image: fmt.Sprintf("t-stop-%d", time.Now().UnixNano()), CreateSize: 1 << 20, OpTimeout: 2 * time.Second}
	im, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer removeImage(t, cfg)
	defer im.Close()
	w := bytes.Repeat([]byte{9}, 4096)
	if _, err := im.WriteAt(w, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	start := time.Now()
	_, werr := im.WriteAt(w, 8192)
	_, rerr := im.ReadAt(make([]byte, 4096), 0)
	took := time.Since(start)
	resume()
	if !errors.Is(werr, syscall.ETIMEDOUT) || !errors.Is(rerr, syscall.ETIMEDOUT) {
		t.Fatalf("with the OSD stopped: write %v, read %v; want ETIMEDOUT", werr, rerr)
	}
	if took > 10*time.Second {
		t.Fatalf("two operations took %v with a 2 s OpTimeout", took)
	}
	// The cluster answers again: so does the image.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := im.WriteAt(w, 8192)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still fail 30 s after the OSD resumed: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := make([]byte, 4096)
	if _, err := im.ReadAt(r, 8192); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("read after recovery: %v", err)
	}
}
