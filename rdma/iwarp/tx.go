package iwarp

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

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
	// rc writes without blocking (flushNB); nil when the connection is not
	// a TCP socket, and then posters never transmit.
	rc     syscall.RawConn
	vec    []unix.Iovec
	wrote  int
	werrno syscall.Errno
	writeF func(fd uintptr) bool
	block  bool // writev waits for room in the socket (flush)
	// snap holds copies of shared payloads (Read Responses, local
	// regions) covered by a CRC until they are written.
	snap []byte
}

func (t *txState) init(c *conn) {
	t.c = c
	t.w = c.nc
	if tc, ok := c.nc.(*net.TCPConn); ok && txInline {
		if rc, err := tc.SyscallConn(); err == nil {
			t.rc = rc
			t.vec = make([]unix.Iovec, 0, txMaxIOV+8)
			t.writeF = t.writev
		}
	}
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
	if t.rc != nil {
		// The raw path, waiting in Go's poller while the socket is full.
		t.block = true
		done := false
		for !done {
			done = t.flushNB() // false after a partial write: the rest follows
		}
		t.block = false
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

// txInline lets posters transmit (benchmarks compare without it).
var txInline = true

// writev is the raw write callback of flushNB: one writev(2) of t.vec;
// on a full socket it waits for room only when t.block is set.
func (t *txState) writev(fd uintptr) bool {
	// Non-blocking: a raw system call, as rxReader.readv.
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.vec[0])), uintptr(len(t.vec)))
	for e == unix.EINTR {
		n, _, e = unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.vec[0])), uintptr(len(t.vec)))
	}
	t.wrote, t.werrno = int(n), e
	return !t.block || e != unix.EAGAIN
}

// flushNB writes the gathered FPDUs as far as the socket takes them
// without waiting. It reports whether all went out; the rest stays
// gathered for flush. An error other than the socket being full is left in
// t.err (reported as written).
func (t *txState) flushNB() bool {
	if len(t.iov) == 0 || t.err != nil {
		t.reset()
		return true
	}
	raceRelease()
	t.vec = t.vec[:0]
	for _, p := range t.iov {
		if len(p) > 0 {
			v := unix.Iovec{Base: &p[0]}
			v.SetLen(len(p))
			t.vec = append(t.vec, v)
		}
	}
	if len(t.vec) == 0 {
		t.reset()
		return true
	}
	if err := t.rc.Write(t.writeF); err != nil {
		t.err = err
		t.reset()
		return true
	}
	clear(t.vec)
	switch {
	case t.werrno == unix.EAGAIN:
		return false
	case t.werrno != 0:
		t.err = t.werrno
		t.reset()
		return true
	}
	// Drop what was written; a partial write leaves the rest for flush.
	n := t.wrote
	k := 0
	for k < len(t.iov) && n >= len(t.iov[k]) {
		n -= len(t.iov[k])
		k++
	}
	if k == len(t.iov) {
		t.reset()
		return true
	}
	t.iov[k] = t.iov[k][n:]
	rest := copy(t.iov, t.iov[k:])
	clear(t.iov[rest:])
	t.iov = t.iov[:rest]
	return false
}

func (t *txState) reset() {
	clear(t.iov)
	t.iov = t.iov[:0]
	t.arena = t.arena[:0]
	t.snap = t.snap[:0]
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

// snapshot appends a copy of p, memory others may change while the FPDU
// waits for writev, to the FPDU being built.
func (t *txState) snapshot(p []byte) {
	k := len(t.snap)
	t.snap = slices.Grow(t.snap, len(p))[:k+len(p)]
	copyShared(t.snap[k:], p)
	t.payload(t.snap[k : k+len(p) : k+len(p)])
}

// isLocalRegion reports whether mr is one of Device.LocalRegion's.
func isLocalRegion(mr rdma.MemoryRegion) bool {
	m, ok := mr.(*memoryRegion)
	return ok && m.stag == 0
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
		if t.c.crc && isLocalRegion(s.sgl[s.i].MR) {
			// A local region is memory the consumer shares (a RAM
			// backstore's pages, which a concurrent WRITE may change):
			// the bytes sent must be those the CRC covers.
			t.snapshot(b[s.off : s.off+k])
		} else {
			t.payload(b[s.off : s.off+k])
		}
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
		if data != nil && t.c.crc {
			// A Read Response's source is the responder's registered
			// memory, which the peer's next RDMA WRITE (placed by the
			// reader meanwhile: RFC 5040 §5.5 lets it pass the Read) or
			// the local consumer may change before writev copies it: the
			// bytes sent must be the bytes the CRC covers, so they are
			// copied first.
			t.snapshot(data[off : off+n])
		} else if data != nil {
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

// Transmission is owned by one goroutine at a time (conn.txOwned): the
// writer goroutine, or a poster (PostSend) that finds the writer idle and
// sends its own work at once, without waking the writer: one goroutine
// hand-off less per message. A poster never blocks on the socket: what the
// socket does not take at once is handed over to the writer, which also
// takes over after txInlineRounds batches so a poster is not kept
// transmitting other posters' work.
const txInlineRounds = 2

// txInlineBytes bounds a poster's batch, in payload bytes, well inside
// what one gather list holds, so that building it never has to flush (a
// blocking write) halfway; larger work and Read Responses are the
// writer's.
const txInlineBytes = 2 << 20

// writer is the connection's sending goroutine: it takes queued Read
// Responses and send work, builds their FPDUs and writes them in batches.
func (c *conn) writer() {
	defer c.wg.Done()
	waitOwner := false
	for {
		if waitOwner {
			// A poster transmits; it kicks when it lets go.
			<-c.txWake
		} else {
			select {
			case <-c.txWake:
			case <-c.done:
			}
		}
		// Let the goroutines that are ready to post (those a batch of
		// completions woke) queue their work first: one write for all.
		runtime.Gosched()
		var exit bool
		exit, waitOwner = c.txRun(true)
		c.announce()
		if exit {
			return
		}
	}
}

// txRun transmits until nothing is left to send. blocking is the writer
// goroutine's run; a poster's run (blocking false) writes without waiting
// for the socket and hands over to the writer when it would have to. exit
// tells the writer to end (the connection failed and its Terminate is
// out); owned that another goroutine transmits.
func (c *conn) txRun(blocking bool) (exit, owned bool) {
	t := &c.tx
	c.mu.Lock()
	switch {
	case c.txOwned && blocking && c.txHandoff:
		// Finish the batch a poster could not write at once.
		c.txHandoff = false
		c.mu.Unlock()
		t.flush()
		if t.err != nil {
			c.fail(fmt.Errorf("iwarp: connection lost: %w", t.err), nil)
		}
		c.mu.Lock()
		c.markSentLocked()
	case c.txOwned:
		if blocking {
			c.txWanted = true
		}
		c.mu.Unlock()
		return false, true
	default:
		c.txOwned = true
	}
	for round := 0; ; round++ {
		// c.mu is held here.
		if c.err != nil {
			if !blocking {
				c.releaseTxLocked(true)
				c.mu.Unlock()
				return false, false
			}
			c.txOwned = false
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
			return true, false
		}
		if !blocking && round == txInlineRounds {
			c.releaseTxLocked(true)
			c.mu.Unlock()
			return false, false
		}
		fence, fenceMSN := c.takeLocked(!blocking)
		if len(t.takeIRQ) == 0 && len(t.takeSQ) == 0 && !fence {
			// Nothing more, or only work a poster leaves to the writer.
			c.releaseTxLocked(c.sqUntx > 0 || c.irqTx < c.irqLen)
			c.mu.Unlock()
			return false, false
		}
		c.mu.Unlock()
		c.emitTaken(fence, fenceMSN)
		if blocking {
			t.flush()
		} else if !t.flushNB() {
			// The socket is full: the writer writes the rest.
			c.mu.Lock()
			c.txHandoff = true
			c.mu.Unlock()
			c.kickWriter()
			return false, false
		}
		if t.err != nil {
			c.fail(fmt.Errorf("iwarp: connection lost: %w", t.err), nil)
		}
		c.mu.Lock()
		c.markSentLocked()
	}
}

// releaseTxLocked gives up transmission; the writer is woken when it waits
// for it or, with kick, to carry on with what is left.
func (c *conn) releaseTxLocked(kick bool) {
	c.txOwned = false
	if c.txWanted || kick {
		c.txWanted = false
		c.kickWriter()
	}
}

// takeLocked takes the queued Read Responses and send work for one batch
// into c.tx.takeIRQ / takeSQ, and a completion fence if one is due. A
// poster's batch (inline) takes no Read Response and at most
// txInlineBytes of send work.
func (c *conn) takeLocked(inline bool) (fence bool, fenceMSN uint32) {
	t := &c.tx
	t.takeIRQ = t.takeIRQ[:0]
	for !inline && c.irqTx < c.irqLen {
		i := (c.irqHead + c.irqTx) % len(c.irq)
		t.takeIRQ = append(t.takeIRQ, i)
		c.irqTx++
		if c.irq[i].counted {
			c.irqCounted--
		}
	}
	t.takeSQ = t.takeSQ[:0]
	bytes := 0
take:
	for c.sqUntx > 0 && len(t.takeSQ) < txMaxWRs {
		e := &c.sq[c.sqNext]
		if inline {
			if e.wr.Op != rdma.OpRDMARead {
				bytes += e.length
			}
			if bytes > txInlineBytes {
				break
			}
		}
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
	if c.confirm && c.txSeq > c.fenced && c.orqLen < c.caps.ORD && c.fencesOut < c.maxFences {
		fence, fenceMSN = true, t.msn[qnReadReq]
		t.msn[qnReadReq]++
		c.orq[(c.orqHead+c.orqLen)%len(c.orq)] = orqEntry{idx: -1, fence: true, upTo: c.txSeq}
		c.orqLen++
		c.fencesOut++
		c.fenced = c.txSeq
	}
	return fence, fenceMSN
}

// emitTaken builds the FPDUs of the batch takeLocked took. The entries
// taken are stable until they complete, and they complete only after
// being marked sent (or on fail, after which nothing is posted again).
func (c *conn) emitTaken(fence bool, fenceMSN uint32) {
	t := &c.tx
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
}

// markSentLocked records that the batch in c.tx.takeIRQ / takeSQ is on
// the wire.
func (c *conn) markSentLocked() {
	t := &c.tx
	if c.err != nil {
		return
	}
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
	t.takeIRQ, t.takeSQ = t.takeIRQ[:0], t.takeSQ[:0]
	c.advanceSQLocked()
}
