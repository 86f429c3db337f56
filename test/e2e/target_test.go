// Package e2e holds the end-to-end tests: the initiator library against the
// real target engine (srp/target + the scsi core + a RAM backstore) over
// rdma/loopback and over rdma/iwarp on 127.0.0.1. run.sh drives the
// srptd/srpctl programs.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

const guid = 0x0002c90300a1b2c3

// core adapts the scsi.Target to the SRP target's Core and counts the
// SYNCHRONIZE CACHE commands that reach it.
type core struct {
	t     *scsi.Target
	syncs *atomic.Int64
}

func (c core) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return countingSession{c.t.OpenSession(n, v), c.syncs}, nil
}

type countingSession struct {
	scsi.Session
	syncs *atomic.Int64
}

func (s countingSession) count(cmd *scsi.Command) {
	if len(cmd.CDB) > 0 && (cmd.CDB[0] == 0x35 || cmd.CDB[0] == 0x91) {
		s.syncs.Add(1)
	}
}

func (s countingSession) Execute(ctx context.Context, cmd *scsi.Command) scsi.Result {
	s.count(cmd)
	return s.Session.Execute(ctx, cmd)
}

func (s countingSession) Submit(ctx context.Context, cmd *scsi.Command, c scsi.Completer) (scsi.Result, bool) {
	s.count(cmd)
	return s.Session.Submit(ctx, cmd, c)
}

type env struct {
	syncs  atomic.Int64 // SYNCHRONIZE CACHE (10) and (16) executed
	port   *target.Port
	addr   string
	iDev   rdma.Device
	blocks uint64
}

func logger() *slog.Logger {
	if os.Getenv("E2E_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startTarget serves a target with LUN 0 (RAM, 64 MiB, 512-byte blocks) and
// LUN 1 (RAM, 16 MiB, 4096-byte blocks) on tdev at addr.
func startTarget(t testing.TB, tdev, idev rdma.Device, addr string) *env {
	t.Helper()
	st := scsi.NewTarget(scsi.TargetConfig{Logger: logger()})
	for i, c := range []struct {
		size int64
		bs   uint32
	}{{64 << 20, 512}, {16 << 20, 4096}} {
		lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: backstore.NewRAM(c.size), BlockSize: c.bs, WriteCache: true, ThinProvisioning: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AddLUN(uint64(i), lu); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{iDev: idev, blocks: (64 << 20) / 512}
	port, err := target.NewPort(target.Config{ServiceGUID: guid, DemoMode: true, Logger: logger()}, tdev, core{st, &e.syncs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := tdev.Listen(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { port.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		cctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		port.Close(cctx)
		c2()
		<-done
		idev.Close()
		tdev.Close()
	})
	e.port, e.addr = port, ln.Addr().String()
	return e
}

func loopbackEnv(t *testing.T) *env {
	n := loopback.NewNetwork()
	return startTarget(t, n.NewDevice("target"), n.NewDevice("initiator"), "")
}

func iwarpEnv(t *testing.T) *env {
	return startTarget(t, iwarp.NewDevice(iwarp.Config{Logger: logger()}), iwarp.NewDevice(iwarp.Config{Logger: logger()}), "127.0.0.1:0")
}

func ctxFor(t *testing.T) context.Context {
	d := 60 * time.Second
	if dl, ok := t.Deadline(); ok && time.Until(dl)-2*time.Second < d {
		d = time.Until(dl) - 2*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) dial(t *testing.T, tune func(*initiator.Options)) *initiator.Session {
	t.Helper()
	// A short reconnect delay: a channel lost to a transport fault under
	// test load recovers within the test's time.
	o := initiator.Options{Dest: e.addr, IDExt: guid, IOCGUID: guid, InitiatorExt: 7, Logger: logger(), ReconnectDelay: 200 * time.Millisecond}
	if tune != nil {
		tune(&o)
	}
	s, err := initiator.Dial(ctxFor(t), e.iDev, o)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var transports = []struct {
	name string
	env  func(*testing.T) *env
}{{"loopback", loopbackEnv}, {"iwarp", iwarpEnv}}

func TestDataIntegrity(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := tr.env(t)
			s := e.dial(t, func(o *initiator.Options) { o.ChCount = 2 })
			ctx := ctxFor(t)
			if err := s.TestUnitReady(ctx, 0); err != nil { // clears the power-on unit attention
				t.Fatal(err)
			}
			// Shapes: immediate, direct, large direct, indirect scatter lists.
			shapes := [][]int{{512}, {8192}, {8704}, {256 << 10}, {4096, 512, 65536}, {512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512}}
			lba := uint64(100)
			for _, sh := range shapes {
				var out [][]byte
				var all []byte
				for _, n := range sh {
					b := make([]byte, n)
					rand.Read(b)
					out = append(out, b)
					all = append(all, b...)
				}
				blocks := uint32(len(all) / 512)
				if res, err := s.Execute(ctx, &initiator.Command{CDB: rw16(0x8a, lba, blocks), DataOut: out}); err != nil || res.Err() != nil {
					t.Fatalf("write %v: %v %v", sh, err, res.Err())
				}
				in := make([][]byte, len(sh))
				for i := range sh {
					in[i] = make([]byte, sh[len(sh)-1-i]) // a different scatter shape
				}
				res, err := s.Execute(ctx, &initiator.Command{CDB: rw16(0x88, lba, blocks), DataIn: in})
				if err != nil || res.Status != 0 || res.DataInLen != len(all) {
					t.Fatalf("read %v: %v status %#x len %d", sh, err, res.Status, res.DataInLen)
				}
				if !bytes.Equal(bytes.Join(in, nil), all) {
					t.Fatalf("shape %v: data differs", sh)
				}
				lba += uint64(blocks)
			}
		})
	}
}

func rw16(op byte, lba uint64, blocks uint32) []byte {
	c := make([]byte, 16)
	initiator.PutRW16(c, op == 0x8a, lba, blocks, false)
	return c
}

func TestConcurrentQD64(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := tr.env(t)
			s := e.dial(t, func(o *initiator.Options) { o.ChCount = 2 })
			ctx := ctxFor(t)
			const workers, per = 64, 25
			var wg sync.WaitGroup
			errc := make(chan error, workers)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					buf, got := make([]byte, 4096*(1+w%4)), make([]byte, 4096*(1+w%4))
					lba := uint64(w) * 64
					for i := 0; i < per; i++ {
						rand.Read(buf)
						if err := s.Write16(ctx, 0, lba, buf, 512, i%3 == 0); err != nil {
							errc <- err
							return
						}
						if err := s.Read16(ctx, 0, lba, got, 512, false); err != nil {
							errc <- err
							return
						}
						if !bytes.Equal(buf, got) {
							errc <- fmt.Errorf("worker %d: data differs", w)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
		})
	}
}

func TestSCSICommands(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := tr.env(t)
			s := e.dial(t, nil)
			ctx := ctxFor(t)
			luns, err := s.ReportLUNs(ctx)
			if err != nil || len(luns) != 2 || luns[0] != initiator.LUN(0) || luns[1] != initiator.LUN(1) {
				t.Fatalf("REPORT LUNS %x %v", luns, err)
			}
			b, err := s.Inquiry(ctx, 0, false, 0, 96)
			if err != nil {
				t.Fatal(err)
			}
			inq, err := initiator.ParseInquiry(b)
			if err != nil || inq.Vendor != "GOSRP" || inq.DeviceType != 0 {
				t.Errorf("INQUIRY %+v %v", inq, err)
			}
			if _, err := s.Inquiry(ctx, 0, true, 0x83, 255); err != nil {
				t.Errorf("VPD 83h: %v", err)
			}
			c, err := s.ReadCapacity16(ctx, initiator.LUN(1))
			if err != nil || c.BlockSize != 4096 || c.Blocks() != (16<<20)/4096 {
				t.Errorf("READ CAPACITY(16) lun 1: %+v %v", c, err)
			}
			// Past the end: ILLEGAL REQUEST, LBA OUT OF RANGE 21h/00h.
			err = s.Read16(ctx, 0, e.blocks, make([]byte, 512), 512, false)
			if !initiator.IsSense(err, sense.KeyIllegalRequest, 0x21, 0) {
				t.Errorf("read past the end: %v", err)
			}
			if err := s.SynchronizeCache(ctx, 0); err != nil {
				t.Errorf("SYNCHRONIZE CACHE: %v", err)
			}
			// WRITE SAME then read back.
			blk := bytes.Repeat([]byte{0xa5}, 512)
			if err := s.WriteSame16(ctx, 0, 2000, 8, blk, false); err != nil {
				t.Fatalf("WRITE SAME: %v", err)
			}
			got := make([]byte, 8*512)
			if err := s.Read16(ctx, 0, 2000, got, 512, false); err != nil || !bytes.Equal(got, bytes.Repeat(blk, 8)) {
				t.Errorf("after WRITE SAME: %v", err)
			}
			// COMPARE AND WRITE: a match writes, a mismatch is MISCOMPARE.
			nb := bytes.Repeat([]byte{0x5a}, 512)
			if err := s.CompareAndWrite(ctx, 0, 2000, 1, blk, nb); err != nil {
				t.Errorf("COMPARE AND WRITE (match): %v", err)
			}
			err = s.CompareAndWrite(ctx, 0, 2000, 1, blk, nb)
			var se *initiator.SenseError
			if !errors.As(err, &se) || se.Key != sense.KeyMiscompare || se.ASC != 0x1d {
				t.Errorf("COMPARE AND WRITE (mismatch): %v", err)
			}
			// UNMAP, then the blocks read as zeros (thin provisioning, LBPRZ).
			if err := s.Unmap(ctx, 0, []initiator.Extent{{LBA: 2000, Blocks: 8}}); err != nil {
				t.Errorf("UNMAP: %v", err)
			}
			// Persistent reservations: register a key, read it back.
			if err := s.PersistentReserveOut(ctx, 0, initiator.PROut{Action: 0, SAKey: 0xabcdef}); err != nil {
				t.Errorf("PR OUT REGISTER: %v", err)
			}
			keys, err := s.PersistentReserveIn(ctx, 0, 0, 256)
			if err != nil || len(keys) < 16 || !bytes.Equal(keys[8:16], []byte{0, 0, 0, 0, 0, 0xab, 0xcd, 0xef}) {
				t.Errorf("PR IN READ KEYS %x %v", keys, err)
			}
		})
	}
}

func TestTaskManagement(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := tr.env(t)
			s := e.dial(t, nil)
			ctx := ctxFor(t)
			if err := s.TestUnitReady(ctx, 0); err != nil { // clears the power-on unit attention
				t.Fatal(err)
			}
			if err := s.LUNReset(ctx, 0); err != nil {
				t.Fatalf("LUN RESET: %v", err)
			}
			// After the reset the nexus sees a unit attention 29h/03h once
			// (SAM-5 §6.3.3; LIO: BUS DEVICE RESET FUNCTION OCCURRED).
			tur := &initiator.Command{CDB: make([]byte, 6)}
			res, err := s.Execute(ctx, tur)
			if err != nil || !initiator.IsSense(res.Err(), sense.KeyUnitAttention, 0x29, 0x03) {
				t.Errorf("TEST UNIT READY after reset: %v %v", err, res.Err())
			}
			if res, err := s.Execute(ctx, tur); err != nil || res.Err() != nil {
				t.Errorf("second TEST UNIT READY: %v %v", err, res.Err())
			}
			// ABORT TASK of a tag nobody uses: LIO answers FUNCTION FAILED (5).
			err = s.AbortTask(ctx, 0, 0x00000000deadbeef)
			var te *initiator.TMFError
			if !errors.As(err, &te) || te.Response != 5 {
				t.Errorf("ABORT TASK of an unknown tag: %v", err)
			}
		})
	}
}

func TestReconnectAfterTargetDropsChannel(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := tr.env(t)
			s := e.dial(t, func(o *initiator.Options) {
				o.ChCount = 2
				o.ReconnectDelay = 50 * time.Millisecond
			})
			ctx := ctxFor(t)
			data := make([]byte, 64<<10)
			rand.Read(data)
			if err := s.Write16(ctx, 0, 5000, data, 512, true); err != nil {
				t.Fatal(err)
			}
			// Keep I/O running while the target logs the channels out.
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			stop := make(chan struct{})
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got := make([]byte, len(data))
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := s.Read16(ctx, 0, 5000, got, 512, false); err != nil {
							errc <- err
							return
						}
						if !bytes.Equal(got, data) {
							errc <- errors.New("data differs")
							return
						}
					}
				}()
			}
			e.port.SetEnabled(false)
			for s.State() == initiator.StateRunning {
				select {
				case <-ctx.Done():
					t.Fatal("the session never saw the logout")
				case <-time.After(5 * time.Millisecond):
				}
			}
			e.port.SetEnabled(true)
			for s.State() != initiator.StateRunning {
				select {
				case <-ctx.Done():
					t.Fatalf("no reconnect: state %v", s.State())
				case <-time.After(5 * time.Millisecond):
				}
			}
			time.Sleep(100 * time.Millisecond) // let I/O run on the new channels
			close(stop)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("I/O across the reconnect: %v", err)
			}
			got := make([]byte, len(data))
			if err := s.Read16(ctx, 0, 5000, got, 512, false); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after reconnect: %v", err)
			}
		})
	}
}
