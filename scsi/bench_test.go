package scsi

import (
	"context"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

func benchFixture(b *testing.B) (Session, *LogicalUnit) {
	lu, err := NewLogicalUnit(LUConfig{Backstore: backstore.NewRAM(64 << 20)})
	if err != nil {
		b.Fatal(err)
	}
	tg := NewTarget(TargetConfig{})
	if err := tg.AddLUN(0, lu); err != nil {
		b.Fatal(err)
	}
	s := tg.NewSession(nexusA)
	b.Cleanup(s.Close)
	s.Execute(context.Background(), &Command{CDB: cdbTUR()})
	return s, lu
}

// BenchmarkRead16 measures Execute of a 4 KiB READ(16) on a RAM LU.
func BenchmarkRead16(b *testing.B) {
	s, _ := benchFixture(b)
	ctx := context.Background()
	buf := make([]byte, 4096)
	s.Execute(ctx, &Command{Tag: 1, CDB: cdb16(0x8A, 0, 0, 8), DataOut: buf})
	cmd := &Command{Tag: 2, CDB: cdb16(0x88, 0, 0, 8), DataIn: buf}
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if r := s.Execute(ctx, cmd); r.Status != sense.StatusGood {
			b.Fatal(r)
		}
	}
}

// BenchmarkWrite16 measures Execute of a 4 KiB WRITE(16) on a RAM LU.
func BenchmarkWrite16(b *testing.B) {
	s, _ := benchFixture(b)
	ctx := context.Background()
	cmd := &Command{Tag: 2, CDB: cdb16(0x8A, 0, 0, 8), DataOut: make([]byte, 4096)}
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if r := s.Execute(ctx, cmd); r.Status != sense.StatusGood {
			b.Fatal(r)
		}
	}
}

// BenchmarkRead16Parallel runs READ(16) from many goroutines, each with
// its own tag space.
func BenchmarkRead16Parallel(b *testing.B) {
	s, _ := benchFixture(b)
	ctx := context.Background()
	var next uint64
	var mu = make(chan struct{}, 1)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu <- struct{}{}
		next++
		base := next << 32
		<-mu
		buf := make([]byte, 4096)
		i := uint64(0)
		for pb.Next() {
			i++
			if r := s.Execute(ctx, &Command{Tag: base | i, CDB: cdb16(0x88, 0, i%1000*8, 8), DataIn: buf}); r.Status != sense.StatusGood {
				b.Fatal(r)
			}
		}
	})
}

// BenchmarkWrite16FileWriteThrough measures parallel 4 KiB WRITE(16) on a
// file LU with WCE=0: every write is flushed before status, and concurrent
// flushes are coalesced.
func BenchmarkWrite16FileWriteThrough(b *testing.B) {
	fb, err := backstore.OpenFile(b.TempDir()+"/bench.img", backstore.FileOptions{Size: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer fb.Close()
	lu, err := NewLogicalUnit(LUConfig{Backstore: fb})
	if err != nil {
		b.Fatal(err)
	}
	tg := NewTarget(TargetConfig{})
	tg.AddLUN(0, lu)
	s := tg.NewSession(nexusA)
	defer s.Close()
	ctx := context.Background()
	s.Execute(ctx, &Command{CDB: cdbTUR()})
	var mu = make(chan struct{}, 1)
	var next uint64
	b.SetBytes(4096)
	b.RunParallel(func(pb *testing.PB) {
		mu <- struct{}{}
		next++
		base := next << 32
		<-mu
		buf := make([]byte, 4096)
		i := uint64(0)
		for pb.Next() {
			i++
			if r := s.Execute(ctx, &Command{Tag: base | i, CDB: cdb16(0x8A, 0, i%1000*8, 8), DataOut: buf}); r.Status != sense.StatusGood {
				b.Fatal(r)
			}
		}
	})
}
