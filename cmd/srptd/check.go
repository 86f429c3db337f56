package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"golang.org/x/sys/unix"
)

// checkStart is srptd --check past the configuration's own validation: it
// opens what a start opens, changing nothing, so that "configuration OK"
// means srptd will start. The data directory can be created (or is a
// writable directory no other srptd holds) and its identity.json loads;
// each file or block LUN's path is a regular file or block device (as its
// backstore wants) that opens for reading (and writing unless read-only),
// holds a block, is flocked by no other srptd and backs no other LUN, or
// is a file start will create in a writable directory; every listen
// address is listed once and free on its port's device; the metrics and
// pprof addresses are free; the admin socket is not taken. It returns
// every problem found, each naming its file, line and key (or flag).
func checkStart(ctx context.Context, cfg *Config, org origin, dataDir, pprof string, log *slog.Logger) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, cfg.explain(err))
		}
	}
	if dataDir != "" {
		if abs, err := filepath.Abs(dataDir); err == nil {
			dataDir = abs
		}
		add(checkDataDir(dataDir))
	}
	d := newDaemon(cfg, org, dataDir, nil, io.Discard, log)
	var opened []lunFile
	for i, l := range cfg.LUNs {
		field := fmt.Sprintf("lun[%d]", i)
		add(d.checkLUN(field, field, l, &opened))
	}
	add(checkListeners(ctx, cfg, log))
	if a := cfg.Metrics.Listen; a != "" {
		add(checkFree(a, "metrics.listen"))
	}
	if pprof != "" {
		if err := checkFree(pprof, ""); err != nil {
			add(fmt.Errorf("--pprof: %w", err))
		}
	}
	if socket := cfg.Admin.Socket; socket != "" {
		if err := checkAdminSocket(socket, dataDir); err != nil {
			add(ferr("admin.socket", "%v", err))
		}
	} else if socket := filepath.Join(dataDir, "srptd.sock"); dataDir != "" && len(socket) <= maxSocketPath {
		if err := checkAdminSocket(socket, dataDir); err != nil {
			add(fmt.Errorf("admin socket %w", err))
		}
	}
	return errors.Join(errs...)
}

// preflight is what a start checks of checkStart once its addresses are
// bound and before it creates anything on disk (the data directory, its
// lock, identity.json, LUN images, the admin socket): each file or block
// LUN's path and the admin socket, changing nothing, with the errors the
// start would meet later. A start that fails on one of them then leaves
// nothing behind.
func (d *daemon) preflight() error {
	var errs []error
	var opened []lunFile
	for i, l := range d.cfg.LUNs {
		if err := d.checkLUN(fmt.Sprintf("lun[%d]", i), fmt.Sprintf("LUN %d", *l.LUN), l, &opened); err != nil {
			errs = append(errs, d.cfg.explain(err))
		}
	}
	if socket := d.adminSocketPath(); socket != "" {
		if err := adminSocketFree(socket); err != nil {
			errs = append(errs, fmt.Errorf("admin socket %s: %w", socket, err))
		} else if err := checkAdminSocket(socket, d.dataDir); err != nil {
			errs = append(errs, fmt.Errorf("admin socket %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkDataDir: dir is a directory srptd may write and no other srptd
// holds, or can be created; its identity.json, if any, loads.
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return checkCreatable(dir, "data directory", true)
	}
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("data directory %s: not writable: %w", dir, err)
	}
	if err := dataDirFree(dir); err != nil {
		return err
	}
	if _, err := loadIdentity(dir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// checkCreatable: path does not exist and its directory (with parents:
// its nearest existing ancestor, as for MkdirAll) is a directory srptd may
// write.
func checkCreatable(path, what string, parents bool) error {
	dir := filepath.Dir(path)
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s %s: %s is not a directory", what, path, dir)
			}
			if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("%s %s cannot be created: %s: %w", what, path, dir, err)
			}
			return nil
		}
		if !parents || !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		dir = filepath.Dir(dir)
	}
}

// lunFile is a backstore path an earlier LUN of the configuration uses:
// fi of an existing file, or the cleaned path of one the start creates.
type lunFile struct {
	field string // the LUN as "already the backstore of" names it
	fi    os.FileInfo
	path  string
}

// checkLUN opens what attachLUN opens for sec, read-only where attachLUN
// would create or resize, and closes it again. A later LUN on the same
// path is told it is already the backstore of name.
func (d *daemon) checkLUN(field, name string, sec LUNSection, opened *[]lunFile) error {
	if sec.Backstore != "file" && sec.Backstore != "block" {
		return nil
	}
	path := d.resolve(sec.Path)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// The start creates it for the first LUN naming it and finds it
		// already in use for the next.
		for _, o := range *opened {
			if o.fi == nil && o.path == filepath.Clean(path) {
				return ferr(field+".path", "%s is already the backstore of %s", path, o.field)
			}
		}
		switch {
		case sec.Backstore == "block":
			return ferr(field+".path", "%s: no such block device", path)
		case sec.Size == 0 || sec.ReadOnly:
			return ferr(field+".path", "%s does not exist (srptd creates a missing image only with a size, and not read-only)", path)
		case d.dataDir != "" && filepath.Dir(path) == d.dataDir:
			// in the data directory, which start creates
		default:
			if err := checkCreatable(path, "image", false); err != nil {
				return ferr(field+".path", "%v", err)
			}
		}
		*opened = append(*opened, lunFile{field: name, path: filepath.Clean(path)})
		return nil
	}
	if err != nil {
		return ferr(field+".path", "%v", err)
	}
	block := fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	switch {
	case sec.Backstore == "block" && !block:
		return ferr(field+".path", "%s is not a block device (use backstore = \"file\")", path)
	case !block && !fi.Mode().IsRegular():
		return ferr(field+".path", "%s is neither a regular file nor a block device", path)
	}
	for _, o := range *opened {
		if o.fi != nil && os.SameFile(fi, o.fi) {
			return ferr(field+".path", "%s is already the backstore of %s", path, o.field)
		}
	}
	*opened = append(*opened, lunFile{field: name, fi: fi})
	if name, ok := d.ownFile(fi); ok {
		return ferr(field+".path", "%s is srptd's own %s, not a backstore", path, name)
	}
	if sec.Size > 0 && !sec.ReadOnly && fi.Mode().IsRegular() && fi.Size() > int64(sec.Size) {
		return ferr(field+".size", "%d bytes is less than the %d bytes of %s; srptd does not shrink an image (set size = 0 to use the file's length)", sec.Size, fi.Size(), path)
	}
	// Size 0: no O_CREATE, no truncation; the open checks permissions
	// and reads a block device's sizes.
	fb, err := backstore.OpenFile(path, backstore.FileOptions{ReadOnly: sec.ReadOnly})
	if err != nil {
		return ferr(field+".path", "%v", err)
	}
	defer fb.Close()
	// The start uses the file's length when it sets none (size = 0, or
	// read-only); else it sets the size, a whole number of blocks.
	if bs := lunBlockSize(sec, fb); sec.Size == 0 || sec.ReadOnly {
		if fb.Size() < int64(bs) {
			return ferr(field+".path", "%s holds %d bytes, less than one %d-byte block", path, fb.Size(), bs)
		}
		if err := wholeBlocks(path, fb.Size(), bs); err != nil {
			return ferr(field+".path", "%v", err)
		}
	}
	lock, err := lockImage(path, d.sharedImage(sec))
	if err != nil {
		return ferr(field+".path", "%v", err)
	}
	lock.Close()
	return nil
}

// checkListeners opens every port's device and listens on each of its
// addresses, as startPorts does, all at once (so an address listed twice
// fails as it would at start), then closes them.
func checkListeners(ctx context.Context, cfg *Config, log *slog.Logger) error {
	var errs []error
	var devs []rdma.Device
	var ls []rdma.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	where := map[string]string{} // listen address → the key that lists it
	for i, pc := range cfg.Ports {
		field := fmt.Sprintf("port[%d].listen", i)
		dev, _, err := openDevice(pc, log)
		if err != nil {
			errs = append(errs, fmt.Errorf("port[%d]: %w", i, err))
			continue
		}
		devs = append(devs, dev)
		var bound []net.Addr
		for _, a := range pc.Listen {
			if h, p, err := net.SplitHostPort(a); err == nil && p != "0" {
				k := strings.ToLower(h) + ":" + p
				if other, ok := where[k]; ok {
					errs = append(errs, ferr(field, "%s is listed twice (also in %s)", a, other))
					continue
				}
				where[k] = field
			}
			l, err := dev.Listen(ctx, a)
			if err != nil {
				if coveredByDualStack(a, bound) {
					continue
				}
				errs = append(errs, ferr(field, "%s: %v", a, err))
				continue
			}
			ls = append(ls, l)
			bound = append(bound, l.Addr())
		}
	}
	return errors.Join(errs...)
}

// checkFree: TCP address a can be listened on (field "" : no key).
func checkFree(a, field string) error {
	l, err := net.Listen("tcp", a)
	if err != nil {
		if field == "" {
			return err
		}
		return ferr(field, "%v", err)
	}
	return l.Close()
}

// checkAdminSocket: path is free in a directory srptd may write (or in
// the data directory, which a start creates), or a socket left over from
// an earlier run (startAdmin replaces it), never a file or a socket another
// srptd answers on. The error does not name path's key.
func checkAdminSocket(path, dataDir string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if abs, err := filepath.Abs(path); err == nil && dataDir != "" && filepath.Dir(abs) == dataDir {
			return nil // checkDataDir covers it
		}
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		} else if !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a directory", path, dir)
		}
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("%s cannot be created: %s: %w", path, dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s: exists and is not a unix socket", path)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return fmt.Errorf("%s: another srptd is serving this admin socket", path)
	}
	return nil
}
