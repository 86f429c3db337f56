package target

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/initiator"
)

// BenchmarkIWARP4K runs 4 KiB READ(16) and WRITE(16) commands, 16 in
// flight, from srp/initiator to a Port over pure-Go iWARP on 127.0.0.1, the
// SCSI core and a RAM logical unit: the whole data path of srpctl ->
// srptd in one process. allocs/op counts every allocation of both ends per
// command (the initiator's command path allocates none:
// srp/initiator.TestCommandPathAllocs).
func BenchmarkIWARP4K(b *testing.B) {
	for _, op := range []struct {
		name string
		code byte
	}{{"read", 0x88}, {"write", 0x8a}} {
		b.Run(op.name, func(b *testing.B) {
			ctx, s := iwarpStack(b)
			const depth = 16
			bufs := make([]*initiator.Buffer, depth)
			var err error
			for i := range bufs {
				if bufs[i], err = s.NewBuffer(4096, op.code == 0x88); err != nil {
					b.Fatal(err)
				}
			}
			run := func(n int) {
				var wg sync.WaitGroup
				for w := range depth {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cmd := initiator.Command{CDB: rw16cdb(op.code, uint64(w*8)), Buffer: bufs[w], Length: 4096}
						for i := w; i < n; i += depth {
							if r, err := s.Execute(ctx, &cmd); err != nil || r.Status != 0 {
								b.Errorf("command: %v, status %#x", err, r.Status)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			run(4 * depth)
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
		})
	}
}

// TestIWARPAllocs holds the whole 4 KiB READ and WRITE path of srpctl ->
// srptd (initiator, both iWARP ends, SRP target, SCSI core, RAM) to at most
// 4 allocations per command; the target engine's own share is the SCSI
// core's task (BenchmarkIWARP4K).
func TestIWARPAllocs(t *testing.T) {
	ctx, s := iwarpStack(t)
	for _, code := range []byte{0x88, 0x8a} {
		buf, err := s.NewBuffer(4096, code == 0x88)
		if err != nil {
			t.Fatal(err)
		}
		cmd := initiator.Command{CDB: rw16cdb(code, 64), Buffer: buf, Length: 4096}
		exec := func() {
			if r, err := s.Execute(ctx, &cmd); err != nil || r.Status != 0 {
				t.Fatalf("command %#x: %v, status %#x", code, err, r.Status)
			}
		}
		for range 64 { // warm the pools
			exec()
		}
		if n := testing.AllocsPerRun(500, exec); n > 4 {
			t.Errorf("command %#x: %.1f allocations per command over the whole stack, want at most 4", code, n)
		}
	}
}

// rw16cdb is a READ(16) or WRITE(16) of 8 blocks at lba.
func rw16cdb(code byte, lba uint64) []byte {
	cdb := make([]byte, 16)
	cdb[0] = code
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], 8)
	return cdb
}

// iwarpStack starts a Port over pure-Go iWARP on 127.0.0.1 with the SCSI
// core and a 64 MiB RAM logical unit at LUN 0, and dials it with
// srp/initiator (one channel); the power-on unit attention is consumed.
func iwarpStack(t testing.TB) (context.Context, *initiator.Session) {
	return iwarpStackOn(t, backstore.NewRAM(64<<20), 0, 0)
}

// iwarpStackOn is iwarpStack with the logical unit on bs, the initiator's
// max_sect (0: its default) and the port's MaxRDMASize (0: its default).
func iwarpStackOn(t testing.TB, bs backstore.Backstore, maxSect, maxRDMA int) (context.Context, *initiator.Session) {
	return iwarpStackChannels(t, bs, maxSect, maxRDMA, 1)
}

// iwarpStackChannels is iwarpStackOn with chCount RDMA channels.
func iwarpStackChannels(t testing.TB, bs backstore.Backstore, maxSect, maxRDMA, chCount int) (context.Context, *initiator.Session) {
	return iwarpStackWith(t, iwarpOpts{bs: bs, maxSect: maxSect, maxRDMA: maxRDMA, channels: chCount})
}

// iwarpOpts is what iwarpStackWith varies; zero fields take the defaults.
type iwarpOpts struct {
	bs       backstore.Backstore // the logical unit's medium (required)
	thin     bool                // the logical unit is thin provisioned (LBPME, LBPRZ)
	maxSect  int                 // initiator max_sect, 512-byte sectors (0: its default)
	maxRDMA  int                 // the port's MaxRDMASize, bytes (0: its default)
	channels int                 // RDMA channels (0: 1)
	noImm    bool                // initiator without immediate data (use_imm_data=0)
	// reconnect is the initiator's reconnect_delay (0: its default).
	reconnect time.Duration
	// log is the port's logger (nil: discard); the initiator's discards.
	log *slog.Logger
}

// iwarpStackWith is iwarpStack as o describes.
func iwarpStackWith(t testing.TB, o iwarpOpts) (context.Context, *initiator.Session) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := scsi.NewTarget(scsi.TargetConfig{})
	lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: o.bs, BlockSize: 512, ThinProvisioning: o.thin})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddLUN(0, lu); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	plog := o.log
	if plog == nil {
		plog = log
	}
	tdev := iwarp.NewDevice(iwarp.Config{Logger: log, CompleteOnTransmit: true})
	t.Cleanup(func() { _ = tdev.Close() })
	port, err := NewPort(Config{ServiceGUID: testGUID, DemoMode: true, MaxRDMASize: o.maxRDMA, Logger: plog}, tdev, scsiCore{st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tdev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = port.Serve(ctx, l); close(served) }()
	t.Cleanup(func() {
		_ = port.Close(context.Background())
		_ = l.Close()
		cancel()
		<-served
	})
	idev := iwarp.NewDevice(iwarp.Config{Logger: log, CompleteOnTransmit: true})
	t.Cleanup(func() { _ = idev.Close() })
	_, portStr, _ := net.SplitHostPort(l.Addr().String())
	s, err := initiator.Dial(ctx, idev, initiator.Options{IDExt: testGUID, IOCGUID: testGUID,
		Dest: "127.0.0.1:" + portStr, ChCount: o.channels, MaxSect: o.maxSect, NoImmData: o.noImm,
		ReconnectDelay: o.reconnect, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// The power-on unit attention.
	for range 2 {
		_, _ = s.Execute(ctx, &initiator.Command{CDB: make([]byte, 6)})
	}
	return ctx, s
}
