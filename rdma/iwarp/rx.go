package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"slices"

	"github.com/gosrp/gosrp/rdma"
)

// rxState is the reader goroutine's view of the inbound stream.
type rxState struct {
	hdr [mpaLenSize + readReqHdrLen + 8]byte // current FPDU header
	tr  [8]byte                              // pad + CRC
	msn [numQueues]uint32                    // next expected MSN per queue (from 1)
	// The Send message being received (segments after the first).
	active  bool
	cur     rdma.RecvWR
	curBuf  []byte
	got     int
	curMSN  uint32
	rtrRead bool // a zero-length Read Response (our RTR's) is expected
	crc     uint32
	// pieces are a Read Response's destinations in its sink (placeSGL),
	// work their copy that the read consumes.
	pieces, work [rxMaxPieces][]byte
	// bounce receives payloads checked before they reach a shared sink
	// (placeChecked).
	bounce []byte
	run    runState
}

func (r *rxState) init() {
	for i := range r.msn {
		r.msn[i] = 1
	}
}

// errTerminated stops the read loop after a Terminate was raised.
var errTerminated = errors.New("iwarp: terminated")

// reader is the connection's receiving goroutine.
func (c *conn) reader() {
	defer c.wg.Done()
	for {
		if err := c.readFPDU(); err != nil {
			if !errors.Is(err, errTerminated) {
				if errors.Is(err, io.EOF) {
					err = ErrPeerClosed
				} else if !errors.Is(err, net.ErrClosed) {
					err = fmt.Errorf("iwarp: connection lost: %w", err)
				}
				c.fail(err, nil)
			}
			return
		}
	}
}

// readerIdle runs when the reader is about to wait for input. While Read
// Responses are owed (RDMA Reads or completion fences on the wire) their
// data is on its way, and the completion hook runs on the writer goroutine
// (after the batch it was woken for) so that the consumer's work on what
// has completed overlaps the placement of what is still arriving, as a
// kernel consumer's completion handler runs in a workqueue while softirq
// places the next segments. Otherwise the reader runs the hook itself.
func (c *conn) readerIdle() {
	if c.hook.Load() != nil && c.cqNew.Load() {
		c.mu.Lock()
		owed := c.orqLen > 0
		c.mu.Unlock()
		if owed {
			c.kickWriter()
			return
		}
	}
	c.announce()
}

// violation builds the Terminate for the current FPDU's header.
func (c *conn) violation(layer, typ, code uint8, hl int, detail string, args ...any) *termInfo {
	t := &termInfo{Layer: layer, Type: typ, Code: code}
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	t.Detail = detail
	if hl > 0 && layer != LayerLLP {
		t.Hdr = append([]byte(nil), c.rx.hdr[:mpaLenSize+hl]...)
		h := parseControl(c.rx.hdr[mpaLenSize:])
		if layer == LayerRDMAP && !h.Tagged && h.Opcode == opReadRequest && hl >= readReqHdrLen {
			t.RDMAHdr = true
		} else if hl > ddpUntaggedHdrLen || (h.Tagged && hl > ddpTaggedHdrLen) {
			// Only the DDP header when the RDMA header is not asked for.
			n := ddpUntaggedHdrLen
			if h.Tagged {
				n = ddpTaggedHdrLen
			}
			t.Hdr = t.Hdr[:mpaLenSize+n]
		}
	}
	return t
}

// reject skips the rest of a violating FPDU (to check its CRC first: a
// corrupted header is a CRC error, not a DDP one), then raises t.
func (c *conn) reject(t *termInfo, rest int) error {
	if c.crc && rest >= 0 {
		for rest > 0 {
			b, err := c.br.Peek(min(rest, c.br.Size()))
			if len(b) == 0 {
				return err
			}
			c.rx.crc = crc32.Update(c.rx.crc, crcTable, b)
			c.br.Discard(len(b))
			rest -= len(b)
		}
		if _, err := io.ReadFull(c.br, c.rx.tr[:crcSize]); err != nil {
			return err
		}
		if getCRC(c.rx.tr[:]) != c.rx.crc {
			t = &termInfo{Layer: LayerLLP, Type: LLPTypeMPA, Code: LLPCRCError, Detail: "FPDU CRC mismatch"}
		}
	}
	c.terminate(t)
	return errTerminated
}

// readFPDU reads and processes one FPDU. It returns errTerminated after a
// violation (Terminate raised) or the stream's error.
func (c *conn) readFPDU() error {
	rx := &c.rx
	hdr := rx.hdr[:]
	if _, err := io.ReadFull(c.br, hdr[:mpaLenSize+2]); err != nil {
		return err
	}
	raceAcquire()
	ulpdu := int(binary.BigEndian.Uint16(hdr))
	h := parseControl(hdr[mpaLenSize:])
	hl := h.hdrLen()
	if ulpdu < hl {
		// The segment cannot even hold its header: the stream is not
		// parseable from here on.
		c.terminate(&termInfo{Layer: LayerDDP, Type: DDPLocalCatastrophic, Code: ddpCatastrophicCode,
			Detail: fmt.Sprintf("ULPDU_Length %d shorter than its %d-byte DDP header", ulpdu, hl)})
		return errTerminated
	}
	if _, err := io.ReadFull(c.br, hdr[mpaLenSize+2:mpaLenSize+hl]); err != nil {
		return err
	}
	h, _ = parseDDPHeader(hdr[mpaLenSize : mpaLenSize+hl])
	n := ulpdu - hl
	pad := padLen(ulpdu)
	// rest is what follows the header up to the CRC field.
	rest := n + pad
	if c.crc {
		rx.crc = crc32.Update(0, crcTable, hdr[:mpaLenSize+hl])
	}

	// DDP, then RDMAP, version and opcode checks (RFC 5041 §7.2, RFC 5040 §7.2).
	if h.DDPVersion != ddpVersion {
		if h.Tagged {
			return c.reject(c.violation(LayerDDP, DDPTaggedBuffer, DDPTInvalidVersion, hl, "DDP version %d", h.DDPVersion), rest)
		}
		return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUInvalidVersion, hl, "DDP version %d", h.DDPVersion), rest)
	}
	if !h.Tagged && h.QN >= numQueues {
		return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUInvalidQN, hl, "QN %d", h.QN), rest)
	}
	if h.RDMAPVersion != rdmapVersion {
		return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPInvalidVersion, hl, "RDMAP version %d", h.RDMAPVersion), rest)
	}
	if h.Tagged {
		switch h.Opcode {
		case opRDMAWrite:
			return c.rxWrite(&h, hl, n, pad)
		case opReadResponse:
			return c.rxReadResponse(&h, hl, n, pad)
		}
		return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPUnexpectedOpcode, hl, "opcode %d in a tagged segment", h.Opcode), rest)
	}
	switch {
	case h.Opcode >= opSend && h.Opcode <= opSendSEInvalid && h.QN == qnSend:
		return c.rxSend(&h, hl, n, pad)
	case h.Opcode == opReadRequest && h.QN == qnReadReq:
		return c.rxReadRequest(&h, hl, n, pad)
	case h.Opcode == opTerminate && h.QN == qnTerminate:
		return c.rxTerminate(&h, hl, n, pad)
	}
	return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPUnexpectedOpcode, hl, "opcode %d on untagged queue %d", h.Opcode, h.QN), rest)
}

// place reads n payload bytes into dst, then the pad and CRC, and verifies
// the CRC.
func (c *conn) place(dst []byte, pad int) error {
	if err := c.br.readPayload(dst, c.rx.tr[:pad+crcSize]); err != nil {
		return err
	}
	one := [1][]byte{dst}
	return c.checkCRC(one[:], pad)
}

// checkCRC verifies, with CRCs on, the CRC of an FPDU whose payload was
// read into pieces, its pad and CRC into c.rx.tr.
func (c *conn) checkCRC(pieces [][]byte, pad int) error {
	if !c.crc {
		return nil
	}
	crc := c.rx.crc
	for _, p := range pieces {
		crc = crc32.Update(crc, crcTable, p)
	}
	crc = crc32.Update(crc, crcTable, c.rx.tr[:pad])
	if got := getCRC(c.rx.tr[pad:]); got != crc {
		c.terminate(&termInfo{Layer: LayerLLP, Type: LLPTypeMPA, Code: LLPCRCError,
			Detail: fmt.Sprintf("FPDU CRC %#08x, computed %#08x", got, crc)})
		return errTerminated
	}
	return nil
}

// checkTagged finds the region for a tagged access of n bytes at (stag, to)
// needing right; it returns the destination/source slice or the Terminate
// (RFC 5041 §7.2 tagged buffer errors; rights are RDMAP's, RFC 5040 §7.2).
func (c *conn) checkTagged(stag uint32, to uint64, n int, right rdma.Access, readReq bool, hl int) ([]byte, *termInfo) {
	m, off, t := c.findTagged(stag, to, n, right, readReq, hl)
	if t != nil {
		return nil, t
	}
	return m.buf[off : off+n], nil
}

// findTagged is checkTagged returning the region and the access's offset
// in it.
func (c *conn) findTagged(stag uint32, to uint64, n int, right rdma.Access, readReq bool, hl int) (*memoryRegion, int, *termInfo) {
	layer, typ := uint8(LayerDDP), uint8(DDPTaggedBuffer)
	invalid, bounds := uint8(DDPTInvalidSTag), uint8(DDPTBaseBounds)
	if readReq {
		layer, typ = LayerRDMAP, RDMAPRemoteProtection
		invalid, bounds = RDMAPInvalidSTag, RDMAPBaseBounds
	}
	m := c.dev.lookup(stag)
	if m == nil {
		return nil, 0, c.violation(layer, typ, invalid, hl, "STag %#x", stag)
	}
	if m.access&right == 0 {
		return nil, 0, c.violation(LayerRDMAP, RDMAPRemoteProtection, RDMAPAccessRights, hl, "STag %#x grants %v", stag, m.access)
	}
	if to < m.addr || to-m.addr > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-(to-m.addr) {
		return nil, 0, c.violation(layer, typ, bounds, hl, "%d bytes at TO %#x outside STag %#x [%#x,+%d)", n, to, stag, m.addr, len(m.buf))
	}
	return m, int(to - m.addr), nil
}

// rxWrite places an RDMA Write segment (RFC 5040 §5.1). A zero-length
// segment names no memory and is accepted whatever its STag (ib_srpt sends
// one with STag 0 after the handshake). Into a region registered with
// rdma.AccessPlaceAhead, a segment that is not its message's last is read
// with the segments predicted after it, up to the region's end (placeRun).
func (c *conn) rxWrite(h *ddpHeader, hl, n, pad int) error {
	if n == 0 {
		return c.place(nil, pad)
	}
	m, off, t := c.findTagged(h.STag, h.TO, n, rdma.AccessRemoteWrite, false, hl)
	if t != nil {
		return c.reject(t, n+pad)
	}
	if !h.Last && m.access&rdma.AccessPlaceAhead != 0 {
		if _, _, ran, err := c.placeRun(nil, m.buf, len(m.buf), h.TO, off, n, pad); ran {
			return err
		}
	}
	return c.place(m.buf[off:off+n], pad)
}

// rxReadResponse places an RDMA Read Response segment into the oldest
// outstanding Read's scatter list (RFC 5040 §5.2: responses come in request
// order) and completes the Read on the last segment. The response to a
// completion fence confirms the send work before it.
func (c *conn) rxReadResponse(h *ddpHeader, hl, n, pad int) error {
	rx := &c.rx
	if rx.rtrRead {
		// The first Read Response answers our peer-to-peer RTR.
		if n != 0 || !h.Last {
			return c.reject(c.violation(LayerLLP, LLPTypeMPA, LLPNoMatchingRTR, hl, "%d-byte response to the RTR Read", n), n+pad)
		}
		rx.rtrRead = false
		return c.place(nil, pad)
	}
	c.mu.Lock()
	if err := c.err; err != nil {
		// The Reads were flushed: their sinks may be in use again.
		c.mu.Unlock()
		return err
	}
	var oe orqEntry
	var e *sqEntry
	ok := c.orqLen > 0
	if ok {
		oe = c.orq[c.orqHead]
		if !oe.fence {
			e = &c.sq[oe.idx]
			c.rxPlacing, c.rxPlacingIdx = true, oe.idx
		}
	}
	c.mu.Unlock()
	if e != nil {
		defer c.placed(e)
	}
	if !ok {
		return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPUnexpectedOpcode, hl, "Read Response with no Read outstanding"), n+pad)
	}
	if e == nil {
		if n != 0 {
			return c.reject(c.violation(LayerDDP, DDPTaggedBuffer, DDPTBaseBounds, hl, "%d bytes in the response to a zero-length Read", n), n+pad)
		}
		if err := c.place(nil, pad); err != nil {
			return err
		}
	} else if n > 0 || e.length > 0 {
		// extra and last are the bytes and end of the predicted
		// segments placeRun placed with this one.
		if h.STag != e.sinkSTag {
			return c.reject(c.violation(LayerDDP, DDPTaggedBuffer, DDPTInvalidSTag, hl, "Read Response to STag %#x, sink STag %#x", h.STag, e.sinkSTag), n+pad)
		}
		off := h.TO - e.sinkTO
		if h.TO < e.sinkTO || off > uint64(e.length) || uint64(n) > uint64(e.length)-off {
			return c.reject(c.violation(LayerDDP, DDPTaggedBuffer, DDPTBaseBounds, hl, "%d bytes at TO %#x outside the %d-byte sink at %#x", n, h.TO, e.length, e.sinkTO), n+pad)
		}
		// The response fills the sink in order and exactly (as Linux siw,
		// siw_rresp_check_ntoh): a segment that skips or rewrites bytes, or
		// a last segment short of the RDMA Read Message Size, would leave
		// bytes of the sink the peer never sent.
		if off != uint64(e.placed) || h.Last && e.placed+n != e.length {
			return c.reject(c.violation(LayerDDP, DDPTaggedBuffer, DDPTBaseBounds, hl, "%d bytes at offset %d of the %d-byte sink, %d placed so far (last %v)", n, off, e.length, e.placed, h.Last), n+pad)
		}
		extra, last, ran, err := 0, false, false, error(nil)
		if !h.Last {
			extra, last, ran, err = c.placeRun(e.sgl, nil, e.length, h.TO, int(off), n, pad)
		}
		if !ran {
			err = c.placeSGL(e.sgl, int(off), n, pad)
		}
		if err != nil {
			return err
		}
		e.placed += n + extra
		h.Last = h.Last || last
	} else if err := c.place(nil, pad); err != nil {
		return err
	}
	if !h.Last {
		return nil
	}
	c.mu.Lock()
	if c.err == nil {
		c.orqHead = (c.orqHead + 1) % len(c.orq)
		c.orqLen--
		bound := oe.upTo
		if oe.fence {
			c.fencesOut--
		}
		if e != nil {
			e.state = sqDone
			bound = e.seq
		}
		c.confirmLocked(bound)
		c.advanceSQLocked()
	}
	c.mu.Unlock()
	// A Read may wait for ORD, or send work for its fence.
	c.kickWriter()
	return nil
}

// placeChecked is placeSGL for a sink with local regions while MPA CRCs
// are on: a local region is memory its consumer shares (a RAM LUN's, which
// a concurrent WRITE may change), so the payload is read into a buffer of
// the reader's own, checked, and only then copied into the sink: the CRC
// covers the bytes received, and a corrupt payload never reaches the sink.
func (c *conn) placeChecked(sgl []rdma.SGE, off, n, pad int) error {
	if cap(c.rx.bounce) < n {
		c.rx.bounce = make([]byte, max(n, 64<<10))
	}
	b := c.rx.bounce[:n]
	if err := c.place(b, pad); err != nil {
		return err
	}
	for _, s := range sgl {
		if len(b) == 0 {
			break
		}
		d := s.Bytes()
		if off >= len(d) {
			off -= len(d)
			continue
		}
		b = b[copy(d[off:], b):]
		off = 0
	}
	return nil
}

// placed ends the reader's placement into e's sink (rxReadResponse): if
// the connection failed meanwhile, the flush left e alone (flushLocked),
// and it is flushed now that the reader no longer writes its sink.
func (c *conn) placed(e *sqEntry) {
	c.mu.Lock()
	flushed := false
	if c.rxPlacing {
		c.rxPlacing = false
		if c.err != nil && e.state != sqDone {
			e.state, e.status, e.err = sqDone, rdma.StatusFlushed, c.err
			c.advanceSQLocked()
			flushed = true
		}
	}
	c.mu.Unlock()
	if flushed {
		c.kickPoller()
		c.signalCQ()
		c.announce()
	}
}

// placeSGL reads n payload bytes into the scatter list at byte offset off,
// then checks pad and CRC: in one readv(2) when the bytes fall in at most
// rxMaxPieces of its elements.
func (c *conn) placeSGL(sgl []rdma.SGE, off, n, pad int) error {
	if c.crc && slices.ContainsFunc(sgl, func(s rdma.SGE) bool { return isLocalRegion(s.MR) }) {
		return c.placeChecked(sgl, off, n, pad)
	}
	pieces, all := appendSink(c.rx.pieces[:0], sgl, off, n, rxMaxPieces)
	if all && len(pieces) > 1 {
		defer clear(c.rx.pieces[:len(pieces)])
		work := c.rx.work[:len(pieces)]
		copy(work, pieces)
		err := c.br.readPayloadV(work, c.rx.tr[:pad+crcSize])
		clear(work)
		if err != nil {
			return err
		}
		return c.checkCRC(pieces, pad)
	}
	clear(pieces)
	crc := c.rx.crc
	for _, s := range sgl {
		if n == 0 {
			break
		}
		b := s.Bytes()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		k := min(n, len(b)-off)
		dst := b[off : off+k]
		if k == n {
			// The last piece: read with the trailer (see rxReader).
			c.rx.crc = crc
			return c.place(dst, pad)
		}
		if _, err := io.ReadFull(c.br, dst); err != nil {
			return err
		}
		if c.crc {
			crc = crc32.Update(crc, crcTable, dst)
		}
		n -= k
		off = 0
	}
	c.rx.crc = crc
	return c.place(nil, pad)
}

// rxSend places a Send segment into the receive buffer at the head of the
// receive queue (RFC 5041 §5.3, untagged queue 0) and completes it on the
// last segment.
func (c *conn) rxSend(h *ddpHeader, hl, n, pad int) error {
	rx := &c.rx
	rest := n + pad
	if rx.active {
		if h.MSN != rx.curMSN {
			return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUMSNRange, hl, "MSN %d while message %d is incomplete", h.MSN, rx.curMSN), rest)
		}
		if int64(h.MO) != int64(rx.got) {
			return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUInvalidMO, hl, "MO %d, expected %d", h.MO, rx.got), rest)
		}
	} else {
		if h.MSN != rx.msn[qnSend] {
			return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUMSNRange, hl, "MSN %d, expected %d", h.MSN, rx.msn[qnSend]), rest)
		}
		if h.MO != 0 {
			return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUInvalidMO, hl, "MO %d on the first segment", h.MO), rest)
		}
		c.mu.Lock()
		ok := c.err == nil
		if ok && c.srq != nil {
			// The shared receive queue's oldest buffer.
			rx.cur, ok = c.srq.take()
		} else if ok && c.rqLen > 0 {
			rx.cur = c.rq[c.rqHead]
			c.rq[c.rqHead] = rdma.RecvWR{}
			c.rqHead = (c.rqHead + 1) % len(c.rq)
			c.rqLen--
		} else {
			ok = false
		}
		if !ok {
			c.mu.Unlock()
			return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUNoBuffer, hl, "no receive buffer posted for MSN %d", h.MSN), rest)
		}
		c.rxBusy, c.rxBusyID = true, rx.cur.ID
		c.mu.Unlock()
		rx.active, rx.curMSN, rx.got = true, h.MSN, 0
		rx.curBuf = rx.cur.Local.Bytes()
	}
	if n > len(rx.curBuf)-rx.got {
		t := c.violation(LayerDDP, DDPUntaggedBuffer, DDPUMessageTooLong, hl, "%d bytes at MO %d into a %d-byte buffer", n, h.MO, len(rx.curBuf))
		t.recvStatus = rdma.StatusLocalLength
		return c.reject(t, rest)
	}
	if err := c.place(rx.curBuf[rx.got:rx.got+n], pad); err != nil {
		return err
	}
	rx.got += n
	if !h.Last {
		return nil
	}
	comp := rdma.Completion{ID: rx.cur.ID, Op: rdma.OpRecv, ByteLen: rx.got,
		Solicited: h.Opcode == opSendSE || h.Opcode == opSendSEInvalid}
	if h.Opcode == opSendInvalidate || h.Opcode == opSendSEInvalid {
		if !c.dev.invalidate(h.InvalidateSTag) {
			return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPCannotInvalidate, hl, "STag %#x", h.InvalidateSTag), -1)
		}
		comp.Invalidated, comp.InvalidatedRKey = true, h.InvalidateSTag
	}
	rx.active, rx.curBuf, rx.cur = false, nil, rdma.RecvWR{}
	rx.msn[qnSend]++
	c.mu.Lock()
	if c.err == nil {
		c.rxBusy = false
		c.cq = append(c.cq, cqEntry{c: comp})
	}
	c.mu.Unlock()
	c.kickPoller()
	return nil
}

// rxReadRequest checks an RDMA Read Request (RFC 5040 §5.2, untagged queue
// 1) and queues its response for the writer. The source is checked now.
func (c *conn) rxReadRequest(h *ddpHeader, hl, n, pad int) error {
	rx := &c.rx
	rest := n + pad
	if h.MSN != rx.msn[qnReadReq] {
		return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUMSNRange, hl, "Read Request MSN %d, expected %d", h.MSN, rx.msn[qnReadReq]), rest)
	}
	if h.MO != 0 {
		return c.reject(c.violation(LayerDDP, DDPUntaggedBuffer, DDPUInvalidMO, hl, "Read Request MO %d", h.MO), rest)
	}
	if n != 0 || !h.Last {
		return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPUnspecified, hl, "Read Request with %d payload bytes, last %v", n, h.Last), rest)
	}
	rr := parseReadRequest(rx.hdr[mpaLenSize+ddpUntaggedHdrLen:])
	var data []byte
	if rr.Size > 0 {
		var t *termInfo
		data, t = c.checkTagged(rr.SourceSTag, rr.SourceTO, int(rr.Size), rdma.AccessRemoteRead, true, hl)
		if t != nil {
			return c.reject(t, rest)
		}
	}
	if err := c.place(nil, pad); err != nil {
		return err
	}
	c.mu.Lock()
	if c.irqCounted >= c.irdLimit {
		c.mu.Unlock()
		return c.reject(c.violation(LayerRDMAP, RDMAPRemoteOperation, RDMAPCatastrophicStream, hl, "more than IRD %d Read Requests outstanding", c.irdLimit), -1)
	}
	if c.err == nil {
		c.irq[(c.irqHead+c.irqLen)%len(c.irq)] = inboundRead{sinkSTag: rr.SinkSTag, sinkTO: rr.SinkTO, data: data, counted: true}
		c.irqLen++
		c.irqCounted++
	}
	c.mu.Unlock()
	rx.msn[qnReadReq]++
	c.kickWriter()
	return nil
}

// rxTerminate reports the peer's Terminate and takes the connection down.
func (c *conn) rxTerminate(h *ddpHeader, hl, n, pad int) error {
	body := make([]byte, min(n, 256))
	if _, err := io.ReadFull(c.br, body); err != nil {
		return err
	}
	c.br.Discard(n - len(body))
	te, err := parseTerminate(body)
	if err != nil {
		te = &rdma.TerminateError{Layer: LayerRDMAP, Type: RDMAPRemoteOperation, Code: RDMAPUnspecified, Detail: err.Error()}
	}
	c.attribute(te, body)
	c.fail(te, nil)
	return errTerminated
}

// termStatus maps a peer's Terminate to the status of the work request that
// caused it (the verbs statuses of an iWARP QP's send queue).
func termStatus(te *rdma.TerminateError) rdma.Status {
	switch {
	case te.Layer == LayerDDP && te.Type == DDPTaggedBuffer,
		te.Layer == LayerRDMAP && te.Type == RDMAPRemoteProtection:
		return rdma.StatusRemoteAccess
	case te.Layer == LayerDDP && te.Type == DDPUntaggedBuffer && te.Code == DDPUNoBuffer:
		return rdma.StatusRNRRetryExceeded
	case te.Layer == LayerDDP && te.Type == DDPUntaggedBuffer:
		return rdma.StatusRemoteInvalidRequest
	}
	return rdma.StatusRemoteOperation
}

// attribute finds the send work request a peer's Terminate is about, from
// the terminated header it copies (RFC 5040 §4.8): an RDMA Write by STag and
// TO, a Send or RDMA Read Request by MSN; failing that, the oldest work
// request transmitted and not complete. That request completes with the
// Terminate's status, unconfirmed work before it succeeded (the peer
// processes in order), the rest flushes.
func (c *conn) attribute(te *rdma.TerminateError, body []byte) {
	var ctl ddpHeader
	known := false
	if len(body) >= termCtrlLen+mpaLenSize+2 && body[2]&termFlagD != 0 {
		if h, err := parseDDPHeader(body[termCtrlLen+mpaLenSize:]); err == nil {
			ctl, known = h, true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	match := -1
	first := -1
	for i := 0; i < c.sqLen; i++ {
		idx := (c.sqHead + i) % len(c.sq)
		e := &c.sq[idx]
		if e.state == sqDone {
			continue
		}
		if e.seq >= c.txSeq {
			break // not transmitted
		}
		if first < 0 {
			first = i
		}
		if !known {
			break
		}
		switch {
		case ctl.Tagged && ctl.Opcode == opRDMAWrite && e.wr.Op == rdma.OpRDMAWrite:
			if e.wr.Remote.RKey == ctl.STag && ctl.TO >= e.wr.Remote.Addr && ctl.TO-e.wr.Remote.Addr <= uint64(e.length) {
				match = i
			}
		case !ctl.Tagged && ctl.QN == qnSend && (e.wr.Op == rdma.OpSend || e.wr.Op == rdma.OpSendInvalidate):
			if e.msn == ctl.MSN {
				match = i
			}
		case !ctl.Tagged && ctl.QN == qnReadReq && e.wr.Op == rdma.OpRDMARead:
			if e.msn == ctl.MSN {
				match = i
			}
		}
		if match >= 0 {
			break
		}
	}
	if match < 0 {
		match = first
	}
	if match < 0 {
		return
	}
	for i := 0; i < match; i++ {
		e := &c.sq[(c.sqHead+i)%len(c.sq)]
		if e.state != sqDone && e.wr.Op != rdma.OpRDMARead {
			e.state = sqDone
		}
	}
	e := &c.sq[(c.sqHead+match)%len(c.sq)]
	e.state, e.status, e.err = sqDone, termStatus(te), te
}
