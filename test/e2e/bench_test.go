package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp/initiator"
)

// BenchmarkSeqRead1M reads 1 MiB per command from the target engine over
// iWARP on 127.0.0.1 at several queue depths (in-process, both ends).
func BenchmarkSeqRead1M(b *testing.B) {
	envs := map[string]func() *env{
		"iwarp": func() *env {
			return startTarget(b, iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), iwarp.NewDevice(iwarp.Config{CompleteOnTransmit: true}), "127.0.0.1:0")
		},
		"loopback": func() *env {
			n := loopback.NewNetwork()
			return startTarget(b, n.NewDevice("target"), n.NewDevice("initiator"), "")
		},
	}
	for _, tr := range []string{"loopback", "iwarp"} {
		for _, qd := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/qd%d", tr, qd), func(b *testing.B) {
				e := envs[tr]()
				o := initiator.Options{Dest: e.addr, IDExt: guid, IOCGUID: guid, MaxSect: 2048}
				s, err := initiator.Dial(context.Background(), e.iDev, o)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				s.TestUnitReady(context.Background(), 0)
				b.SetBytes(1 << 20)
				b.ResetTimer()
				var wg sync.WaitGroup
				var mu sync.Mutex
				n := 0
				for w := 0; w < qd; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						buf := make([]byte, 1<<20)
						for {
							mu.Lock()
							if n >= b.N {
								mu.Unlock()
								return
							}
							i := n
							n++
							mu.Unlock()
							if err := s.Read16(context.Background(), 0, uint64(i%64)*2048, buf, 512, false); err != nil {
								b.Error(err)
								return
							}
						}
					}(w)
				}
				wg.Wait()
			})
		}
	}
}
