//go:build ceph

package rbd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
)

// notifyTimeout bounds how long a change waits for the other gateways to
// acknowledge it (a dead gateway's watch lapses after the OSD's watch
// timeout, 30 s by default; the change is stored either way).
const notifyTimeout = 5 * time.Second

// ReservationStore keeps the image's persistent reservation state in one
// RADOS object beside it, "gosrp.pr.<image id>", shared by every gateway
// that exports the image (the shape of scsi/pr.SharedStore: Load and
// CompareAndSwap). A change is a write asserting the object's version
// (rados_write_op_assert_version), then a notify that every other gateway's
// watch acknowledges after marking its state stale (onChange), so when
// CompareAndSwap returns the others enforce the change from their next
// command. Safe for concurrent use; Close stops the watch.
type ReservationStore struct {
	ioctx    *rados.IOContext // its own, so GetLastVersion is this store's
	oid      string
	onChange func()
	log      *slog.Logger

	mu       sync.Mutex // serializes object operations and GetLastVersion
	watcher  *rados.Watcher
	stop     chan struct{}
	done     chan struct{}
	closing  sync.Once
	closeErr error
}

// ReservationStore opens the image's reservation object (creating an empty
// one) and watches it; onChange runs on every change another gateway makes
// (and when the watch is lost and re-established). log may be nil.
func (im *Image) ReservationStore(onChange func(), log *slog.Logger) (*ReservationStore, error) {
	if err := im.enter(); err != nil {
		return nil, err
	}
	defer im.leave()
	buf := make([]byte, 64)
	if ret := rbdGetID(im, buf); ret < 0 {
		return nil, rbdErr("get id", ret)
	}
	ioctx, err := im.conn.OpenIOContext(im.cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("rbd: reservation store: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &ReservationStore{ioctx: ioctx, oid: "gosrp.pr." + cString(buf), onChange: onChange, log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := ioctx.Create(s.oid, rados.CreateIdempotent); err != nil {
		ioctx.Destroy()
		return nil, fmt.Errorf("rbd: creating %s: %w", s.oid, err)
	}
	if s.watcher, err = ioctx.Watch(s.oid); err != nil {
		ioctx.Destroy()
		return nil, fmt.Errorf("rbd: watching %s: %w", s.oid, err)
	}
	go s.watch()
	im.storesMu.Lock()
	im.stores = append(im.stores, s)
	im.storesMu.Unlock()
	return s, nil
}

// Object returns the RADOS object's name.
func (s *ReservationStore) Object() string { return s.oid }

// Load implements pr.SharedStore: the stored image (nil while empty) and the
// object's version.
func (s *ReservationStore) Load() ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for size := 64 << 10; ; size *= 4 {
		buf := make([]byte, size)
		n, err := s.ioctx.Read(s.oid, buf, 0)
		if errnoOf(err) == syscall.ENOENT {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("rbd: reading %s: %w", s.oid, err)
		}
		ver, err := s.ioctx.GetLastVersion()
		if err != nil {
			return nil, 0, err
		}
		if n < size {
			if n == 0 {
				return nil, ver, nil
			}
			return buf[:n], ver, nil
		}
		if size >= 64<<20 {
			return nil, 0, fmt.Errorf("rbd: %s is larger than 64 MiB", s.oid)
		}
	}
}

// CompareAndSwap implements pr.SharedStore: data replaces the object if its
// version is still version (0: the object does not exist), then the other
// gateways are notified.
func (s *ReservationStore) CompareAndSwap(version uint64, data []byte) (uint64, bool, error) {
	s.mu.Lock()
	op := rados.CreateWriteOp()
	if version == 0 {
		op.Create(rados.CreateExclusive)
	} else {
		op.AssertVersion(version)
	}
	op.WriteFull(data)
	err := op.Operate(s.ioctx, s.oid, rados.OperationNoFlag)
	op.Release()
	var ver uint64
	if err == nil {
		ver, err = s.ioctx.GetLastVersion()
	}
	s.mu.Unlock()
	switch e := errnoOf(err); {
	case e == syscall.ERANGE || e == syscall.EOVERFLOW || e == syscall.EEXIST:
		return 0, false, nil // another gateway's change came first
	case err != nil:
		return 0, false, fmt.Errorf("rbd: writing %s: %w", s.oid, err)
	}
	if _, timeouts, err := s.ioctx.NotifyWithTimeout(s.oid, nil, notifyTimeout); err != nil || len(timeouts) > 0 {
		s.log.Warn("rbd: a gateway did not acknowledge the reservation change in time", "object", s.oid, "timeouts", len(timeouts), "err", err)
	}
	return ver, true, nil
}

// watch acknowledges notifications after onChange, and re-establishes a
// lost watch (telling onChange, since changes may have been missed).
func (s *ReservationStore) watch() {
	defer close(s.done)
	w := s.watcher
	for {
		select {
		case <-s.stop:
			return
		case ev, ok := <-w.Events():
			if !ok {
				return
			}
			s.onChange()
			if err := ev.Ack(nil); err != nil {
				s.log.Debug("rbd: notify ack failed", "err", err)
			}
		case err, ok := <-w.Errors():
			if !ok {
				return
			}
			s.log.Warn("rbd: reservation watch lost; re-establishing", "object", s.oid, "err", err)
			s.onChange()
			_ = w.Delete()
			for {
				nw, werr := s.ioctx.Watch(s.oid)
				if werr == nil {
					s.mu.Lock()
					s.watcher = nw
					s.mu.Unlock()
					w = nw
					s.onChange()
					break
				}
				select {
				case <-s.stop:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// Close stops the watch and releases the store's I/O context. The image's
// Close calls it too; later calls return the first call's result.
func (s *ReservationStore) Close() error {
	s.closing.Do(func() {
		close(s.stop)
		s.mu.Lock()
		w := s.watcher
		s.mu.Unlock()
		err := w.Delete()
		<-s.done
		s.ioctx.Destroy()
		if errors.Is(err, rados.ErrNotFound) {
			err = nil
		}
		s.closeErr = err
	})
	return s.closeErr
}
