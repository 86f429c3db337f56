package scsi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ModePageStore keeps the saved values of a logical unit's mode pages
// across restarts (SPC-4 §7.5.1: saved values, MODE SELECT SP=1, MODE SENSE
// PC=11b). With a store the pages report PS=1 and a logical unit reset
// restores the saved values; without one, saving is not supported.
type ModePageStore interface {
	// Load returns the saved image, or nil and no error if nothing was saved.
	Load() ([]byte, error)
	// Save durably replaces the saved image before returning.
	Save(image []byte) error
}

// ModePageFile is a ModePageStore in one file, replaced atomically
// (temporary file, fsync, rename, directory fsync).
type ModePageFile struct {
	// Path is the image file, e.g. /var/lib/gosrp/lun0.mode.
	Path string
}

// Load implements ModePageStore.
func (f ModePageFile) Load() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Save implements ModePageStore.
func (f ModePageFile) Save(image []byte) error {
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, filepath.Base(f.Path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(image); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// modeImageLen is the length of a saved image: the four pages back to back.
const modeImageLen = pageRWErrLen + pageCachingLen + pageControlLen + pageIELen

// image serializes m (pages in modePageOrder, headers included).
func (m *modePages) image() []byte {
	var b []byte
	for _, pc := range modePageOrder {
		b = append(b, m.page(pc)...)
	}
	return b
}

// fromImage returns defs with the changeable bits taken from a saved
// image; bits outside the changeable mask keep their default values, so a
// stale or foreign image cannot set what MODE SELECT could not.
func fromImage(defs, chg modePages, img []byte) (modePages, error) {
	if len(img) != modeImageLen {
		return defs, fmt.Errorf("scsi: saved mode page image is %d bytes, want %d", len(img), modeImageLen)
	}
	out := defs
	off := 0
	for _, pc := range modePageOrder {
		p, mask := out.page(pc), chg.page(pc)
		src := img[off : off+len(p)]
		if src[0]&0x3F != pc || int(src[1]) != len(p)-2 {
			return defs, fmt.Errorf("scsi: saved mode page image: page %#x header % x", pc, src[:2])
		}
		for i := 2; i < len(p); i++ {
			p[i] = p[i]&^mask[i] | src[i]&mask[i]
		}
		off += len(p)
	}
	if out.tst() > 1 || out.qerr() == 2 {
		return defs, errors.New("scsi: saved mode page image: reserved TST or QERR value")
	}
	return out, nil
}
