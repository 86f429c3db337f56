package iwarp

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	"github.com/gosrp/gosrp/rdma"
)

// Writer batching limits: one vectored write carries at most this many
// buffers, header bytes and bytes in all.
const (
	txMaxIOV    = 1000
	txArenaSize = 16 << 10
	txMaxBytes  = 4 << 20
	txMaxWRs    = 64 // work requests taken per batch
)

// txState builds FPDUs into a gather list: headers and trailers live in a
// reused arena, payloads are slices of the registered regions themselves.
type txState struct {
	c     *conn
	w     io.Writer
	arena []byte
	iov   [][]byte
	bufs  net.Buffers
	bytes int
	start int // iov index of the FPDU being built
	pad   int
	err   error
	msn   [numQueues]uint32 // next MSN per untagged queue (RFC 5041 §5.1: from 1)
	// Scratch lists for a batch (no allocation per batch).
	takeSQ  []taken
	takeIRQ []int
}

func (t *txState) init(c *conn) {
	t.c = c
	t.w = c.nc
	t.arena = make([]byte, 0, txArenaSize)
	t.iov = make([][]byte, 0, txMaxIOV+8)
	for i := range t.msn {
		t.msn[i] = 1
	}
}

// flush writes the gathered FPDUs in one vectored write (writev on TCP).
func (t *txState) flush() {
	if len(t.iov) == 0 || t.err != nil {
		t.reset()
		return
	}
	raceRelease()
	// A field, so WriteTo's pointer receiver does not move it to the heap.
	t.bufs = t.iov
	_, err := t.bufs.WriteTo(t.w)
	t.bufs = nil
	if err != nil {
		t.err = err
	}
	t.reset()
}

func (t *txState) reset() {
	clear(t.iov)
	t.iov = t.iov[:0]
	t.arena = t.arena[:0]
	t.bytes = 0
}

// begin starts an FPDU whose ULPDU is hdrLen header bytes and payloadLen
// payload bytes; it returns the header to fill in.
func (t *txState) begin(hdrLen, payloadLen int) []byte {
	if len(t.arena)+mpaLenSize+hdrLen+3+crcSize > cap(t.arena) || len(t.iov)+3+32 > txMaxIOV || t.bytes >= txMaxBytes {
		t.flush()
	}
	ulpdu := hdrLen + payloadLen
	n := len(t.arena)
	t.arena = t.arena[:n+mpaLenSize+hdrLen]
	h := t.arena[n : n+mpaLenSize+hdrLen : n+mpaLenSize+hdrLen]
	binary.BigEndian.PutUint16(h, uint16(ulpdu))
	t.start = len(t.iov)
	t.iov = append(t.iov, h)
	t.pad = padLen(ulpdu)
	t.bytes += mpaLenSize + ulpdu + t.pad + crcSize
	return h[mpaLenSize:]
}

// payload appends a payload piece to the FPDU being built.
func (t *txState) payload(p []byte) {
	if len(p) > 0 {
		t.iov = append(t.iov, p)
	}
}

// end appends pad and CRC to the FPDU being built.
func (t *txState) end() {
	n := len(t.arena)
	tr := t.arena[n : n+t.pad+crcSize : n+t.pad+crcSize]
	t.arena = t.arena[:n+t.pad+crcSize]
	clear(tr)
	if t.c.crc {
		var crc uint32
		for _, p := range t.iov[t.start:] {
			crc = crc32.Update(crc, crcTable, p)
		}
		crc = crc32.Update(crc, crcTable, tr[:t.pad])
		putCRC(tr[t.pad:], crc)
	}
	t.iov = append(t.iov, tr)
}

// sglCursor walks a gather list in payload-sized pieces.
type sglCursor struct {
	sgl []rdma.SGE
	i   int
	off int
}

// take appends the next n bytes of the list to the FPDU as payload pieces.
func (s *sglCursor) take(t *txState, n int) {
	for n > 0 && s.i < len(s.sgl) {
		b := s.sgl[s.i].Bytes()
		k := min(n, len(b)-s.off)
		t.payload(b[s.off : s.off+k])
		s.off += k
		n -= k
		if s.off == len(b) {
			s.i++
			s.off = 0
		}
	}
}

// skipEmpty moves past zero-length SGEs.
func (s *sglCursor) skipEmpty() {
	for s.i < len(s.sgl) && s.sgl[s.i].Length == 0 {
		s.i++
	}
}

// emitSend segments a Send message (RFC 5040 §5.3, RFC 5041 §5.1): untagged
// queue 0, one MSN for all its segments, MO the segment's message offset.
func (t *txState) emitSend(e *sqEntry) {
	op := uint8(opSend)
	var inv uint32
	if e.wr.Op == rdma.OpSendInvalidate {
		op = opSendInvalidate
		inv = e.wr.InvalidateRKey
	}
	if e.wr.Solicited {
		op += opSendSE - opSend // 3->5, 4->6
	}
	msn := e.msn
	cur := sglCursor{sgl: e.sgl}
	for off := 0; ; {
		n := min(e.length-off, t.c.maxPayload)
		last := off+n == e.length
		h := t.begin(ddpUntaggedHdrLen, n)
		putUntagged(h, last, op, inv, qnSend, msn, uint32(off))
		cur.skipEmpty()
		cur.take(t, n)
		t.end()
		off += n
		if last {
			return
		}
	}
}

// emitTagged segments a tagged message (RDMA Write or Read Response) to
// (stag, to...).
func (t *txState) emitTagged(op uint8, stag uint32, to uint64, sgl []rdma.SGE, data []byte, length int) {
	cur := sglCursor{sgl: sgl}
	for off := 0; ; {
		n := min(length-off, t.c.maxPayload)
		last := off+n == length
		h := t.begin(ddpTaggedHdrLen, n)
		putTagged(h, last, op, stag, to+uint64(off))
		if data != nil {
			t.payload(data[off : off+n])
		} else {
			cur.skipEmpty()
			cur.take(t, n)
		}
		t.end()
		off += n
		if last {
			return
		}
	}
}

// emitReadRequest sends an RDMA Read Request (RFC 5040 §4.4): untagged
// queue 1, a single segment.
func (t *txState) emitReadRequest(msn uint32, r readRequest) {
	h := t.begin(readReqHdrLen, 0)
	putUntagged(h, true, opReadRequest, 0, qnReadReq, msn, 0)
	putReadRequest(h[ddpUntaggedHdrLen:], r)
	t.end()
}

// emitTerminate sends a Terminate message (RFC 5040 §4.8): untagged queue 2.
func (t *txState) emitTerminate(ti *termInfo) {
	p := ti.payload()
	h := t.begin(ddpUntaggedHdrLen, len(p))
	putUntagged(h, true, opTerminate, 0, qnTerminate, t.msn[qnTerminate], 0)
	t.msn[qnTerminate]++
	t.payload(p)
	t.end()
}

// taken is a send queue entry handed to the writer: its ring index and
// sequence number (a confirmed entry's slot may be reused before the writer
// marks it sent).
type taken struct {
	idx int
	seq uint64
}

// writer is the connection's sending goroutine: it takes queued Read
// Responses and send work, builds their FPDUs and writes them in batches.
func (c *conn) writer() {
	defer c.wg.Done()
	t := &c.tx
	for {
		select {
		case <-c.txWake:
		case <-c.done:
		}
		for {
			c.mu.Lock()
			if c.err != nil {
				term := c.term
				c.term = nil
				c.mu.Unlock()
				if term != nil {
					// A write cut short by fail's deadline may leave a
					// partial FPDU; the Terminate is still worth a try.
					c.nc.SetWriteDeadline(time.Now().Add(terminateWriteTimeout))
					t.err = nil
					t.reset()
					t.emitTerminate(term)
					t.flush()
					c.lingerClose()
				}
				return
			}
			t.takeIRQ = t.takeIRQ[:0]
			for c.irqTx < c.irqLen {
				i := (c.irqHead + c.irqTx) % len(c.irq)
				t.takeIRQ = append(t.takeIRQ, i)
				c.irqTx++
				if c.irq[i].counted {
					c.irqCounted--
				}
			}
			t.takeSQ = t.takeSQ[:0]
		take:
			for c.sqUntx > 0 && len(t.takeSQ) < txMaxWRs {
				e := &c.sq[c.sqNext]
				switch e.wr.Op {
				case rdma.OpRDMARead:
					if c.orqLen >= c.caps.ORD {
						break take // ORD reached (fences count): wait for a response
					}
					e.msn = t.msn[qnReadReq]
					t.msn[qnReadReq]++
					c.orq[(c.orqHead+c.orqLen)%len(c.orq)] = orqEntry{idx: c.sqNext}
					c.orqLen++
					c.fenced = e.seq + 1
				case rdma.OpSend, rdma.OpSendInvalidate:
					e.msn = t.msn[qnSend]
					t.msn[qnSend]++
				}
				t.takeSQ = append(t.takeSQ, taken{c.sqNext, e.seq})
				c.txSeq = e.seq + 1
				c.sqNext = (c.sqNext + 1) % len(c.sq)
				c.sqUntx--
			}
			fence, fenceMSN := false, uint32(0)
			if c.confirm && c.txSeq > c.fenced && c.orqLen < c.caps.ORD && c.fencesOut < c.maxFences {
				fence, fenceMSN = true, t.msn[qnReadReq]
				t.msn[qnReadReq]++
				c.orq[(c.orqHead+c.orqLen)%len(c.orq)] = orqEntry{idx: -1, fence: true, upTo: c.txSeq}
				c.orqLen++
				c.fencesOut++
				c.fenced = c.txSeq
			}
			c.mu.Unlock()
			if len(t.takeIRQ) == 0 && len(t.takeSQ) == 0 && !fence {
				break
			}
			// The entries taken are stable until they complete, and they
			// complete only after being marked sent below (or on fail,
			// after which nothing is posted again).
			for _, i := range t.takeIRQ {
				r := &c.irq[i]
				t.emitTagged(opReadResponse, r.sinkSTag, r.sinkTO, nil, r.data, len(r.data))
			}
			for _, tk := range t.takeSQ {
				e := &c.sq[tk.idx]
				switch e.wr.Op {
				case rdma.OpSend, rdma.OpSendInvalidate:
					t.emitSend(e)
				case rdma.OpRDMAWrite:
					t.emitTagged(opRDMAWrite, e.wr.Remote.RKey, e.wr.Remote.Addr, e.sgl, nil, e.length)
				case rdma.OpRDMARead:
					t.emitReadRequest(e.msn, readRequest{
						SinkSTag: e.sinkSTag, SinkTO: e.sinkTO, Size: uint32(e.length),
						SourceSTag: e.wr.Remote.RKey, SourceTO: e.wr.Remote.Addr,
					})
				}
			}
			if fence {
				t.emitReadRequest(fenceMSN, readRequest{})
			}
			t.flush()
			if t.err != nil {
				c.fail(fmt.Errorf("iwarp: connection lost: %w", t.err), nil)
				continue
			}
			c.mu.Lock()
			if c.err == nil {
				for range t.takeIRQ {
					c.irq[c.irqHead] = inboundRead{}
					c.irqHead = (c.irqHead + 1) % len(c.irq)
					c.irqLen--
					c.irqTx--
				}
				for _, tk := range t.takeSQ {
					e := &c.sq[tk.idx]
					if e.seq != tk.seq {
						continue // confirmed, completed and the slot reused
					}
					e.sent = true
					if e.state != sqQueued {
						continue // already confirmed or answered
					}
					if e.wr.Op == rdma.OpRDMARead || c.confirm {
						e.state = sqSent
					} else {
						e.state = sqDone
					}
				}
				c.advanceSQLocked()
			}
			c.mu.Unlock()
		}
	}
}
