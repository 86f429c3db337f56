package iwarp

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// rresp is one Read Response segment a test peer sends: payload bytes,
// DDP control byte (0 = tagged, version 1, L on the Read's last segment)
// and a TO shift from where the segment belongs.
type rresp struct {
	n      int
	c0     byte
	toSkew int
}

// TestReadResponseRuns: Read Responses placed with their successors
// predicted (placeRun) land in the sink exactly as sent and complete the
// Read, whatever the peer's segmentation (uniform, a short first segment,
// segments shorter or longer than the first, reserved bits that differ),
// with a Send or a second Read's responses right after, into registered
// memory or 64 KiB local regions, and however TCP splits the stream: all
// at once, dribbled, or cut inside the headers. A wrong prediction is
// recovered from (the stream parsed again from the mismatching header);
// the Read's sink ends as sent, and the reader never waits for bytes it
// only predicted.
func TestReadResponseRuns(t *testing.T) {
	const mul = 65472
	cases := []struct {
		name     string
		size     int
		segs     []rresp
		send     int  // a Send of this many bytes after segment 2 (0: none)
		second   bool // a second Read's responses follow the first's
		hits     bool // predicted segments must be placed
		mispredi bool // a wrong prediction must be seen
	}{
		{name: "uniform", size: 300000, segs: []rresp{{n: mul}, {n: mul}, {n: mul}, {n: mul}, {n: 300000 - 4*mul}}, hits: true},
		{name: "exact", size: 3 * mul, segs: []rresp{{n: mul}, {n: mul}, {n: mul}}, hits: true},
		{name: "short-first", size: 300000, segs: []rresp{{n: 40000}, {n: mul}, {n: mul}, {n: mul}, {n: 300000 - 40000 - 3*mul}}, mispredi: true},
		{name: "shrinking", size: 200000, segs: []rresp{{n: 60000}, {n: 30000}, {n: 30000}, {n: 40000}, {n: 40000}}, mispredi: true},
		{name: "fewer-bytes-than-predicted", size: 100000, segs: []rresp{{n: 40000}, {n: 60000}}, mispredi: true},
		{name: "reserved-bits", size: 200000, segs: []rresp{{n: 50000}, {n: 50000, c0: 0x85}, {n: 50000}, {n: 50000}}, mispredi: true},
		{name: "send-between", size: 300000, segs: []rresp{{n: mul}, {n: mul}, {n: mul}, {n: mul}, {n: 300000 - 4*mul}}, send: 300, hits: true, mispredi: true},
		{name: "two-reads", size: 200000, segs: []rresp{{n: mul}, {n: mul}, {n: mul}, {n: 200000 - 3*mul}}, second: true, hits: true},
	}
	splits := []string{"whole", "dribble", "cut-headers"}
	for _, c := range cases {
		for _, local := range []bool{false, true} {
			for _, split := range splits {
				t.Run(fmt.Sprintf("%s/local=%v/%s", c.name, local, split), func(t *testing.T) {
					p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
					sink := func(n int) ([]rdma.SGE, func() []byte) {
						if !local {
							mr, err := p.dev.Register(make([]byte, n), rdma.AccessLocalWrite)
							if err != nil {
								t.Fatal(err)
							}
							return []rdma.SGE{{MR: mr, Length: n}}, func() []byte { return mr.Bytes() }
						}
						var sgl []rdma.SGE
						var bufs [][]byte
						for o := 0; o < n; o += 64 << 10 {
							b := make([]byte, min(64<<10, n-o))
							bufs = append(bufs, b)
							sgl = append(sgl, rdma.SGE{MR: p.dev.LocalRegion(b), Length: len(b)})
						}
						return sgl, func() []byte { return bytes.Join(bufs, nil) }
					}
					var rb rdma.MemoryRegion
					if c.send > 0 {
						var err error
						if rb, err = p.dev.Register(make([]byte, c.send), rdma.AccessLocalWrite); err != nil {
							t.Fatal(err)
						}
						if err := p.server.PostRecv(rdma.RecvWR{ID: 5, Local: rdma.SGE{MR: rb, Length: c.send}}); err != nil {
							t.Fatal(err)
						}
					}
					reads := 1
					if c.second {
						reads = 2
					}
					var got []func() []byte
					var want [][]byte
					var stream []byte
					var cuts []int // stream offsets of FPDU starts
					type req struct {
						stag uint32
						to   uint64
					}
					var reqs []req
					for r := range reads {
						sgl, bytesOf := sink(c.size)
						got = append(got, bytesOf)
						stag, to, size := p.postRead(uint64(10+r), sgl)
						if size != uint32(c.size) {
							t.Fatalf("Read size %d, want %d", size, c.size)
						}
						reqs = append(reqs, req{stag, to})
						w := make([]byte, c.size)
						for i := range w {
							w[i] = byte(i*7 + 3*r + i>>11)
						}
						want = append(want, w)
					}
					for r := range reads {
						off := 0
						for i, s := range c.segs {
							c0 := s.c0
							if c0 == 0 {
								c0 = 0x81
							}
							if i == len(c.segs)-1 {
								c0 |= 0x40
							}
							cuts = append(cuts, len(stream))
							stream = append(stream, fpduBytes(tagged(c0, 0x42, reqs[r].stag, reqs[r].to+uint64(off+s.toSkew), want[r][off:off+s.n]), false)...)
							off += s.n
							if i == 1 && c.send > 0 && r == 0 {
								cuts = append(cuts, len(stream))
								stream = append(stream, fpduBytes(untagged(0x41, 0x43, 0, 0, 1, 0, bytes.Repeat([]byte{0xa5}, c.send)), false)...)
							}
						}
						if off != c.size {
							t.Fatalf("test case: segments sum to %d, want %d", off, c.size)
						}
					}
					writeSplit(t, p, stream, cuts, split)
					for r := range reads {
						wc := pollOne(t, p.server)
						if wc.ID == 5 {
							if wc.Status != rdma.StatusSuccess || wc.ByteLen != c.send || !bytes.Equal(rb.Bytes(), bytes.Repeat([]byte{0xa5}, c.send)) {
								t.Fatalf("Send completion %+v", wc)
							}
							wc = pollOne(t, p.server)
						}
						if wc.ID != uint64(10+r) || wc.Status != rdma.StatusSuccess || wc.ByteLen != c.size {
							t.Fatalf("completion %+v, want Read %d of %d bytes", wc, 10+r, c.size)
						}
						if !bytes.Equal(got[r](), want[r]) {
							t.Fatalf("Read %d: the sink does not hold the Read Responses' payload", 10+r)
						}
					}
					if err := p.server.Err(); err != nil {
						t.Fatal(err)
					}
					run := &p.server.(*conn).rx.run
					if c.hits && split == "whole" && run.hits == 0 {
						t.Error("no segment was placed by prediction")
					}
					if c.mispredi && split == "whole" && run.misses == 0 {
						t.Error("no wrong prediction was seen")
					}
				})
			}
		}
	}
}

// writeSplit writes stream to the peer's socket: at once (whole), in
// 3001-byte pieces with pauses (dribble), or cut 5 bytes into each FPDU
// header listed in cuts, with a pause at each cut (cut-headers).
func writeSplit(t *testing.T, p *fakePeer, stream []byte, cuts []int, split string) {
	t.Helper()
	var at []int
	switch split {
	case "whole":
	case "dribble":
		for o := 3001; o < len(stream); o += 3001 {
			at = append(at, o)
		}
	case "cut-headers":
		for _, c := range cuts {
			at = append(at, c+5)
		}
	}
	prev := 0
	for _, o := range append(at, len(stream)) {
		if _, err := p.nc.Write(stream[prev:o]); err != nil {
			t.Fatal(err)
		}
		prev = o
		if o < len(stream) {
			time.Sleep(300 * time.Microsecond)
		}
	}
}

// TestReadResponseRunViolation: a segment among predicted ones that breaks
// the rules (its TO skips bytes) is found where the prediction fails and
// ends the connection with the same Terminate as without prediction
// (RFC 5041 §7.2: a base or bounds violation of the tagged buffer).
func TestReadResponseRunViolation(t *testing.T) {
	p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
	const n = 50000
	mr, _ := p.dev.Register(make([]byte, 4*n), rdma.AccessLocalWrite)
	stag, to, _ := p.postRead(3, []rdma.SGE{{MR: mr, Length: 4 * n}})
	payload := bytes.Repeat([]byte{0x3c}, n)
	var stream, bad []byte
	for i, skew := range []uint64{0, 0, 8, 0} {
		c0 := byte(0x81)
		if i == 3 {
			c0 = 0xc1
		}
		u := tagged(c0, 0x42, stag, to+uint64(i*n)+skew, payload)
		if skew != 0 {
			bad = fpduHead(u, ddpTaggedHdrLen)
		}
		stream = append(stream, fpduBytes(u, false)...)
	}
	if _, err := p.nc.Write(stream); err != nil {
		t.Fatal(err)
	}
	p.expectTerminate(LayerDDP, DDPTaggedBuffer, DDPTBaseBounds, termFlagM|termFlagD, bad)
	if wc := pollOne(t, p.server); wc.ID != 3 || wc.Status == rdma.StatusSuccess {
		t.Fatalf("completion %+v, want Read 3 failed", wc)
	}
}

// TestRDMAWriteRuns: RDMA Write segments into a region registered with
// rdma.AccessPlaceAhead are read several per readv(2) (placeRun) and land
// exactly as sent, for a message that fills the region and for one that
// ends short of it (the prediction then fails at its last segment and the
// stream is parsed again from there); a region without the flag is never
// predicted into, and the bytes past a short message stay as they were.
// A Send after the Writes tells the test they are placed (FPDUs are
// processed in order).
func TestRDMAWriteRuns(t *testing.T) {
	const mul = 65472
	for _, c := range []struct {
		name      string
		ahead     bool
		region    int
		segs      []int
		split     string
		wantHits  bool
		wantMiss  bool
		untouched bool // the region past the message keeps its bytes
	}{
		{"fills-region", true, 300000, []int{mul, mul, mul, mul, 300000 - 4*mul}, "whole", true, false, false},
		{"fills-region-dribbled", true, 300000, []int{mul, mul, mul, mul, 300000 - 4*mul}, "dribble", false, false, false},
		{"short-of-region", true, 400000, []int{mul, mul, mul, 50000}, "whole", true, true, false},
		{"no-flag", false, 400000, []int{mul, mul, mul, 50000}, "whole", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newFakePeer(t, Config{}, rdma.QPConfig{SendDepth: 8, RecvDepth: 4, MaxSGE: 8, IRD: 4, ORD: 4}, 0)
			acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
			if c.ahead {
				acc |= rdma.AccessPlaceAhead
			}
			mem := bytes.Repeat([]byte{0x77}, c.region)
			mr, err := p.dev.Register(mem, acc)
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := p.dev.Register(make([]byte, 8), rdma.AccessLocalWrite)
			if err := p.server.PostRecv(rdma.RecvWR{ID: 5, Local: rdma.SGE{MR: rb, Length: 8}}); err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, n := range c.segs {
				total += n
			}
			want := make([]byte, total)
			for i := range want {
				want[i] = byte(i*11 + i>>9)
			}
			var stream []byte
			var cuts []int
			off := 0
			for i, n := range c.segs {
				c0 := byte(0x81)
				if i == len(c.segs)-1 {
					c0 = 0xc1
				}
				cuts = append(cuts, len(stream))
				stream = append(stream, fpduBytes(tagged(c0, 0x40, mr.RKey(), mr.Addr()+uint64(off), want[off:off+n]), false)...)
				off += n
			}
			cuts = append(cuts, len(stream))
			stream = append(stream, fpduBytes(untagged(0x41, 0x43, 0, 0, 1, 0, []byte("done")), false)...)
			writeSplit(t, p, stream, cuts, c.split)
			if wc := pollOne(t, p.server); wc.ID != 5 || wc.Status != rdma.StatusSuccess || string(rb.Bytes()[:4]) != "done" {
				t.Fatalf("completion %+v", wc)
			}
			if !bytes.Equal(mem[:total], want) {
				t.Fatal("the region does not hold the RDMA Writes' payload")
			}
			if c.untouched && !bytes.Equal(mem[total:], bytes.Repeat([]byte{0x77}, c.region-total)) {
				t.Fatal("bytes past the message changed in a region without AccessPlaceAhead")
			}
			if err := p.server.Err(); err != nil {
				t.Fatal(err)
			}
			run := &p.server.(*conn).rx.run
			if c.wantHits && run.hits == 0 {
				t.Error("no segment was placed by prediction")
			}
			if !c.ahead && run.hits+run.misses != 0 {
				t.Errorf("%d hits, %d misses in a region without AccessPlaceAhead", run.hits, run.misses)
			}
			if c.wantMiss && run.misses == 0 {
				t.Error("no wrong prediction was seen")
			}
		})
	}
}
