package pr

import (
	"errors"
	"sync"
)

// memPersister records every image; fail makes Persist fail.
type memPersister struct {
	mu     sync.Mutex
	images [][]byte
	fail   bool
}

var errInjected = errors.New("injected write failure")

func (m *memPersister) Persist(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errInjected
	}
	m.images = append(m.images, append([]byte(nil), b...))
	if b == nil {
		m.images[len(m.images)-1] = nil
	}
	return nil
}

func (m *memPersister) last() ([]byte, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.images) == 0 {
		return nil, 0
	}
	return m.images[len(m.images)-1], len(m.images)
}
