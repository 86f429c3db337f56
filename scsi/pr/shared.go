package pr

import (
	"bytes"
	"fmt"
)

// SharedStore keeps one logical unit's persistent reservation image (Save's
// format, PRgeneration included) where every gateway exporting the unit
// reads and writes it — for Ceph RBD, a RADOS object beside the image. A
// change is written by compare-and-set on the image's version, so two
// gateways changing it at once cannot both win; the loser re-reads and
// applies its command again.
//
// The store must tell the other gateways of a change before CompareAndSwap
// returns (RADOS: watch/notify), and they call State.Invalidate, so a
// PERSISTENT RESERVE OUT through one gateway is enforced by every other from
// its next command on.
type SharedStore interface {
	// Load returns the stored image and its version; (nil, 0, nil) when no
	// image was ever stored.
	Load() (data []byte, version uint64, err error)
	// CompareAndSwap stores data if the stored version is still version (0:
	// no image yet) and returns the new version; swapped is false, and
	// nothing is stored, when another writer got there first.
	CompareAndSwap(version uint64, data []byte) (newVersion uint64, swapped bool, err error)
}

// sharedAttempts bounds the re-reads of one PERSISTENT RESERVE OUT that
// keeps losing the compare-and-set to other gateways.
const sharedAttempts = 16

// Refresh re-reads the shared image (Config.Shared) and adopts it if it
// changed. Stores call it when another gateway announces a change; In and
// Out call it before they act. Without a shared store it does nothing.
// Errors: the store's, or ErrBadImage (the state is then unchanged).
func (s *State) Refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked()
}

// Invalidate marks the shared image as changed by another gateway: the next
// command re-reads it (Check, In, Out). It takes no lock, so a store may call
// it from its notification handler while this State is busy.
func (s *State) Invalidate() {
	if s.cfg.Shared != nil {
		s.stale.Store(true)
	}
}

// refreshLocked is Refresh with s.mu held.
func (s *State) refreshLocked() error {
	if s.cfg.Shared == nil {
		return nil
	}
	s.stale.Store(false)
	data, ver, err := s.cfg.Shared.Load()
	if err != nil {
		return err
	}
	if ver == s.sharedVer {
		return nil
	}
	c := core{nextID: 1}
	if data != nil {
		if c, err = decodeImage(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("shared image version %d: %w", ver, err)
		}
	}
	s.c, s.sharedVer = c, ver
	s.noteLocked()
	s.log.Debug("shared persistent reservation state adopted", "version", ver, "gen", c.gen, "regs", len(c.regs))
	return nil
}
