//go:build ceph

// Package rbd is the Ceph RBD backstore: a logical unit's data in an RBD
// image, reached through librados and librbd (Debian 12 ships 16.2
// "pacific"; build with -tags ceph,pacific). go-ceph connects to the cluster,
// opens the pool and creates images; the image's data path calls librbd's C
// API directly because go-ceph has neither compare-and-write nor write
// zeroes. librbd's calls are synchronous here and at most
// Config.MaxInFlight run at once (each holds an OS thread).
//
// The connection turns librbd's cache off (rbd_cache=false): every write that
// completed is on the OSDs, so several gateways serving the same image see
// each other's writes at once and nothing acknowledged lives only in a
// gateway's memory.
//
// Errors of the data path wrap the errno librbd returned (syscall.Errno), so
// the SCSI core maps ENOSPC, EROFS and the rest like a file's; an operation
// the cluster does not answer within Config.OpTimeout fails with ETIMEDOUT.
package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include <stdlib.h>
#include <rbd/librbd.h>
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	gorbd "github.com/ceph/go-ceph/rbd"

	"github.com/gosrp/gosrp/backstore"
)

// Config names the image and how to reach its cluster.
type Config struct {
	// ConfPath is the ceph.conf to read; "" means librados' default search
	// ($CEPH_CONF, /etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf).
	ConfPath string
	// ClientID is the cephx user without "client." ("admin" when empty).
	ClientID string
	// Keyring is a keyring file for ClientID; "" means the conf's.
	Keyring string
	// Pool and Image name the image. Required.
	Pool, Image string
	// CreateSize, bytes: when the image does not exist and CreateSize > 0, it
	// is created with this size (features: layering only, so several
	// gateways write it without passing an exclusive lock around).
	CreateSize int64
	// ConnectTimeout bounds connecting to the monitors and every monitor
	// operation (client_mount_timeout, rados_mon_op_timeout); default 10 s.
	ConnectTimeout time.Duration
	// OpTimeout bounds every OSD operation (rados_osd_op_timeout): a data
	// operation the cluster does not answer fails with ETIMEDOUT after it;
	// default 30 s.
	OpTimeout time.Duration
	// MaxInFlight bounds the librbd calls running at once; default 64.
	MaxInFlight int
}

// Image is an open RBD image. Safe for concurrent use; Close must be the
// last call.
type Image struct {
	cfg   Config
	conn  *rados.Conn
	ioctx *rados.IOContext
	img   C.rbd_image_t
	slots chan struct{}
	// objSize is the size of the image's RADOS objects, bytes (1 << order).
	objSize int64

	mu     sync.RWMutex // guards closed against calls in flight
	closed bool

	storesMu sync.Mutex
	stores   []*ReservationStore // closed by Close, before the connection
}

// Errors of Open, matchable with errors.Is.
var (
	// ErrUnreachable: no monitor answered within ConnectTimeout.
	ErrUnreachable = errors.New("rbd: cluster not reachable")
	// ErrAuth: the cluster refused the client's credentials.
	ErrAuth = errors.New("rbd: authentication refused")
	// ErrNoPool: the pool does not exist.
	ErrNoPool = errors.New("rbd: no such pool")
	// ErrNoImage: the image does not exist and CreateSize is 0.
	ErrNoImage = errors.New("rbd: no such image")
)

// Open connects to the cluster and opens cfg.Pool/cfg.Image, creating it when
// it is missing and cfg.CreateSize > 0. It returns within about
// ConnectTimeout + OpTimeout whatever the cluster does; ctx ending earlier
// abandons the attempt (the connection is shut down when librados returns).
// Errors wrap ErrUnreachable, ErrAuth, ErrNoPool or ErrNoImage where they
// apply.
func Open(ctx context.Context, cfg Config) (*Image, error) {
	if cfg.Pool == "" || cfg.Image == "" {
		return nil, errors.New("rbd: pool and image are required")
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "admin"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 30 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	type result struct {
		im  *Image
		err error
	}
	done := make(chan result, 1)
	go func() {
		im, err := open(cfg)
		done <- result{im, err}
	}()
	select {
	case r := <-done:
		return r.im, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.im != nil {
				r.im.Close()
			}
		}()
		return nil, fmt.Errorf("rbd: opening %s/%s: %w", cfg.Pool, cfg.Image, ctx.Err())
	}
}

func open(cfg Config) (*Image, error) {
	name := cfg.Pool + "/" + cfg.Image
	conn, err := rados.NewConnWithUser(cfg.ClientID)
	if err != nil {
		return nil, fmt.Errorf("rbd: %w", err)
	}
	fail := func(err error) (*Image, error) {
		conn.Shutdown()
		return nil, err
	}
	if cfg.ConfPath != "" {
		err = conn.ReadConfigFile(cfg.ConfPath)
	} else {
		err = conn.ReadDefaultConfigFile()
	}
	if err != nil {
		where := cfg.ConfPath
		if where == "" {
			where = "the default ceph.conf"
		}
		return fail(fmt.Errorf("rbd: reading %s: %w", where, err))
	}
	secs := func(d time.Duration) string { return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) }
	opts := [][2]string{
		{"client_mount_timeout", secs(cfg.ConnectTimeout)},
		{"rados_mon_op_timeout", secs(cfg.ConnectTimeout)},
		{"rados_osd_op_timeout", secs(cfg.OpTimeout)},
		{"rbd_cache", "false"},
	}
	if cfg.Keyring != "" {
		opts = append(opts, [2]string{"keyring", cfg.Keyring})
	}
	for _, o := range opts {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			return fail(fmt.Errorf("rbd: setting %s: %w", o[0], err))
		}
	}
	if err := conn.Connect(); err != nil {
		switch errnoOf(err) {
		case syscall.ETIMEDOUT, syscall.ENOTCONN, syscall.ECONNREFUSED:
			return fail(fmt.Errorf("%w within %v (%s): %v", ErrUnreachable, cfg.ConnectTimeout, confName(cfg), err))
		case syscall.EACCES, syscall.EPERM:
			return fail(fmt.Errorf("%w for client.%s: %v", ErrAuth, cfg.ClientID, err))
		}
		return fail(fmt.Errorf("rbd: connecting (%s): %w", confName(cfg), err))
	}
	ioctx, err := conn.OpenIOContext(cfg.Pool)
	if err != nil {
		if errnoOf(err) == syscall.ENOENT {
			return fail(fmt.Errorf("%w %q", ErrNoPool, cfg.Pool))
		}
		return fail(fmt.Errorf("rbd: opening pool %q: %w", cfg.Pool, err))
	}
	im := &Image{cfg: cfg, conn: conn, ioctx: ioctx, slots: make(chan struct{}, cfg.MaxInFlight)}
	cname := C.CString(cfg.Image)
	defer C.free(unsafe.Pointer(cname))
	ret := C.rbd_open(C.rados_ioctx_t(ioctx.Pointer()), cname, &im.img, nil)
	if ret == -C.int(syscall.ENOENT) && cfg.CreateSize > 0 {
		if err := create(ioctx, cfg.Image, cfg.CreateSize); err != nil {
			ioctx.Destroy()
			return fail(fmt.Errorf("rbd: creating %s: %w", name, err))
		}
		ret = C.rbd_open(C.rados_ioctx_t(ioctx.Pointer()), cname, &im.img, nil)
	}
	if ret < 0 {
		ioctx.Destroy()
		if ret == -C.int(syscall.ENOENT) {
			return fail(fmt.Errorf("%w %s", ErrNoImage, name))
		}
		return fail(fmt.Errorf("rbd: opening %s: %w", name, syscall.Errno(-ret)))
	}
	var info C.rbd_image_info_t
	if ret := C.rbd_stat(im.img, &info, C.size_t(unsafe.Sizeof(info))); ret < 0 {
		C.rbd_close(im.img)
		ioctx.Destroy()
		return fail(fmt.Errorf("rbd: stat %s: %w", name, syscall.Errno(-ret)))
	}
	im.objSize = int64(info.obj_size)
	return im, nil
}

func confName(cfg Config) string {
	if cfg.ConfPath == "" {
		return "default ceph.conf"
	}
	return cfg.ConfPath
}

// create makes an image of size bytes with only the layering feature.
func create(ioctx *rados.IOContext, name string, size int64) error {
	opts := gorbd.NewRbdImageOptions()
	defer opts.Destroy()
	if err := opts.SetUint64(gorbd.ImageOptionFeatures, gorbd.FeatureLayering); err != nil {
		return err
	}
	err := gorbd.CreateImage(ioctx, name, uint64(size), opts)
	if errnoOf(err) == syscall.EEXIST { // another gateway created it first
		return nil
	}
	return err
}

// errnoOf returns the positive errno a go-ceph error carries, or 0.
func errnoOf(err error) syscall.Errno {
	var ec interface{ ErrorCode() int }
	if errors.As(err, &ec) {
		n := ec.ErrorCode()
		if n < 0 {
			n = -n
		}
		return syscall.Errno(n)
	}
	return 0
}

// enter takes a slot for one librbd call; it fails on a closed image.
func (im *Image) enter() error {
	im.mu.RLock()
	if im.closed {
		im.mu.RUnlock()
		return backstore.ErrClosed
	}
	im.slots <- struct{}{}
	return nil
}

func (im *Image) leave() {
	<-im.slots
	im.mu.RUnlock()
}

// rbdErr turns a negative librbd return into an error wrapping its errno.
func rbdErr(op string, ret C.ssize_t) error {
	return fmt.Errorf("rbd: %s: %w", op, syscall.Errno(-ret))
}

func ptr(b []byte) *C.char { return (*C.char)(unsafe.Pointer(&b[0])) }

// ReadAt implements backstore.Backstore (rbd_read2). Holes read as zeros.
func (im *Image) ReadAt(p []byte, off int64) (int, error) {
	return im.rw("read", p, off, func() C.ssize_t {
		return C.rbd_read2(im.img, C.uint64_t(off), C.size_t(len(p)), ptr(p), 0)
	})
}

// WriteAt implements backstore.Backstore (rbd_write2). The write is on the
// OSDs when it returns (the cache is off).
func (im *Image) WriteAt(p []byte, off int64) (int, error) {
	return im.rw("write", p, off, func() C.ssize_t {
		return C.rbd_write2(im.img, C.uint64_t(off), C.size_t(len(p)), ptr(p), 0)
	})
}

// rw runs call, a read or write of p at off, inside the image's bounds and
// its in-flight limit.
func (im *Image) rw(what string, p []byte, off int64, call func() C.ssize_t) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := im.checkRange(off, int64(len(p))); err != nil {
		return 0, err
	}
	if err := im.enter(); err != nil {
		return 0, err
	}
	defer im.leave()
	ret := call()
	if ret < 0 {
		return 0, rbdErr(what, ret)
	}
	return int(ret), nil
}

func (im *Image) checkRange(off, n int64) error {
	size := im.Size()
	if off < 0 || n < 0 || off > size || n > size-off {
		return backstore.ErrOutOfRange
	}
	return nil
}

// Size implements backstore.Backstore: the image's size in bytes as librbd
// last saw it (librbd follows resizes made by other clients through the
// image header's watch); 0 after Close or on error.
func (im *Image) Size() int64 {
	im.mu.RLock()
	defer im.mu.RUnlock()
	if im.closed {
		return 0
	}
	var size C.uint64_t
	if C.rbd_get_size(im.img, &size) < 0 {
		return 0
	}
	return int64(size)
}

// Refresh returns the image's current size, bytes, for a logical unit that
// re-reads its capacity (scsi.LogicalUnit.Resize(-1)).
func (im *Image) Refresh() (int64, error) {
	if err := im.enter(); err != nil {
		return 0, err
	}
	defer im.leave()
	var size C.uint64_t
	if ret := C.rbd_get_size(im.img, &size); ret < 0 {
		return 0, rbdErr("get size", C.ssize_t(ret))
	}
	return int64(size), nil
}

// Sync implements backstore.Syncer (rbd_flush).
func (im *Image) Sync() error {
	if err := im.enter(); err != nil {
		return err
	}
	defer im.leave()
	if ret := C.rbd_flush(im.img); ret < 0 {
		return rbdErr("flush", C.ssize_t(ret))
	}
	return nil
}

// Unmap implements backstore.Unmapper with rbd_write_zeroes: whole objects
// are deallocated, partial ones zeroed, so the range reads back as zeros
// (LBPRZ=1), which plain rbd_discard does not promise for ranges below
// rbd_discard_granularity_bytes.
func (im *Image) Unmap(off, length int64) error {
	if length == 0 {
		return nil
	}
	if err := im.checkRange(off, length); err != nil {
		return err
	}
	if err := im.enter(); err != nil {
		return err
	}
	defer im.leave()
	if ret := C.rbd_write_zeroes(im.img, C.uint64_t(off), C.size_t(length), 0, 0); ret < 0 {
		return rbdErr("write zeroes", ret)
	}
	return nil
}

// WriteSame implements backstore.WriteSamer (rbd_writesame: one request
// replicated by librbd; an all-zero block becomes write zeroes).
func (im *Image) WriteSame(block []byte, off int64, count int64) error {
	if count == 0 || len(block) == 0 {
		return nil
	}
	n := int64(len(block)) * count
	if err := im.checkRange(off, n); err != nil {
		return err
	}
	if err := im.enter(); err != nil {
		return err
	}
	defer im.leave()
	if ret := C.rbd_writesame(im.img, C.uint64_t(off), C.size_t(n), ptr(block), C.size_t(len(block)), 0); ret < 0 {
		return rbdErr("write same", ret)
	}
	return nil
}

// CompareAndWrite implements backstore.CompareAndWriter with librbd's
// rbd_compare_and_write, atomic on the OSDs against every client of the
// image: if the data at off equals cmp, write is written there; otherwise
// nothing is written and the error wraps backstore.ErrMiscompare with the
// byte offset, relative to off, of the first difference. len(cmp) must
// equal len(write). librbd 16.2 compares and writes one 512-byte sector at
// most: a longer range fails with EINVAL, so a logical unit on this backstore
// has 512-byte blocks and a MAXIMUM COMPARE AND WRITE LENGTH of 1.
func (im *Image) CompareAndWrite(cmp, write []byte, off int64) error {
	if len(cmp) != len(write) {
		return errors.New("rbd: compare and write: buffers of different lengths")
	}
	if len(cmp) == 0 {
		return nil
	}
	if err := im.checkRange(off, int64(len(cmp))); err != nil {
		return err
	}
	if err := im.enter(); err != nil {
		return err
	}
	defer im.leave()
	var mis C.uint64_t
	ret := C.rbd_compare_and_write(im.img, C.uint64_t(off), C.size_t(len(cmp)), ptr(cmp), ptr(write), &mis, 0)
	if ret == -C.ssize_t(syscall.EILSEQ) {
		// librbd 16.2 reports the first difference as the image offset of
		// the object holding the sector plus the difference's position in
		// the compared buffer.
		return &backstore.MiscompareError{Offset: int64(mis) - off/im.objSize*im.objSize}
	}
	if ret < 0 {
		return rbdErr("compare and write", ret)
	}
	return nil
}

// Resize implements backstore.Resizer (rbd_resize); other gateways see the
// new size through the image header's watch.
func (im *Image) Resize(size int64) error {
	if size < 0 {
		return backstore.ErrOutOfRange
	}
	if err := im.enter(); err != nil {
		return err
	}
	defer im.leave()
	if ret := C.rbd_resize(im.img, C.uint64_t(size)); ret < 0 {
		return rbdErr("resize", C.ssize_t(ret))
	}
	return nil
}

// UnmapSupported implements backstore.UnmapSupporter: RBD images are thin.
func (im *Image) UnmapSupported() bool { return true }

// IOContext returns the pool's RADOS I/O context, for state kept beside the
// image (the shared reservation object). It is valid until Close.
func (im *Image) IOContext() *rados.IOContext { return im.ioctx }

// Identity names the image uniquely and stably across clients and
// renames: "<cluster fsid>/<pool id>/<image id>". Gateways derive the logical
// unit's identity (serial, NAA) from it.
func (im *Image) Identity() (string, error) {
	fsid, err := im.conn.GetFSID()
	if err != nil {
		return "", fmt.Errorf("rbd: cluster fsid: %w", err)
	}
	if err := im.enter(); err != nil {
		return "", err
	}
	defer im.leave()
	buf := make([]byte, 64)
	if ret := rbdGetID(im, buf); ret < 0 {
		return "", rbdErr("get id", ret)
	}
	return fmt.Sprintf("%s/%d/%s", fsid, im.ioctx.GetPoolID(), cString(buf)), nil
}

// rbdGetID writes the image's id, NUL-terminated, into buf (rbd_get_id).
// The caller holds a slot (enter).
func rbdGetID(im *Image, buf []byte) C.ssize_t {
	return C.ssize_t(C.rbd_get_id(im.img, ptr(buf), C.size_t(len(buf))))
}

// cString returns the NUL-terminated string at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// Name returns "pool/image".
func (im *Image) Name() string { return im.cfg.Pool + "/" + im.cfg.Image }

// Close implements backstore.Backstore: waits for calls in flight, closes the
// reservation stores, the image and the connection.
func (im *Image) Close() error {
	im.mu.Lock()
	if im.closed {
		im.mu.Unlock()
		return backstore.ErrClosed
	}
	im.closed = true
	im.mu.Unlock()
	im.storesMu.Lock()
	for _, st := range im.stores {
		st.Close()
	}
	im.storesMu.Unlock()
	ret := C.rbd_close(im.img)
	im.ioctx.Destroy()
	im.conn.Shutdown()
	if ret < 0 {
		return rbdErr("close", C.ssize_t(ret))
	}
	return nil
}
