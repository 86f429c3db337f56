package backstore

import "testing"

// BenchmarkRAM measures 4 KiB and 1 MiB reads and writes of a RAM
// backstore (the 1 MiB ones span 16 chunks); they allocate nothing once
// the chunks exist.
func BenchmarkRAM(b *testing.B) {
	for _, n := range []int{4 << 10, 1 << 20} {
		r := NewRAM(64 << 20)
		p := make([]byte, n)
		if _, err := r.WriteAt(p, 0); err != nil {
			b.Fatal(err)
		}
		for _, op := range []string{"read", "write"} {
			b.Run(op+"-"+map[int]string{4 << 10: "4k", 1 << 20: "1m"}[n], func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(n))
				for b.Loop() {
					var err error
					if op == "read" {
						_, err = r.ReadAt(p, 0)
					} else {
						_, err = r.WriteAt(p, 0)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
