//go:build verbs && cgo

package verbs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/rdmatest"
)

// The tests need an RDMA device with an IP address: GOSRP_VERBS_DEVICE names
// it (e.g. rxe0) and GOSRP_VERBS_ADDR is an address on it (e.g. 192.0.2.1).
// Without them the tests skip; the VM interop suite sets them.
func testDevice(t *testing.T) (*Device, string) {
	t.Helper()
	name, addr := os.Getenv("GOSRP_VERBS_DEVICE"), os.Getenv("GOSRP_VERBS_ADDR")
	if name == "" || addr == "" {
		t.Skip("GOSRP_VERBS_DEVICE and GOSRP_VERBS_ADDR not set")
	}
	d, err := Open(Config{DeviceName: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, addr
}

func poll1(t *testing.T, c rdma.Conn) rdma.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rdma.Completion
	n, err := c.Poll(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("Poll: n=%d err=%v", n, err)
	}
	return wc[0]
}

func TestConnectSendWriteRead(t *testing.T) {
	d, addr := testDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := d.Listen(ctx, net.JoinHostPort(addr, "0"))
	if err == nil {
		ln.Close()
	}
	ln, err = d.Listen(ctx, net.JoinHostPort(addr, "17771"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	srvBuf := make([]byte, 1<<16)
	srvMR, err := d.Register(srvBuf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	type accepted struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			ch <- accepted{nil, err}
			return
		}
		if !bytes.Equal(req.PrivateData()[:5], []byte("hello")) {
			req.Reject([]byte("bad"))
			ch <- accepted{nil, errors.New("bad private data")}
			return
		}
		c, err := req.Accept(ctx, rdma.QPConfig{}, []byte("welcome"))
		if err == nil {
			err = c.PostRecv(rdma.RecvWR{ID: 7, Local: rdma.SGE{MR: srvMR, Offset: 0, Length: 4096}})
		}
		ch <- accepted{c, err}
	}()
	cliBuf := make([]byte, 1<<16)
	cliMR, err := d.Register(cliBuf, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	c, reply, err := d.Dial(ctx, net.JoinHostPort(addr, "17771"), rdma.QPConfig{}, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !bytes.HasPrefix(reply, []byte("welcome")) {
		t.Fatalf("reply private data %q", reply)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.c.Close()

	copy(cliBuf, "ping")
	if err := c.PostSend(rdma.SendWR{ID: 1, Op: rdma.OpSend, Local: []rdma.SGE{{MR: cliMR, Length: 4}}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, c); wc.Status != rdma.StatusSuccess || wc.ID != 1 {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := poll1(t, a.c); wc.Status != rdma.StatusSuccess || wc.ID != 7 || wc.ByteLen != 4 || string(srvBuf[:4]) != "ping" {
		t.Fatalf("recv completion %+v data %q", wc, srvBuf[:4])
	}
	// RDMA READ 8 KiB from the server region, then RDMA WRITE it back shifted.
	for i := range srvBuf[:8192] {
		srvBuf[i] = byte(i * 7)
	}
	rem := rdma.RemoteAddr{Addr: srvMR.Addr(), RKey: srvMR.RKey()}
	if err := c.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpRDMARead, Local: []rdma.SGE{{MR: cliMR, Length: 8192}}, Remote: rem, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, c); wc.Status != rdma.StatusSuccess || !bytes.Equal(cliBuf[:8192], srvBuf[:8192]) {
		t.Fatalf("read completion %+v, data equal=%v", wc, bytes.Equal(cliBuf[:8192], srvBuf[:8192]))
	}
	rem.Addr += 8192
	if err := c.PostSend(rdma.SendWR{ID: 3, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: cliMR, Length: 8192}}, Remote: rem, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, c); wc.Status != rdma.StatusSuccess || !bytes.Equal(srvBuf[8192:16384], srvBuf[:8192]) {
		t.Fatalf("write completion %+v", wc)
	}
	// An RDMA WRITE beyond the region fails: a remote access error on
	// InfiniBand/RoCE; on iWARP the responder's Terminate arrives while the
	// write may already count as sent, and siw reports a local QP error.
	rem.Addr = srvMR.Addr() + uint64(len(srvBuf)) - 100
	if err := c.PostSend(rdma.SendWR{ID: 4, Op: rdma.OpRDMAWrite, Local: []rdma.SGE{{MR: cliMR, Length: 4096}}, Remote: rem, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, c); wc.Status == rdma.StatusSuccess || (d.info.Transport != "iWARP" && wc.Status != rdma.StatusRemoteAccess && wc.Status != rdma.StatusRemoteInvalidRequest) {
		t.Fatalf("out-of-bounds write completed with %v", wc.Status)
	}
	// The connection is now in error: Poll drains and reports ErrClosed.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	var wcs [4]rdma.Completion
	for {
		_, err := c.Poll(ctx2, wcs[:])
		if errors.Is(err, rdma.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatalf("Poll after error: %v", err)
		}
	}
}

func TestRejectCarriesPrivateData(t *testing.T) {
	d, addr := testDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := d.Listen(ctx, net.JoinHostPort(addr, "17772"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Reject([]byte("no-way"))
		}
	}()
	_, _, err = d.Dial(ctx, net.JoinHostPort(addr, "17772"), rdma.QPConfig{}, []byte("hi"))
	var rej *rdma.RejectError
	if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("no-way")) {
		t.Fatalf("Dial error %v, want RejectError with private data", err)
	}
}

// TestConformance runs the provider-independent suite on the device. On
// iWARP devices a remote access error reaches the requester as a Terminate,
// which siw reports with another status than InfiniBand's remote access
// error, so the suite runs on InfiniBand/RoCE devices only.
func TestConformance(t *testing.T) {
	d, addr := testDevice(t)
	if d.info.Transport == "iWARP" {
		t.Skip("conformance suite expects InfiniBand remote access error statuses")
	}
	name := d.info.Name
	rdmatest.Run(t, func(tb testing.TB) (rdma.Device, rdma.Device, string) {
		a, err := Open(Config{DeviceName: name})
		if err != nil {
			tb.Fatal(err)
		}
		b, err := Open(Config{DeviceName: name})
		if err != nil {
			a.Close()
			tb.Fatal(err)
		}
		return a, b, net.JoinHostPort(addr, "0")
	})
}

// TestDeviceFor checks that RDMA/CM routes the test address through the
// test device (the address is assigned to that device's netdev).
func TestDeviceFor(t *testing.T) {
	d, addr := testDevice(t)
	name, err := DeviceFor(net.JoinHostPort(addr, "1"), 5*time.Second)
	if err != nil || name != d.Name() {
		t.Fatalf("DeviceFor(%s) = %q, %v; want %q", addr, name, err, d.Name())
	}
	if _, err := DeviceFor("192.0.2.1:notaport", time.Second); err == nil {
		t.Fatal("DeviceFor accepted a bad port")
	}
}

// TestInChunks needs no device: work requests go to C in order, at most
// maxChunk (64, the C arrays' size) per call, and the first error stops them.
func TestInChunks(t *testing.T) {
	wrs := make([]int, 2*maxChunk+2)
	for i := range wrs {
		wrs[i] = i
	}
	var sizes []int
	next := 0
	err := inChunks(wrs, func(c []int) error {
		sizes = append(sizes, len(c))
		for _, v := range c {
			if v != next {
				t.Fatalf("work request %d handed over in place of %d", v, next)
			}
			next++
		}
		return nil
	})
	if err != nil || next != len(wrs) || len(sizes) != 3 || sizes[0] != 64 || sizes[1] != 64 || sizes[2] != 2 {
		t.Fatalf("130 work requests: chunks %v, %d handed over, err %v; want [64 64 2], 130, nil", sizes, next, err)
	}
	calls := 0
	stop := errors.New("queue full")
	err = inChunks(wrs, func(c []int) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("error in the second chunk: %d calls, err %v; want 2 calls, the error", calls, err)
	}
	if err := inChunks(nil, func([]int) error { t.Fatal("called for no work requests"); return nil }); err != nil {
		t.Fatal(err)
	}
}

// The region cache registers a chunk once for all its views (slices that
// end where it ends), gives each view's offset in the registration,
// registers again, wider, for a view that starts lower, deregisters a
// replaced or evicted region only once its last use is released, and
// keeps no more unused bytes than its limit.
func TestRegionCache(t *testing.T) {
	d, _ := testDevice(t)
	chunk := make([]byte, 64<<10)
	r1, off, err := d.CachedRegion(chunk[8192:12288])
	if err != nil || off != 0 {
		t.Fatalf("first view: off %d, %v", off, err)
	}
	if got := len(r1.Bytes()); got != 64<<10-8192 {
		t.Fatalf("region covers %d bytes, want the view to the chunk's end (%d)", got, 64<<10-8192)
	}
	r2, off, err := d.CachedRegion(chunk[16384:20480])
	if err != nil || r2 != r1 || off != 8192 {
		t.Fatalf("later view: same region %v, off %d (want 8192), %v", r2 == r1, off, err)
	}
	r3, off, err := d.CachedRegion(chunk[0:4096])
	if err != nil || r3 == r1 || off != 0 || len(r3.Bytes()) != 64<<10 {
		t.Fatalf("lower view: new region %v of %d bytes, off %d, %v", r3 != r1, len(r3.Bytes()), off, err)
	}
	if r1.LKey() == 0 {
		t.Fatal("replaced region deregistered while two uses hold it")
	}
	d.ReleaseRegion(r1)
	if r1.LKey() == 0 {
		t.Fatal("replaced region deregistered while one use holds it")
	}
	d.ReleaseRegion(r2)
	if r1.LKey() != 0 {
		t.Fatal("replaced region still registered after its last release")
	}
	r4, off, err := d.CachedRegion(chunk[60<<10:])
	if err != nil || r4 != r3 || off != 60<<10 {
		t.Fatalf("view after widening: same region %v, off %d, %v", r4 == r3, off, err)
	}
	d.ReleaseRegion(r3)
	d.ReleaseRegion(r4)

	// A limit of one chunk: a second chunk's region evicts the first,
	// unused one, but not a region in use.
	d.regions.mu.Lock()
	d.regions.max = 64 << 10
	d.regions.mu.Unlock()
	other := make([]byte, 64<<10)
	r5, _, err := d.CachedRegion(other)
	if err != nil {
		t.Fatal(err)
	}
	if r3.LKey() != 0 {
		t.Error("unused region beyond the limit not evicted")
	}
	third := make([]byte, 64<<10)
	r6, _, err := d.CachedRegion(third)
	if err != nil {
		t.Fatal(err)
	}
	if r5.LKey() == 0 {
		t.Error("region in use evicted")
	}
	d.ReleaseRegion(r5)

	// Close forgets the cached regions (their memory is no longer kept);
	// one still in use is released afterwards without harm, and the
	// cache then refuses.
	d.Close()
	d.regions.mu.Lock()
	kept := len(d.regions.byEnd) + d.regions.lru.Len()
	d.regions.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d regions still cached after Close", kept)
	}
	d.ReleaseRegion(r6)
	if _, _, err := d.CachedRegion(other); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("CachedRegion after Close: %v, want ErrClosed", err)
	}
}
