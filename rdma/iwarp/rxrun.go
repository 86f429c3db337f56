package iwarp

import (
	"encoding/binary"

	"github.com/gosrp/gosrp/rdma"
)

// A run of Read Response segments placed with one readv(2) (placeRun).
//
// The responder sends an RDMA Read's data as segments of at most its
// MULPDU, each in its own FPDU: 17 FPDUs for 1 MiB at the default 65472
// bytes. Read one at a time, each costs a readv(2) and the window update
// the kernel sends after it (tcp_cleanup_rbuf), whose processing on
// loopback runs the sender's ACK handling in the reader's system call. The
// FPDUs after a segment that is not the last are, all but always, the
// Read's next segments: the same STag, consecutive TOs, the same payload
// size, the last with L set. placeRun predicts their headers and reads, in
// one readv(2), the current payload, then each predicted header, payload
// (into the sink, where it belongs) and trailer, then the next FPDU's
// header into the buffer. It then checks each predicted header, in stream
// order, byte for byte against the prediction. The length fields fix the
// framing, so a header read where the previous FPDU ends is the next
// FPDU's: when it matches, its payload is in place and complete as far as
// it was read. From the first header that differs or has not all arrived,
// the bytes read are given back to the buffer and parsed as usual.
//
// A wrong prediction costs a copy of what was read past it, and it has
// written those bytes into the part of the sink this Read has yet to
// fill: the Read's own response overwrites them before it completes, and a
// sink's content is undefined until its Read completes (a Read that fails
// leaves it undefined either way). Where the sink is a RAM LUN's memory (a
// WRITE placed there), a concurrent READ of the range may see those bytes
// meanwhile, and a WRITE whose connection fails then may leave them: bytes
// of the same initiator's own stream (its FPDU headers and IUs), never
// another's, in a range a failed WRITE leaves indeterminate anyway. Bytes
// past the FPDUs already known are
// taken only as far as they are there: the reader never waits for a
// prediction, so a peer that sends something else cannot stall it.
const (
	// runMaxSegs is the most segments predicted after the current one.
	runMaxSegs = 8
	// runMinPayload is the least payload, in bytes, of a segment after
	// which segments are predicted: below it the readv(2) saved is not
	// worth the copy a wrong guess costs.
	runMinPayload = 16 << 10
	// runMaxPenalty bounds how many eligible segments are read without
	// prediction after wrong guesses (the count doubles per wrong guess
	// and halves per run that held).
	runMaxPenalty = 1024
)

// runSeg is one predicted Read Response segment.
type runSeg struct {
	hdr, want  [mpaLenSize + ddpTaggedHdrLen]byte // header read, header predicted
	tr         [8]byte                            // pad and CRC field
	n          int                                // payload bytes
	last       bool
	start, end int // stream position of its header and past its CRC field
}

// runState is placeRun's state in rxState.
type runState struct {
	seg     [runMaxSegs]runSeg
	layout  [rxMaxIov][]byte // the readv(2)'s destinations in stream order
	skip    int              // eligible segments still to read without prediction
	penalty int              // skip's value after the next wrong guess
	spill   []byte           // bytes given back after a wrong guess
	// hits counts predicted segments placed, misses wrong guesses.
	hits, misses uint64
}

// appendSink appends to dst the scatter list's bytes [off, off+n) as
// pieces, one per element touched, while dst holds at most max pieces; it
// reports whether all of them fit.
func appendSink(dst [][]byte, sgl []rdma.SGE, off, n, max int) ([][]byte, bool) {
	for _, s := range sgl {
		if n == 0 {
			break
		}
		b := s.Bytes()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		if len(dst) >= max {
			return dst, false
		}
		k := min(n, len(b)-off)
		dst = append(dst, b[off:off+k])
		n -= k
		off = 0
	}
	return dst, n == 0
}

// appendTo is appendSink for a sink that is either the scatter list sgl
// or, with sgl nil, the contiguous region.
func appendTo(dst [][]byte, sgl []rdma.SGE, region []byte, off, n, max int) ([][]byte, bool) {
	if sgl != nil {
		return appendSink(dst, sgl, off, n, max)
	}
	if len(dst) >= max {
		return dst, false
	}
	return append(dst, region[off:off+n]), true
}

// placeRun places the n-byte payload at offset off of a sink of length
// bytes, the segment (its TO to, pad bytes of pad) not being its
// message's last, with the message's following segments as predicted (see
// above): a Read Response into a Read's scatter list sgl, or an RDMA Write
// into region (sgl nil), whose end the message is predicted to reach. It
// returns the payload bytes placed by predicted segments and whether the
// last of them carried L. ok false: the segment does not qualify (CRCs
// on, a small payload, a wrong guess too recently, the sink too
// fragmented) and nothing was read.
func (c *conn) placeRun(sgl []rdma.SGE, region []byte, length int, to uint64, off, n, pad int) (extra int, last, ok bool, err error) {
	rx, b := &c.rx, c.br
	run := &rx.run
	if c.crc || b.rc == nil || b.err != nil || n < runMinPayload || off+n >= length ||
		b.w-b.r >= n+pad+crcSize {
		return 0, false, false, nil
	}
	if run.skip > 0 {
		run.skip--
		return 0, false, false, nil
	}
	// The current segment, then the predicted ones, leaving room for the
	// look-ahead into the buffer.
	layout, fits := appendTo(run.layout[:0], sgl, region, off, n, rxMaxPieces)
	if !fits {
		clear(layout)
		return 0, false, false, nil
	}
	layout = append(layout, rx.tr[:pad+crcSize])
	need := n + pad + crcSize
	pos := need
	segs := 0
	for o, to := off+n, to+uint64(n); segs < runMaxSegs && o < length; segs++ {
		s := &run.seg[segs]
		p := min(n, length-o)
		l := len(layout)
		layout = append(layout, s.hdr[:])
		if layout, fits = appendTo(layout, sgl, region, o, p, rxMaxIov-2); !fits {
			clear(layout[l:])
			layout = layout[:l]
			break
		}
		pd := padLen(ddpTaggedHdrLen + p)
		layout = append(layout, s.tr[:pd+crcSize])
		s.n, s.last = p, o+p == length
		copy(s.want[:], rx.hdr[:len(s.want)])
		binary.BigEndian.PutUint16(s.want[0:], uint16(ddpTaggedHdrLen+p))
		s.want[mpaLenSize] &^= ddpFlagLast
		if s.last {
			s.want[mpaLenSize] |= ddpFlagLast
		}
		binary.BigEndian.PutUint64(s.want[mpaLenSize+6:], to)
		s.start = pos
		pos += len(s.hdr) + p + pd + crcSize
		s.end = pos
		o += p
		to += uint64(p)
	}
	if segs == 0 {
		clear(layout)
		return 0, false, false, nil
	}
	// What the buffer holds belongs to the current segment.
	got := 0
	for _, d := range layout {
		k := copy(d, b.buf[b.r:b.w])
		b.r += k
		got += k
		if k < len(d) {
			break
		}
	}
	b.drained()
	ahead := pos
	layout = append(layout, b.buf[:rxAhead])
	defer clear(layout)
	if b.idle != nil {
		b.idle()
	}
	if pos, err = b.gatherTo(layout, got, need); err != nil {
		return 0, false, true, err
	}
	for j := range segs {
		s := &run.seg[j]
		if pos < s.start+len(s.hdr) || s.hdr != s.want {
			if pos >= s.start+len(s.hdr) {
				run.misses++
				run.skip = run.penalty
				run.penalty = min(2*run.penalty+1, runMaxPenalty)
			}
			c.giveBack(layout, s.start, pos)
			return extra, last, true, nil
		}
		if pos < s.end {
			if pos, err = b.gatherTo(layout, pos, s.end); err != nil {
				return extra, false, true, err
			}
		}
		extra += s.n
		last = s.last
		run.hits++
	}
	run.penalty /= 2
	b.w = pos - ahead
	return extra, last, true, nil
}

// giveBack makes the layout's bytes [from, to) the buffer's content, to
// be parsed as stream (the buffer is empty, or holds the look-ahead, which
// is within them).
func (c *conn) giveBack(layout [][]byte, from, to int) {
	n := to - from
	if n == 0 {
		return
	}
	run := &c.rx.run
	if cap(run.spill) < n {
		run.spill = make([]byte, max(n, 64<<10))
	}
	p := run.spill[:n]
	w := 0
	for _, d := range layout {
		if w == n {
			break
		}
		if from >= len(d) {
			from -= len(d)
			continue
		}
		w += copy(p[w:], d[from:])
		from = 0
	}
	c.br.load(p)
	if n > len(c.br.base) {
		// The buffer is the spill now.
		run.spill = nil
	}
}
