package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosrp/gosrp/srp/initiator"
)

// Verified block layout, written into every logical block by bench --verify
// (in the spirit of fio's verify=crc32c header, not its byte format): the
// header names the block's own LBA, the run's seed and the pass that wrote
// it, so data that landed at the wrong LBA (misplaced), data left from an
// earlier pass (stale, a lost write) and corrupted bytes are all told apart.
//
//	offset  size  field
//	0       8     magic "gosrpVFY"
//	8       8     seed (big-endian): the run's identity, --verify-seed
//	16      8     LBA (big-endian): the logical block this block was written to
//	24      8     generation (big-endian): the pass, 1..--loops
//	32      4     CRC32C (Castagnoli, big-endian) of the whole block with
//	              these 4 bytes zero
//	36      -     pseudo-random payload derived from seed, LBA and generation
const (
	verifyMagic     = "gosrpVFY"
	verifyCRCOffset = 32
	verifyHeaderLen = 36
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fillVerifyBlock writes the verified block for (seed, lba, gen) into b, one
// logical block (at least verifyHeaderLen bytes).
func fillVerifyBlock(b []byte, seed, lba, gen uint64) {
	copy(b, verifyMagic)
	binary.BigEndian.PutUint64(b[8:], seed)
	binary.BigEndian.PutUint64(b[16:], lba)
	binary.BigEndian.PutUint64(b[24:], gen)
	clear(b[verifyCRCOffset:verifyHeaderLen])
	rng := rand.NewPCG(seed^(lba*0x9e3779b97f4a7c15), gen)
	p := b[verifyHeaderLen:]
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, rng.Uint64())
		p = p[8:]
	}
	for i := range p {
		p[i] = byte(rng.Uint64())
	}
	binary.BigEndian.PutUint32(b[verifyCRCOffset:], crc32.Checksum(b, castagnoli))
}

// verifyKind classifies a block that failed verification.
type verifyKind int

const (
	verifyNoHeader  verifyKind = iota // no magic: never written by this tool, or overwritten
	verifyCorrupt                     // the CRC32C does not match the block's bytes
	verifyForeign                     // written by a run with another seed
	verifyMisplaced                   // a valid block of another LBA
	verifyStale                       // this LBA's block from another pass
)

// verifyError is one block that failed verification.
type verifyError struct {
	Kind      verifyKind
	LBA       uint64 // where the block was read from
	Seed, Gen uint64 // expected
	GotSeed   uint64 // found in the header (foreign)
	GotLBA    uint64 // found in the header (misplaced)
	GotGen    uint64 // found in the header (stale)
	GotCRC    uint32 // found in the header (corrupt)
	WantCRC   uint32 // computed over the block (corrupt)
}

func (e *verifyError) Error() string {
	switch e.Kind {
	case verifyNoHeader:
		return fmt.Sprintf("lba %d: no verify header (never written, or overwritten by something else)", e.LBA)
	case verifyCorrupt:
		return fmt.Sprintf("lba %d: corrupt: CRC32C %08x in the header, %08x computed over the block", e.LBA, e.GotCRC, e.WantCRC)
	case verifyForeign:
		return fmt.Sprintf("lba %d: block of another run (seed %d, want %d)", e.LBA, e.GotSeed, e.Seed)
	case verifyMisplaced:
		return fmt.Sprintf("lba %d: misplaced: holds the block written to lba %d", e.LBA, e.GotLBA)
	default:
		return fmt.Sprintf("lba %d: stale: generation %d, want %d", e.LBA, e.GotGen, e.Gen)
	}
}

// checkVerifyBlock checks one logical block read from lba against what pass
// gen of run seed wrote there; nil if it matches, else *verifyError.
func checkVerifyBlock(b []byte, seed, lba, gen uint64) error {
	e := &verifyError{LBA: lba, Seed: seed, Gen: gen}
	if len(b) < verifyHeaderLen || string(b[:8]) != verifyMagic {
		e.Kind = verifyNoHeader
		return e
	}
	e.GotCRC = binary.BigEndian.Uint32(b[verifyCRCOffset:])
	c := crc32.Update(0, castagnoli, b[:verifyCRCOffset])
	c = crc32.Update(c, castagnoli, []byte{0, 0, 0, 0})
	e.WantCRC = crc32.Update(c, castagnoli, b[verifyHeaderLen:])
	e.GotSeed = binary.BigEndian.Uint64(b[8:])
	e.GotLBA = binary.BigEndian.Uint64(b[16:])
	e.GotGen = binary.BigEndian.Uint64(b[24:])
	switch {
	case e.GotCRC != e.WantCRC:
		e.Kind = verifyCorrupt
	case e.GotSeed != seed:
		e.Kind = verifyForeign
	case e.GotLBA != lba:
		e.Kind = verifyMisplaced
	case e.GotGen != gen:
		e.Kind = verifyStale
	default:
		return nil
	}
	return e
}

// verifyConfig is one bench --verify run.
type verifyConfig struct {
	bs, bsz    int    // bytes per I/O, bytes per logical block
	qd         int    // I/Os in flight
	nslots     uint64 // bs-sized slots in the region
	random     bool   // random slot order (else ascending)
	seed       uint64 // run identity written into every block
	loops      int    // passes; pass k writes generation k
	verifyOnly bool   // no writes: check the last pass of an earlier run
	fua        bool   // FUA on writes
}

// verifyResult is what a verify run did.
type verifyResult struct {
	Written, Read int64 // logical blocks
	IOErrors      int64
	Mismatches    int64
	First         []string // the first few mismatches and I/O errors
	Elapsed       time.Duration
}

const verifyReportMax = 10

// runVerify writes every slot of the region (in random or ascending order)
// with verified blocks of generation k, then reads every slot back (in
// another order) and checks each logical block, for k = 1..loops. With
// verifyOnly it only reads and checks generation loops. Mismatches and I/O
// errors are counted, not fatal; a session lost for good (ErrDevLoss,
// ErrClosed) or a cancelled ctx stops the run with that error.
func runVerify(ctx context.Context, s *conn, vc verifyConfig) (res verifyResult, err error) {
	var mu sync.Mutex
	note := func(msg string) {
		mu.Lock()
		if len(res.First) < verifyReportMax {
			res.First = append(res.First, msg)
		}
		mu.Unlock()
	}
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	per := uint64(vc.bs / vc.bsz) // logical blocks per slot
	rng := rand.New(rand.NewPCG(vc.seed, 0x5eed))
	order := make([]uint64, vc.nslots)
	pass := func(write bool, gen uint64) error {
		for i := range order {
			order[i] = uint64(i)
		}
		if vc.random {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		var next atomic.Uint64
		var written, read, ioErrs, bad atomic.Int64
		var fatal error
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		for w := 0; w < vc.qd; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf, err := s.ioBuffer(vc.bs, !write)
				if err != nil {
					mu.Lock()
					fatal = cmp.Or(fatal, fmt.Errorf("register a %d-byte buffer: %w", vc.bs, err))
					mu.Unlock()
					cancel()
					return
				}
				defer buf.Release()
				b := buf.Bytes()
				var cdb [16]byte
				cmd := s.ioCommand(cdb[:], buf, vc.bs, write)
				for pctx.Err() == nil {
					i := next.Add(1) - 1
					if i >= vc.nslots {
						return
					}
					lba := order[i] * per
					if write {
						for k := uint64(0); k < per; k++ {
							fillVerifyBlock(b[k*uint64(vc.bsz):(k+1)*uint64(vc.bsz)], vc.seed, lba+k, gen)
						}
					} else {
						clear(b) // a read that moves no data shows as "no header"
					}
					initiator.PutRW16(cdb[:], write, lba, uint32(per), write && vc.fua)
					r, err := s.runIO(pctx, &cmd)
					if err == nil && !write && r.DataInLen != vc.bs {
						err = fmt.Errorf("%d of %d bytes transferred", r.DataInLen, vc.bs)
					}
					if err != nil {
						if sessionGone(err) || pctx.Err() != nil {
							mu.Lock()
							fatal = cmp.Or(fatal, err, pctx.Err())
							mu.Unlock()
							cancel()
							return
						}
						ioErrs.Add(1)
						op := "READ(16)"
						if write {
							op = "WRITE(16)"
						}
						note(fmt.Sprintf("lba %d: %s of %d blocks: %v", lba, op, per, err))
						continue
					}
					if write {
						written.Add(int64(per))
						continue
					}
					read.Add(int64(per))
					for k := uint64(0); k < per; k++ {
						if err := checkVerifyBlock(b[k*uint64(vc.bsz):(k+1)*uint64(vc.bsz)], vc.seed, lba+k, gen); err != nil {
							bad.Add(1)
							note(err.Error())
						}
					}
				}
			}()
		}
		wg.Wait()
		res.Written += written.Load()
		res.Read += read.Load()
		res.IOErrors += ioErrs.Load()
		res.Mismatches += bad.Load()
		if fatal == nil {
			fatal = ctx.Err()
		}
		return fatal
	}
	first := 1
	if vc.verifyOnly {
		first = vc.loops
	}
	for gen := first; gen <= vc.loops; gen++ {
		if !vc.verifyOnly {
			if err := pass(true, uint64(gen)); err != nil {
				return res, err
			}
		}
		if err := pass(false, uint64(gen)); err != nil {
			return res, err
		}
	}
	return res, nil
}
