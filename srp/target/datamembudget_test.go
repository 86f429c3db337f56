package target

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestDataMemoryNeverReadsOverBudget: channels reserving and releasing
// data memory at once never make DataMemory read more than
// Config.MaxDataMemory, not even for a charge that does not fit and is
// refused.
func TestDataMemoryNeverReadsOverBudget(t *testing.T) {
	const budget, n = 1 << 20, 1 << 20
	p := &Port{cfg: Config{MaxDataMemory: budget}}
	var over atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m := p.DataMemory(); m > budget {
				over.Store(m)
			}
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100000 {
				if p.reserveData(n) {
					p.releaseData(n)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	if m := over.Load(); m != 0 {
		t.Errorf("DataMemory read %d bytes, over the %d-byte budget", m, budget)
	}
	if m := p.DataMemory(); m != 0 {
		t.Errorf("DataMemory %d after every charge was released", m)
	}
}
