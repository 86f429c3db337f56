package iwarp

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// TestReadResponseRunsRandom: Read Responses of random but valid
// segmentation (uniform runs, perturbed runs, random sizes, a zero-length
// last segment), for Reads into sinks of one registered region, of 64 KiB
// local regions or of many small pieces of a region with gaps between
// them, interleaved with Sends into posted receives, written to the socket
// in random chunks with tiny pauses: every sink ends holding exactly its
// Read's payload, nothing outside the sinks is written, every Send lands
// as sent, and everything completes successfully. RXRUN_SEEDS=first,count
// runs other seeds (a longer hunt); RXRUN_OFF=1 turns prediction off for
// comparison.
func TestReadResponseRunsRandom(t *testing.T) {
	seeds, first := 8, 0
	if testing.Short() {
		seeds = 6
	}
	if v := os.Getenv("RXRUN_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d,%d", &first, &seeds)
	}
	var hits, misses uint64
	for seed := first; seed < first+seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, m := runReadResponsesRandom(t, int64(seed))
			hits, misses = hits+h, misses+m
		})
	}
	if (hits == 0 || misses == 0) && os.Getenv("RXRUN_OFF") == "" {
		t.Errorf("%d segments placed by prediction, %d wrong predictions: want some of each", hits, misses)
	}
}

const fuzzCanary = 0xee

type fuzzRead struct {
	id     uint64
	size   int
	sgl    []rdma.SGE
	region []byte // the memory behind sgl (canaries around and between)
	in     []bool // region bytes that belong to the sink
	want   []byte
	stag   uint32
	to     uint64
}

type fuzzSend struct {
	id   uint64
	mr   rdma.MemoryRegion
	want []byte
}

func runReadResponsesRandom(t *testing.T, seed int64) (hits, misses uint64) {
	rng := rand.New(rand.NewSource(seed))
	p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 16, RecvDepth: 16, MaxSGE: 64, IRD: 4, ORD: 4}, 0)
	c := p.server.(*conn)
	msn := uint32(1)
	nextID := uint64(1)
	rounds := 3 + rng.Intn(3)
	for round := range rounds {
		// Predict afresh each round (no reads are owed: the reader is
		// not in placeRun, and the last completion ordered its writes).
		c.rx.run.skip, c.rx.run.penalty = 0, 0
		if os.Getenv("RXRUN_OFF") != "" {
			c.rx.run.skip = 1 << 40
		}
		nreads := 1 + rng.Intn(3)
		var reads []*fuzzRead
		for range nreads {
			r := newFuzzRead(t, p, rng, nextID)
			nextID++
			r.stag, r.to, _ = p.postRead(r.id, r.sgl)
			reads = append(reads, r)
		}
		// Sends, each into its own receive.
		nsends := rng.Intn(4)
		var sends []*fuzzSend
		for range nsends {
			n := rng.Intn(3000)
			if rng.Intn(3) == 0 {
				n = 16<<10 + rng.Intn(65535-ddpUntaggedHdrLen-16<<10+1)
			}
			mr, err := p.dev.Register(make([]byte, n), rdma.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			s := &fuzzSend{id: nextID, mr: mr, want: make([]byte, n)}
			nextID++
			rng.Read(s.want)
			if err := p.server.PostRecv(rdma.RecvWR{ID: s.id, Local: rdma.SGE{MR: mr, Length: n}}); err != nil {
				t.Fatal(err)
			}
			sends = append(sends, s)
		}
		// The FPDUs of each Read, in order; Sends go in at random points.
		var fpdus [][]byte
		for _, r := range reads {
			for _, u := range fuzzSegments(rng, r) {
				fpdus = append(fpdus, fpduBytes(u, false))
			}
		}
		for _, s := range sends {
			u := fpduBytes(untagged(0x41, 0x43, 0, 0, msn, 0, s.want), false)
			msn++
			at := rng.Intn(len(fpdus) + 1)
			// Keep the Sends in order: after any Send already placed.
			for i := len(fpdus) - 1; i >= 0; i-- {
				if f := fpdus[i]; f[2]&0x80 == 0 {
					at = max(at, i+1)
					break
				}
			}
			fpdus = append(fpdus[:at], append([][]byte{u}, fpdus[at:]...)...)
		}
		stream := bytes.Join(fpdus, nil)
		fuzzWrite(t, p, rng, stream)

		pending := map[uint64]bool{}
		for _, r := range reads {
			pending[r.id] = true
		}
		for _, s := range sends {
			pending[s.id] = true
		}
		for len(pending) > 0 {
			wc := pollOne(t, p.server)
			if !pending[wc.ID] {
				t.Fatalf("round %d: unexpected completion %+v", round, wc)
			}
			delete(pending, wc.ID)
			if wc.Status != rdma.StatusSuccess {
				t.Fatalf("round %d: completion %+v", round, wc)
			}
		}
		for _, r := range reads {
			var got []byte
			for i, b := range r.region {
				if r.in[i] {
					got = append(got, b)
				} else if b != fuzzCanary {
					t.Fatalf("round %d Read %d (%d bytes): byte %d of its region, outside the sink, written (%#x)", round, r.id, r.size, i, b)
				}
			}
			if !bytes.Equal(got, r.want) {
				i := 0
				for i < len(got) && got[i] == r.want[i] {
					i++
				}
				t.Fatalf("round %d Read %d (%d bytes, %d SGEs): sink differs from byte %d", round, r.id, r.size, len(r.sgl), i)
			}
		}
		for _, s := range sends {
			if !bytes.Equal(s.mr.Bytes(), s.want) {
				t.Fatalf("round %d: Send %d (%d bytes) not as sent", round, s.id, len(s.want))
			}
		}
	}
	if err := p.server.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("hits %d misses %d", c.rx.run.hits, c.rx.run.misses)
	return c.rx.run.hits, c.rx.run.misses
}

// newFuzzRead makes a Read of random size into a random sink.
func newFuzzRead(t *testing.T, p *fakePeer, rng *rand.Rand, id uint64) *fuzzRead {
	var size int
	switch rng.Intn(4) {
	case 0:
		size = 1 + rng.Intn(100000)
	case 1:
		size = 16<<10 + rng.Intn(200000)
	default:
		size = 100000 + rng.Intn(900000)
	}
	r := &fuzzRead{id: id, size: size, want: make([]byte, size)}
	rng.Read(r.want)
	switch rng.Intn(3) {
	case 0: // one registered region, canaries around it
		r.region = bytes.Repeat([]byte{fuzzCanary}, size+64)
		r.in = make([]bool, len(r.region))
		mr, err := p.dev.Register(r.region, rdma.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		r.sgl = []rdma.SGE{{MR: mr, Offset: 32, Length: size}}
		for i := 32; i < 32+size; i++ {
			r.in[i] = true
		}
	case 1: // 64 KiB local regions
		region := bytes.Repeat([]byte{fuzzCanary}, size)
		if (size+(64<<10)-1)/(64<<10) > 64 {
			t.Fatal("too many SGEs")
		}
		for o := 0; o < size; o += 64 << 10 {
			b := region[o:min(o+64<<10, size)]
			r.sgl = append(r.sgl, rdma.SGE{MR: p.dev.LocalRegion(b), Length: len(b)})
		}
		r.region = region
		r.in = make([]bool, size)
		for i := range r.in {
			r.in[i] = true
		}
	default: // up to 64 pieces of random sizes with gaps in one region
		nsge := 1 + rng.Intn(64)
		nsge = min(nsge, size)
		cuts := []int{0, size}
		for len(cuts) < nsge+1 {
			cuts = append(cuts, 1+rng.Intn(size-1+1))
		}
		cuts = sortedUnique(cuts)
		gap := 1 + rng.Intn(16)
		r.region = bytes.Repeat([]byte{fuzzCanary}, size+gap*(len(cuts)+1))
		r.in = make([]bool, len(r.region))
		mr, err := p.dev.Register(r.region, rdma.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(cuts); i++ {
			off := cuts[i] + gap*(i+1)
			n := cuts[i+1] - cuts[i]
			if n == 0 {
				continue
			}
			r.sgl = append(r.sgl, rdma.SGE{MR: mr, Offset: off, Length: n})
			for j := off; j < off+n; j++ {
				r.in[j] = true
			}
		}
	}
	return r
}

func sortedUnique(v []int) []int {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	out := v[:1]
	for _, x := range v[1:] {
		if x != out[len(out)-1] {
			out = append(out, x)
		}
	}
	return out
}

// fuzzSegments cuts r's response into a random valid segmentation and
// returns its ULPDUs.
func fuzzSegments(rng *rand.Rand, r *fuzzRead) [][]byte {
	const maxSeg = 65535 - ddpTaggedHdrLen
	var sizes []int
	left := r.size
	mode := rng.Intn(4)
	uni := 16<<10 + rng.Intn(maxSeg-16<<10+1)
	if rng.Intn(2) == 0 {
		uni = 65472
	}
	for left > 0 {
		var n int
		switch mode {
		case 0: // uniform
			n = uni
		case 1: // uniform, now and then another size
			n = uni
			if rng.Intn(4) == 0 {
				n = 1 + rng.Intn(maxSeg)
			}
		case 2: // random sizes, mostly large
			n = 16<<10 + rng.Intn(maxSeg-16<<10+1)
			if rng.Intn(5) == 0 {
				n = 1 + rng.Intn(16<<10)
			}
		default: // a short first segment, then uniform
			n = uni
			if len(sizes) == 0 {
				n = 1 + rng.Intn(uni)
			}
		}
		n = min(n, left)
		sizes = append(sizes, n)
		left -= n
	}
	zeroLast := rng.Intn(6) == 0
	if zeroLast {
		sizes = append(sizes, 0)
	}
	var us [][]byte
	off := 0
	for i, n := range sizes {
		c0 := byte(0x81)
		if i == len(sizes)-1 {
			c0 |= 0x40
		}
		us = append(us, tagged(c0, 0x42, r.stag, r.to+uint64(off), r.want[off:off+n]))
		off += n
	}
	return us
}

// fuzzWrite writes stream in random chunks, pausing now and then.
func fuzzWrite(t *testing.T, p *fakePeer, rng *rand.Rand, stream []byte) {
	t.Helper()
	style := rng.Intn(4)
	for len(stream) > 0 {
		var n int
		switch style {
		case 0:
			n = len(stream)
		case 1:
			n = 1 + rng.Intn(64)
			if rng.Intn(4) != 0 {
				n = 1 + rng.Intn(100000)
			}
		case 2:
			n = 1 + rng.Intn(8000)
		default:
			n = 1 + rng.Intn(300000)
		}
		n = min(n, len(stream))
		if _, err := p.nc.Write(stream[:n]); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
		if rng.Intn(3) == 0 {
			time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
		}
	}
}

// TestReadResponseRunViolationRandom: one segment among a Read's uniform
// Read Responses breaks a rule (its TO skips or rewrites bytes, it names
// another STag, or it sets L early), at a random place, with the stream
// cut at random: the connection ends with the Terminate that names that
// segment's header, and the Read fails.
func TestReadResponseRunViolationRandom(t *testing.T) {
	for seed := range 6 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(seed)))
			p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
			seg := 16<<10 + rng.Intn(65535-ddpTaggedHdrLen-16<<10+1)
			nseg := 3 + rng.Intn(8)
			size := seg*(nseg-1) + 1 + rng.Intn(seg)
			mr, _ := p.dev.Register(make([]byte, size), rdma.AccessLocalWrite)
			stag, to, _ := p.postRead(3, []rdma.SGE{{MR: mr, Length: size}})
			payload := make([]byte, size)
			rng.Read(payload)
			bad := 1 + rng.Intn(nseg-1)
			kind := seed % 3
			var stream, badHdr []byte
			for i := range nseg {
				n := min(seg, size-i*seg)
				c0, st, o := byte(0x81), stag, to+uint64(i*seg)
				if i == nseg-1 {
					c0 |= 0x40
				}
				code := uint8(DDPTBaseBounds)
				if i == bad {
					switch kind {
					case 0:
						o += uint64(4 * (1 + rng.Intn(3)))
						if rng.Intn(2) == 0 {
							o -= 8 * 4
						}
					case 1:
						st ^= 0x100
						code = DDPTInvalidSTag
					case 2:
						if i == nseg-1 {
							o += 4 // the last one cannot end early: skew it
						} else {
							c0 |= 0x40
						}
					}
				}
				u := tagged(c0, 0x42, st, o, payload[i*seg:i*seg+n])
				if i == bad {
					badHdr = fpduHead(u, ddpTaggedHdrLen)
					defer func(code uint8) {
						p.expectTerminate(LayerDDP, DDPTaggedBuffer, code, termFlagM|termFlagD, badHdr)
						if wc := pollOne(t, p.server); wc.ID != 3 || wc.Status == rdma.StatusSuccess {
							t.Errorf("completion %+v, want Read 3 failed", wc)
						}
					}(code)
				}
				stream = append(stream, fpduBytes(u, false)...)
			}
			go func() {
				// The reader stops at the violation: what follows may
				// not be read, so it is written aside.
				s := stream
				for len(s) > 0 {
					n := min(len(s), 1+rng.Intn(100000))
					if _, err := p.nc.Write(s[:n]); err != nil {
						return
					}
					s = s[n:]
					time.Sleep(time.Duration(rng.Intn(100)) * time.Microsecond)
				}
			}()
		})
	}
}

// TestReadResponseRunClosed: the connection closed (locally or by the
// peer) while the reader waits for the rest of a segment whose predicted
// header it verified, or for the rest of the first segment: the Read
// completes flushed, nothing hangs.
func TestReadResponseRunClosed(t *testing.T) {
	for _, tc := range []struct {
		peer bool
		cut  int // bytes of the stream withheld
	}{{false, 20000}, {true, 20000}, {false, 40000 + 20000 + 20}, {true, 40000 + 20000 + 20}} {
		peer := tc.peer
		t.Run(fmt.Sprintf("peer=%v/cut=%d", tc.peer, tc.cut), func(t *testing.T) {
			p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
			const n = 40000
			mr, _ := p.dev.Register(make([]byte, 4*n), rdma.AccessLocalWrite)
			stag, to, _ := p.postRead(3, []rdma.SGE{{MR: mr, Length: 4 * n}})
			payload := bytes.Repeat([]byte{0x3c}, n)
			var stream []byte
			for i := range 2 {
				stream = append(stream, fpduBytes(tagged(0x81, 0x42, stag, to+uint64(i*n), payload), false)...)
			}
			// All of the first, the second's header and half its payload;
			// or half of the first.
			if _, err := p.nc.Write(stream[:len(stream)-tc.cut]); err != nil {
				t.Fatal(err)
			}
			c := p.server.(*conn)
			deadline := time.Now().Add(5 * time.Second)
			for {
				c.mu.Lock()
				placing := c.rxPlacing
				c.mu.Unlock()
				if placing {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the reader is not placing the Read's response")
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			if peer {
				p.nc.Close()
			} else {
				p.server.Close()
			}
			wc := pollOne(t, p.server)
			if wc.ID != 3 || wc.Status != rdma.StatusFlushed {
				t.Fatalf("completion %+v, want Read 3 flushed", wc)
			}
			select {
			case <-p.server.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("connection not down")
			}
		})
	}
}
