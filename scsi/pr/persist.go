package pr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Persister stores the persistent reservation image while APTPL is active
// (SPC-4 §5.13.4). The State calls it with its lock held, before the command
// that changed the state completes.
type Persister interface {
	// Persist durably replaces the stored image with data (the output of
	// State.Save). data == nil means APTPL was turned off: delete the image.
	// An error fails the command (InternalTargetFailure) and the change is
	// not applied.
	Persist(data []byte) error
}

// File is a Persister that keeps the image in one file. Persist writes a
// temporary file in the same directory, fsyncs it, renames it over Path and
// fsyncs the directory, so a crash leaves either the old or the new image.
type File struct {
	// Path is the image file, e.g. /var/lib/gosrp/<lun>.pr.json.
	Path string
}

// Persist implements Persister.
func (f File) Persist(data []byte) error {
	dir := filepath.Dir(f.Path)
	if data == nil {
		if err := os.Remove(f.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return syncDir(dir)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(f.Path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, f.Path)
	}
	if err != nil {
		os.Remove(name)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Restore loads the image at Path into s, if the file exists. A missing
// file leaves s unchanged and returns nil.
func (f File) Restore(s *State) error {
	fd, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer fd.Close()
	return s.Load(fd)
}

// ImageVersion is the version of the image format written by Save.
const ImageVersion = 1

// ErrBadImage is returned (wrapped) by Load for an image it cannot accept.
var ErrBadImage = errors.New("pr: bad persistent reservation image")

// image is the JSON form of the persistent state; see State.Save.
type image struct {
	Version int  `json:"version"`
	APTPL   bool `json:"aptpl"`
	// Generation is PRgeneration, kept in a shared image (Config.Shared)
	// only: a power on starts it at zero.
	Generation    uint32      `json:"generation,omitempty"`
	Registrations []imageReg  `json:"registrations"`
	Reservation   *imageResrv `json:"reservation,omitempty"`
}

type imageReg struct {
	Key         string `json:"key"`
	Initiator   string `json:"initiator"`
	Target      string `json:"target"`
	AllTgPt     bool   `json:"all_tg_pt"`
	RTPI        uint16 `json:"rtpi"`
	TransportID []byte `json:"transport_id"`
}

type imageResrv struct {
	Holder int  `json:"holder"`
	Scope  int  `json:"scope"`
	Type   Type `json:"type"`
}

func (c *core) image() []byte {
	im := image{Version: ImageVersion, APTPL: c.aptpl, Generation: c.gen, Registrations: []imageReg{}}
	for i, r := range c.regs {
		im.Registrations = append(im.Registrations, imageReg{
			Key:         fmt.Sprintf("%#016x", r.key),
			Initiator:   r.initiator,
			Target:      r.target,
			AllTgPt:     r.allTgPt,
			RTPI:        r.rtpi,
			TransportID: r.transportID,
		})
		if c.res != nil && c.res.holder == r.id {
			im.Reservation = &imageResrv{Holder: i, Scope: ScopeLU, Type: c.res.typ}
		}
	}
	b, err := json.MarshalIndent(im, "", "  ")
	if err != nil { // only plain types: cannot happen
		panic(err)
	}
	return append(b, '\n')
}

// Save writes the persistent reservation image (registrations, reservation,
// APTPL) to w, whatever the APTPL state; it is what the Persister receives.
//
// The image is JSON (version ImageVersion):
//
//	{
//	  "version": 1,                 // ImageVersion
//	  "aptpl": true,                // APTPL active when saved
//	  "registrations": [            // in registration order
//	    {
//	      "key": "0x0123456789abcdef", // reservation key, hex, nonzero
//	      "initiator": "…",            // Nexus.InitiatorPortID
//	      "target": "…",               // Nexus.TargetPortID; "" if all_tg_pt
//	      "all_tg_pt": false,
//	      "rtpi": 1,                   // relative target port identifier
//	      "transport_id": "BAAAAA…"    // TransportID, base64
//	    }
//	  ],
//	  "reservation": {              // absent if none
//	    "holder": 0,                // index into registrations (types 7, 8: any)
//	    "scope": 0,                 // LU_SCOPE
//	    "type": 1                   // Type
//	  }
//	}
//
// PRgeneration is stored ("generation") but Load starts it at zero, as a
// power on does (SPC-4 §6.15.2); a shared image (Config.Shared) keeps it.
// SPC-2 reservations are never stored.
func (s *State) Save(w io.Writer) error {
	s.mu.Lock()
	b := s.c.image()
	s.mu.Unlock()
	_, err := w.Write(b)
	return err
}

// Load replaces the registrations, reservation and APTPL state with the
// image read from r, as after a power on with APTPL active: PRgeneration is
// zero and there is no SPC-2 reservation. On error (ErrBadImage for a
// malformed image, or r's error) the state is unchanged. Load does not call
// the Persister.
func (s *State) Load(r io.Reader) error {
	c, err := decodeImage(r)
	if err != nil {
		return err
	}
	c.gen = 0
	s.mu.Lock()
	s.c = c
	s.rsv = nil
	s.noteLocked()
	s.mu.Unlock()
	return nil
}

// decodeImage parses an image written by Save (PRgeneration included).
func decodeImage(r io.Reader) (core, error) {
	var im image
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	if err := dec.Decode(&im); err != nil {
		return core{}, fmt.Errorf("%w: %v", ErrBadImage, err)
	}
	if im.Version != ImageVersion {
		return core{}, fmt.Errorf("%w: version %d, want %d", ErrBadImage, im.Version, ImageVersion)
	}
	c := core{aptpl: im.APTPL, gen: im.Generation, nextID: 1}
	for i, ir := range im.Registrations {
		key, err := strconv.ParseUint(ir.Key, 0, 64)
		if err != nil || key == 0 {
			return core{}, fmt.Errorf("%w: registration %d: key %q", ErrBadImage, i, ir.Key)
		}
		if ir.Initiator == "" || (ir.Target == "") != ir.AllTgPt {
			return core{}, fmt.Errorf("%w: registration %d: bad nexus", ErrBadImage, i)
		}
		k := nexusKey{ir.Initiator, ir.Target}
		if ir.AllTgPt {
			for _, r := range c.regs {
				if r.allTgPt && r.initiator == ir.Initiator {
					return core{}, fmt.Errorf("%w: registration %d: duplicate", ErrBadImage, i)
				}
			}
		} else if r := c.find(k); r != nil && !r.allTgPt {
			return core{}, fmt.Errorf("%w: registration %d: duplicate", ErrBadImage, i)
		}
		c.regs = append(c.regs, registration{
			id: c.nextID, key: key, initiator: ir.Initiator, target: ir.Target,
			allTgPt: ir.AllTgPt, rtpi: ir.RTPI, transportID: ir.TransportID,
		})
		c.nextID++
	}
	if rs := im.Reservation; rs != nil {
		if rs.Holder < 0 || rs.Holder >= len(c.regs) || rs.Scope != ScopeLU || !rs.Type.Valid() {
			return core{}, fmt.Errorf("%w: bad reservation", ErrBadImage)
		}
		c.res = &reservation{holder: c.regs[rs.Holder].id, typ: rs.Type}
	}
	return c, nil
}
