package scsi

import (
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
)

// blockingStore is a RAM backstore whose reads of chosen byte offsets
// (block*512) block until released, recording the order of events.
type blockingStore struct {
	*backstore.RAM
	mu      sync.Mutex
	gates   map[int64]chan struct{}
	started map[int64]chan struct{}
	log     []string
}

func newBlockingStore(size int64) *blockingStore {
	return &blockingStore{RAM: backstore.NewRAM(size), gates: map[int64]chan struct{}{}, started: map[int64]chan struct{}{}}
}

func (b *blockingStore) block(lba int64) {
	b.mu.Lock()
	b.gates[lba] = make(chan struct{})
	b.started[lba] = make(chan struct{})
	b.mu.Unlock()
}

func (b *blockingStore) release(lba int64) {
	b.mu.Lock()
	close(b.gates[lba])
	b.mu.Unlock()
}

func (b *blockingStore) waitStarted(t *testing.T, lba int64) {
	t.Helper()
	b.mu.Lock()
	ch := b.started[lba]
	b.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("read of LBA %d never started", lba)
	}
}

func (b *blockingStore) events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

func (b *blockingStore) ReadAt(p []byte, off int64) (int, error) {
	lba := off / 512
	b.mu.Lock()
	g, st := b.gates[lba], b.started[lba]
	b.log = append(b.log, "start "+itoa(lba))
	b.mu.Unlock()
	if g != nil {
		close(st)
		<-g
	}
	n, err := b.RAM.ReadAt(p, off)
	b.mu.Lock()
	b.log = append(b.log, "end "+itoa(lba))
	b.mu.Unlock()
	return n, err
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var s []byte
	for v > 0 {
		s = append([]byte{byte('0' + v%10)}, s...)
		v /= 10
	}
	return string(s)
}

// waitFor polls cond until it holds or the test deadline nears.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
