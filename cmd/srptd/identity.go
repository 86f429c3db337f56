package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// identity is what initiators recognise a target by, kept in the data
// directory (identity.json) so a restart presents the same disks: the
// service GUID of each port (id_ext/ioc_guid) and the unit serial number
// of each LUN (VPD 80h; the NAA designator of VPD 83h derives from it,
// as LIO's spc_gen_naa_6h_vendor_specific does). Values set in the
// configuration take precedence and are not stored.
type identity struct {
	mu    sync.Mutex
	path  string            // "" : nothing persisted
	Ports map[string]string `json:"ports"` // port name → service GUID, 16 hex digits
	LUNs  map[string]string `json:"luns"`  // LUN number → serial
}

// loadIdentity reads DIR/identity.json; dir "" gives an identity that is
// not persisted.
func loadIdentity(dir string) (*identity, error) {
	id := &identity{Ports: map[string]string{}, LUNs: map[string]string{}}
	if dir == "" {
		return id, nil
	}
	id.path = filepath.Join(dir, "identity.json")
	b, err := os.ReadFile(id.path)
	if errors.Is(err, fs.ErrNotExist) {
		return id, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, id); err != nil {
		return nil, fmt.Errorf("%s: %w (repair it from a backup, or remove it: every LUN without a configured serial then becomes a new disk to initiators)", id.path, err)
	}
	if id.Ports == nil {
		id.Ports = map[string]string{}
	}
	if id.LUNs == nil {
		id.LUNs = map[string]string{}
	}
	return id, nil
}

// portGUID returns the stored service GUID of port name, or stores def.
func (id *identity) portGUID(name string, def uint64) (uint64, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if s, ok := id.Ports[name]; ok {
		if g, err := strconv.ParseUint(s, 16, 64); err == nil {
			return g, nil
		}
	}
	id.Ports[name] = fmt.Sprintf("%016x", def)
	return def, id.saveLocked()
}

// lunSerial returns the stored serial of LUN n, or makes and stores a new
// one: 16 random hex digits.
func (id *identity) lunSerial(n uint64) (string, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	k := strconv.FormatUint(n, 10)
	if s, ok := id.LUNs[k]; ok && s != "" {
		if !validSerial(s) {
			return "", fmt.Errorf("%s: luns.%s: serial %q is not 1..64 printable ASCII characters (correct it, or delete the entry to make LUN %d a new disk)", id.path, k, s, n)
		}
		return s, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	id.LUNs[k] = s
	return s, id.saveLocked()
}

// forgetLUN drops the serial of a removed LUN, so a new LUN under that
// number is a new disk. It reports whether a serial was stored.
func (id *identity) forgetLUN(n uint64) (bool, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	k := strconv.FormatUint(n, 10)
	if _, ok := id.LUNs[k]; !ok {
		return false, nil
	}
	delete(id.LUNs, k)
	return true, id.saveLocked()
}

// validSerial reports whether s can be a unit serial number (VPD 80h):
// 1..64 printable ASCII characters.
func validSerial(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (id *identity) saveLocked() error {
	if id.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(id.path, append(b, '\n'), 0o600)
}

// writeFileAtomic replaces path with data (mode perm): a temporary file in
// the same directory, fsynced, renamed over path, then the directory
// fsynced.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		// Name the file being written, not the temporary one.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename: ENOENT, ignored
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// dataDirFree reports, creating nothing, whether another srptd holds data
// directory dir (lockDataDir): its lock file exists once a srptd has run
// there, and without it no srptd holds the directory.
func dataDirFree(dir string) error {
	f, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		return nil
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("data directory %s is in use by another srptd", dir)
	}
	return nil
}

// lockDataDir takes an exclusive lock on DIR/lock (flock), so two daemons
// never serve the same data directory (and its LUN files). unlock releases
// it.
func lockDataDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another srptd", dir)
		}
		return nil, fmt.Errorf("data directory %s: lock: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
