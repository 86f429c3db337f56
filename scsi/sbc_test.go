package scsi

import (
	"bytes"
	"context"
	"sync"
	"syscall"
	"testing"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/scsi/sense"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestReadWriteAllSizes(t *testing.T) {
	f := newFixture(t, LUConfig{})
	type rw struct {
		name   string
		rd, wr func(lba uint64, n uint32) []byte
	}
	six := func(op byte) func(uint64, uint32) []byte {
		return func(lba uint64, n uint32) []byte {
			return []byte{op, byte(lba >> 16 & 0x1F), byte(lba >> 8), byte(lba), byte(n), 0}
		}
	}
	ten := func(op byte) func(uint64, uint32) []byte {
		return func(lba uint64, n uint32) []byte { return cdb10(op, 0, uint32(lba), uint16(n)) }
	}
	twelve := func(op byte) func(uint64, uint32) []byte {
		return func(lba uint64, n uint32) []byte {
			return []byte{op, 0, byte(lba >> 24), byte(lba >> 16), byte(lba >> 8), byte(lba), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 0, 0}
		}
	}
	sixteen := func(op byte) func(uint64, uint32) []byte {
		return func(lba uint64, n uint32) []byte { return cdb16(op, 0, lba, n) }
	}
	for i, c := range []rw{
		{"6", six(0x08), six(0x0A)},
		{"10", ten(0x28), ten(0x2A)},
		{"12", twelve(0xA8), twelve(0xAA)},
		{"16", sixteen(0x88), sixteen(0x8A)},
	} {
		lba := uint64(100 + 10*i)
		data := pattern(3*512, byte(i))
		f.good(c.wr(lba, 3), data)
		got := f.in(c.rd(lba, 3), 3*512)
		wantBytes(t, c.name, got, data)
		// Last block readable; one past the end is LBA OUT OF RANGE.
		f.in(c.rd(2047, 1), 512)
		wantSense(t, f.run(f.s, 0, c.rd(2047, 2), nil, 1024), sense.KeyIllegalRequest, 0x21, 0x00)
		wantSense(t, f.run(f.s, 0, c.wr(2048, 1), make([]byte, 512), 0), sense.KeyIllegalRequest, 0x21, 0x00)
	}
	// READ(6) transfer length 0 means 256 blocks (SBC-3 §5.13).
	r := f.run(f.s, 0, six(0x08)(0, 0), nil, 256*512)
	if r.Status != sense.StatusGood || r.DataInLen != 256*512 || r.DataInWanted != 256*512 {
		t.Fatalf("READ(6) len 0: %+v", r)
	}
	// READ(10) with length 0 transfers nothing.
	r = f.run(f.s, 0, cdb10(0x28, 0, 0, 0), nil, 0)
	if r.Status != sense.StatusGood || r.DataInLen != 0 {
		t.Fatalf("%+v", r)
	}
	// LBA + length overflowing 64 bits.
	wantSense(t, f.run(f.s, 0, cdb16(0x88, 0, ^uint64(0), 2), nil, 1024), sense.KeyIllegalRequest, 0x21, 0x00)
	// Data-out shorter than the transfer length: INVALID FIELD IN COMMAND IU.
	wantSense(t, f.run(f.s, 0, cdb16(0x8A, 0, 0, 2), make([]byte, 512), 0), sense.KeyIllegalRequest, 0x0E, 0x03)
	// Transfer beyond MAXIMUM TRANSFER LENGTH (16384 blocks): length field.
	wantField(t, f.run(f.s, 0, cdb16(0x88, 0, 0, 16385), nil, 0), 0x24, true, 10, -1)
	// Short data-in buffer: partial transfer, wanted reports the CDB's.
	r = f.run(f.s, 0, cdb16(0x88, 0, 100, 2), nil, 700)
	if r.Status != sense.StatusGood || r.DataInLen != 700 || r.DataInWanted != 1024 {
		t.Fatalf("%+v", r)
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t, LUConfig{ReadOnly: true})
	for _, cdb := range [][]byte{
		cdb16(0x8A, 0, 0, 1), cdb10(0x2A, 0, 0, 1), cdb16(0x93, 0, 0, 1), cdb16(0x89, 0, 0, 1)[:16],
	} {
		wantSense(t, f.run(f.s, 0, cdb, make([]byte, 512), 0), sense.KeyDataProtect, 0x27, 0x00)
	}
	// MODE SENSE reports WP.
	b := f.in([]byte{0x1A, 0x08, 0x3F, 0, 255, 0}, 255)
	if b[2] != 0x90 {
		t.Fatalf("device-specific %#x, want 90 (WP, DPOFUA)", b[2])
	}
}

func TestFaultMapping(t *testing.T) {
	fb := backstore.NewFault(backstore.NewRAM(1 << 20))
	f := newFixture(t, LUConfig{Backstore: fb})
	fb.Set(func(x *backstore.Fault) { x.WriteErr = syscall.ENOSPC })
	wantSense(t, f.run(f.s, 0, cdb16(0x8A, 0, 5, 1), make([]byte, 512), 0), sense.KeyDataProtect, 0x27, 0x07)
	fb.Set(func(x *backstore.Fault) { x.WriteErr = syscall.EIO })
	s := wantSense(t, f.run(f.s, 0, cdb16(0x8A, 0, 5, 1), make([]byte, 512), 0), sense.KeyMediumError, 0x0C, 0x00)
	if !s.InfoValid || s.Info != 5 {
		t.Fatalf("INFORMATION %v %d, want LBA 5", s.InfoValid, s.Info)
	}
	fb.Set(func(x *backstore.Fault) { x.WriteErr, x.ReadErr = nil, syscall.EIO })
	wantSense(t, f.run(f.s, 0, cdb16(0x88, 0, 7, 1), nil, 512), sense.KeyMediumError, 0x11, 0x00)
	wantSense(t, f.run(f.s, 0, cdb16(0x8F, 0, 7, 1), nil, 0), sense.KeyMediumError, 0x11, 0x00) // VERIFY BYTCHK=0 reads
	fb.Set(func(x *backstore.Fault) { x.ReadErr, x.SyncErr = nil, syscall.EIO })
	wantSense(t, f.run(f.s, 0, cdb16(0x91, 0, 0, 0), nil, 0), sense.KeyMediumError, 0x0C, 0x00)
	fb.Set(func(x *backstore.Fault) { x.SyncErr = nil })
	f.good(cdb16(0x91, 0, 0, 0), nil)
}

// syncCounter counts Sync calls after each write to prove WCE/FUA
// durability.
func TestWriteCacheAndFUA(t *testing.T) {
	fb := backstore.NewFault(backstore.NewRAM(1 << 20))
	f := newFixture(t, LUConfig{Backstore: fb, WriteCache: true})
	// WCE=1: a plain write is not flushed; FUA is.
	n0 := fb.SyncCount()
	f.good(cdb16(0x8A, 0, 1, 1), make([]byte, 512))
	if fb.SyncCount() != n0 {
		t.Fatal("WCE=1 write flushed")
	}
	f.good(cdb16(0x8A, 0x08, 1, 1), make([]byte, 512))
	if fb.SyncCount() != n0+1 {
		t.Fatal("FUA write not flushed")
	}
	// MODE SELECT(6) caching page with WCE=0: every write is flushed.
	cache := hx(`08 12 00 00 00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 00`)
	f.good([]byte{0x15, 0x10, 0, 0, byte(4 + len(cache)), 0}, append(hx(`00 00 00 00`), cache...))
	if f.lu.wce.Load() {
		t.Fatal("WCE still set")
	}
	n1 := fb.SyncCount()
	f.good(cdb16(0x8A, 0, 1, 1), make([]byte, 512))
	f.good(cdb10(0x2A, 0, 1, 1), make([]byte, 512))
	if fb.SyncCount() != n1+2 {
		t.Fatalf("WCE=0 writes: %d syncs, want 2", fb.SyncCount()-n1)
	}
	// MODE SENSE current caching page reflects WCE=0.
	got := f.in([]byte{0x1A, 0x08, 0x08, 0, 255, 0}, 255)
	wantBytes(t, "caching page", got, append(hx(`17 00 10 00`), cache...))
}

func TestCompareAndWrite(t *testing.T) {
	f := newFixture(t, LUConfig{})
	old := pattern(512, 1)
	f.good(cdb16(0x8A, 0, 10, 1), old)
	caw := make([]byte, 16)
	caw[0], caw[9], caw[13] = 0x89, 10, 1
	nw := pattern(512, 99)
	f.good(caw, append(append([]byte{}, old...), nw...))
	wantBytes(t, "after CAW", f.in(cdb16(0x88, 0, 10, 1), 512), nw)
	// Miscompare: INFORMATION is the offset of the first differing byte.
	bad := append([]byte{}, nw...)
	bad[77] ^= 0xFF
	s := wantSense(t, f.run(f.s, 0, caw, append(bad, old...), 0), sense.KeyMiscompare, 0x1D, 0x00)
	if !s.InfoValid || s.Info != 77 {
		t.Fatalf("INFORMATION %v %d, want 77", s.InfoValid, s.Info)
	}
	wantBytes(t, "unchanged", f.in(cdb16(0x88, 0, 10, 1), 512), nw)
	// Wrong data-out length.
	wantSense(t, f.run(f.s, 0, caw, nw, 0), sense.KeyIllegalRequest, 0x0E, 0x03)
}

// TestCompareAndWriteAtomic increments a counter in block 0 from many
// goroutines with COMPARE AND WRITE retries; a non-atomic compare and write
// would lose increments.
func TestCompareAndWriteAtomic(t *testing.T) {
	f := newFixture(t, LUConfig{})
	const workers, per = 8, 40
	var wg sync.WaitGroup
	var tag sync.Mutex
	next := uint64(1000)
	newTag := func() uint64 { tag.Lock(); defer tag.Unlock(); next++; return next }
	ctx := testCtx(t)
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for {
					if ctx.Err() != nil {
						errs <- "deadline"
						return
					}
					cur := make([]byte, 512)
					r := f.s.Execute(ctx, &Command{Tag: newTag(), CDB: cdb16(0x88, 0, 0, 1), DataIn: cur})
					if r.Status != sense.StatusGood {
						errs <- "read failed"
						return
					}
					nw := make([]byte, 512)
					v := be32(cur) + 1
					nw[0], nw[1], nw[2], nw[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
					caw := make([]byte, 16)
					caw[0], caw[13] = 0x89, 1
					r = f.s.Execute(ctx, &Command{Tag: newTag(), CDB: caw, DataOut: append(cur, nw...)})
					if r.Status == sense.StatusGood {
						break
					}
					if s, _ := sense.Parse(r.Sense); s.Key != sense.KeyMiscompare {
						errs <- "unexpected sense"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if got := be32(f.in(cdb16(0x88, 0, 0, 1), 512)); got != workers*per {
		t.Fatalf("counter %d, want %d", got, workers*per)
	}
}

func TestVerify(t *testing.T) {
	f := newFixture(t, LUConfig{})
	data := pattern(1024, 3)
	f.good(cdb16(0x8A, 0, 20, 2), data)
	f.good(cdb16(0x8F, 0x02, 20, 2), data) // BYTCHK=01
	bad := append([]byte{}, data...)
	bad[600] ^= 1
	s := wantSense(t, f.run(f.s, 0, cdb16(0x8F, 0x02, 20, 2), bad, 0), sense.KeyMiscompare, 0x1D, 0x00)
	if s.Info != 600 {
		t.Fatalf("INFORMATION %d, want 600", s.Info)
	}
	f.good(cdb10(0x2F, 0, 20, 2), nil) // BYTCHK=00
	// BYTCHK=11: one block compared against each block.
	f.good(cdb16(0x8A, 0, 40, 3), bytes.Repeat(data[:512], 3))
	f.good(cdb16(0x8F, 0x06, 40, 3), data[:512])
	s = wantSense(t, f.run(f.s, 0, cdb16(0x8F, 0x06, 39, 3), data[:512], 0), sense.KeyMiscompare, 0x1D, 0x00)
	if s.Info != 0 {
		t.Fatalf("INFORMATION %d", s.Info)
	}
	// BYTCHK=10 is reserved.
	wantField(t, f.run(f.s, 0, cdb16(0x8F, 0x04, 40, 1), nil, 0), 0x24, true, 1, 2)
	// WRITE AND VERIFY(10) writes.
	f.good(cdb10(0x2E, 0x02, 60, 1), data[:512])
	wantBytes(t, "W&V", f.in(cdb16(0x88, 0, 60, 1), 512), data[:512])
}

func TestWriteSameUnmapLBAStatus(t *testing.T) {
	ram := backstore.NewRAM(16 << 20) // 32768 blocks
	f := newFixture(t, LUConfig{Backstore: ram, ThinProvisioning: true})
	blk := pattern(512, 5)
	f.good(cdb16(0x93, 0, 128, 256), blk) // WRITE SAME(16), 256 blocks from 128
	got := f.in(cdb16(0x88, 0, 128, 256), 256*512)
	wantBytes(t, "write same", got, bytes.Repeat(blk, 256))
	// WRITE SAME(10).
	f.good(cdb10(0x41, 0, 1000, 3), blk)
	wantBytes(t, "write same 10", f.in(cdb16(0x88, 0, 1000, 3), 3*512), bytes.Repeat(blk, 3))
	// NUMBER OF LOGICAL BLOCKS 0 is rejected (WSNZ=1).
	wantField(t, f.run(f.s, 0, cdb16(0x93, 0, 0, 0), blk, 0), 0x24, true, 10, -1)
	// ANCHOR is not supported (byte 1 bit 4).
	wantField(t, f.run(f.s, 0, cdb16(0x93, 0x10, 0, 1), blk, 0), 0x24, true, 1, 4)

	// GET LBA STATUS from 0 (the RAM backstore tracks 4 KiB = 8 blocks):
	// 0..127 deallocated, 128..383 mapped, deallocated up to 1000, the
	// 8 blocks of the page holding 1000..1002 mapped, deallocated to the
	// end (32768).
	gls := f.in(cdb16(0x9E, 0x12, 0, 256), 256)
	want := hx(`00000054 00000000` +
		`0000000000000000 00000080 01 000000` +
		`0000000000000080 00000100 00 000000` +
		`0000000000000180 00000268 01 000000` +
		`00000000000003e8 00000008 00 000000` +
		`00000000000003f0 00007c10 01 000000`)
	wantBytes(t, "GET LBA STATUS", gls[:len(want)], want)

	// UNMAP 128..255 (one chunk) and 300 (part of a chunk).
	param := hx(`0022 0020 00000000 0000000000000080 00000080 00000000 000000000000012c 00000001 00000000`)
	f.good([]byte{0x42, 0, 0, 0, 0, 0, 0, 0, byte(len(param)), 0}, param)
	wantBytes(t, "unmapped reads zero", f.in(cdb16(0x88, 0, 128, 1), 512), make([]byte, 512))
	wantBytes(t, "partial unmap zero", f.in(cdb16(0x88, 0, 300, 1), 512), make([]byte, 512))
	wantBytes(t, "neighbour kept", f.in(cdb16(0x88, 0, 301, 1), 512), blk)
	gls = f.in(cdb16(0x9E, 0x12, 0, 128), 256)
	if gls[8+12] != 1 || be32(gls[8+8:]) != 256 {
		t.Fatalf("after unmap: % x", gls[:40])
	}
	// WRITE SAME with UNMAP and a zero block deallocates; NDOB too.
	f.good(cdb16(0x93, 0x08, 256, 128), make([]byte, 512))
	f.good(cdb16(0x93, 0x09, 896, 128), nil)
	wantBytes(t, "NDOB", f.in(cdb16(0x88, 0, 1000, 3), 3*512), make([]byte, 3*512))
	if ram.AllocatedBytes() != 0 {
		t.Fatalf("allocated %d after unmapping everything", ram.AllocatedBytes())
	}
	// Parameter list errors.
	wantSense(t, f.run(f.s, 0, []byte{0x42, 0, 0, 0, 0, 0, 0, 0, 4, 0}, make([]byte, 4), 0), sense.KeyIllegalRequest, 0x1A, 0x00)
	oob := hx(`0016 0010 00000000 0000000000007fff 00000002 00000000`)
	wantSense(t, f.run(f.s, 0, []byte{0x42, 0, 0, 0, 0, 0, 0, 0, byte(len(oob)), 0}, oob, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	// GET LBA STATUS beyond capacity.
	wantSense(t, f.run(f.s, 0, cdb16(0x9E, 0x12, 32768, 256), nil, 256), sense.KeyIllegalRequest, 0x21, 0x00)
}

func TestUnmapWithoutThin(t *testing.T) {
	f := newFixture(t, LUConfig{})
	param := hx(`0016 0010 00000000 0000000000000000 00000001 00000000`)
	wantSense(t, f.run(f.s, 0, []byte{0x42, 0, 0, 0, 0, 0, 0, 0, byte(len(param)), 0}, param, 0), sense.KeyIllegalRequest, 0x20, 0x00)
	// GET LBA STATUS reports everything mapped.
	wantBytes(t, "mapped", f.in(cdb16(0x9E, 0x12, 5, 64), 64), hx(`00000014 00000000 0000000000000005 000007fb 00 000000`))
}

func TestSyncPrefetchStartStop(t *testing.T) {
	f := newFixture(t, LUConfig{})
	f.good(cdb10(0x35, 0x02, 0, 0), nil)
	f.good(cdb16(0x91, 0, 2047, 1), nil)
	wantSense(t, f.run(f.s, 0, cdb16(0x91, 0, 2047, 2), nil, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	f.good(cdb10(0x34, 0, 0, 8), nil)
	wantSense(t, f.run(f.s, 0, cdb16(0x90, 0, 2048, 1), nil, 0), sense.KeyIllegalRequest, 0x21, 0x00)
	f.good([]byte{0x1B, 0, 0, 0, 0x01, 0}, nil)
	f.good([]byte{0x1B, 0x01, 0, 0, 0x00, 0}, nil)
	wantField(t, f.run(f.s, 0, []byte{0x1B, 0, 0, 0, 0x02, 0}, nil, 0), 0x24, true, 4, 1)
	f.good([]byte{0x1E, 0, 0, 0, 1, 0}, nil)
	f.good([]byte{0x1E, 0, 0, 0, 0, 0}, nil)
	wantField(t, f.run(f.s, 0, []byte{0x1E, 0, 0, 0, 2, 0}, nil, 0), 0x24, true, 4, 1)
}

func TestResize(t *testing.T) {
	ram := backstore.NewRAM(1 << 20)
	f := newFixture(t, LUConfig{Backstore: ram})
	s2 := f.tg.NewSession(nexusB)
	defer s2.Close()
	f.run(s2, 0, cdbTUR(), nil, 0) // consume POWER ON
	if err := f.lu.Resize(2 << 20); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Session{f.s, s2} {
		// INQUIRY does not consume the UA; the next TUR reports it.
		f.run(s, 0, cdbInquiry(false, 0, 36), nil, 36)
		wantSense(t, f.run(s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x09)
	}
	wantBytes(t, "RC10", f.in([]byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8), hx(`00 00 0f ff 00 00 02 00`))
	f.in(cdb16(0x88, 0, 4095, 1), 512)
	// Shrinking cuts access.
	if err := f.lu.Resize(512 << 10); err != nil {
		t.Fatal(err)
	}
	wantSense(t, f.run(f.s, 0, cdbTUR(), nil, 0), sense.KeyUnitAttention, 0x2A, 0x09)
	wantSense(t, f.run(f.s, 0, cdb16(0x88, 0, 1024, 1), nil, 512), sense.KeyIllegalRequest, 0x21, 0x00)
}

func TestOverlappedTag(t *testing.T) {
	blk := newBlockingStore(1 << 20)
	f := newFixture(t, LUConfig{Backstore: blk})
	ctx := testCtx(t)
	blk.block(7)
	done := make(chan Result, 1)
	go func() {
		done <- f.s.Execute(ctx, &Command{Tag: 55, CDB: cdb16(0x88, 0, 7, 1), DataIn: make([]byte, 512)})
	}()
	blk.waitStarted(t, 7)
	r := f.s.Execute(ctx, &Command{Tag: 55, CDB: cdbTUR()})
	wantSense(t, r, sense.KeyAbortedCommand, 0x4E, 0x00)
	blk.release(7)
	if r := <-done; r.Status != sense.StatusGood {
		t.Fatalf("%+v", r)
	}
	_ = context.Background
}
