package iwarp

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// sendRTR sends the initiator's ready-to-receive message of RFC 6581 §4
// peer-to-peer mode, before the connection starts: a zero-length RDMA Write
// (STag 0, TO 0) or a zero-length RDMA Read Request (whose zero-length Read
// Response the reader then consumes).
func (c *conn) sendRTR(rtr RTRType) error {
	t := &c.tx
	switch rtr {
	case RTRWrite:
		h := t.begin(ddpTaggedHdrLen, 0)
		putTagged(h, true, opRDMAWrite, 0, 0)
		t.end()
	case RTRRead:
		h := t.begin(readReqHdrLen, 0)
		putUntagged(h, true, opReadRequest, 0, qnReadReq, t.msn[qnReadReq], 0)
		t.msn[qnReadReq]++
		putReadRequest(h[ddpUntaggedHdrLen:], readRequest{})
		t.end()
		c.rx.rtrRead = true
	}
	t.flush()
	if t.err != nil {
		return fmt.Errorf("%w: sending RTR: %v", errHandshake, t.err)
	}
	return nil
}

// awaitRTR reads the initiator's RTR (the first FPDU in peer-to-peer mode)
// before the connection starts. Anything else gets a Terminate (MPA layer,
// "no matching RTR", RFC 6581 §7). A Read RTR's response is queued for the
// writer.
func (c *conn) awaitRTR(rtr RTRType) error {
	rx := &c.rx
	hdr := rx.hdr[:]
	if _, err := io.ReadFull(c.br, hdr[:mpaLenSize+2]); err != nil {
		return fmt.Errorf("%w: reading RTR: %v", errHandshake, err)
	}
	ulpdu := int(binary.BigEndian.Uint16(hdr))
	h := parseControl(hdr[mpaLenSize:])
	ok := false
	switch rtr {
	case RTRWrite:
		ok = h.Tagged && h.Opcode == opRDMAWrite && ulpdu == ddpTaggedHdrLen
	case RTRRead:
		ok = !h.Tagged && h.Opcode == opReadRequest && ulpdu == readReqHdrLen
	}
	if !ok {
		t := &c.tx
		t.emitTerminate(&termInfo{Layer: LayerLLP, Type: LLPTypeMPA, Code: LLPNoMatchingRTR})
		t.flush()
		return fmt.Errorf("%w: first FPDU (opcode %d, tagged %v, %d bytes) is not the RTR", errHandshake, h.Opcode, h.Tagged, ulpdu)
	}
	rest := hdr[mpaLenSize+2 : mpaLenSize+ulpdu+padLen(ulpdu)+crcSize]
	if _, err := io.ReadFull(c.br, rest); err != nil {
		return fmt.Errorf("%w: reading RTR: %v", errHandshake, err)
	}
	body := mpaLenSize + ulpdu + padLen(ulpdu)
	if c.crc && crc32.Checksum(hdr[:body], crcTable) != getCRC(hdr[body:]) {
		return fmt.Errorf("%w: RTR CRC mismatch", errHandshake)
	}
	full, _ := parseDDPHeader(hdr[mpaLenSize : mpaLenSize+ulpdu])
	if rtr == RTRRead {
		rr := parseReadRequest(hdr[mpaLenSize+ddpUntaggedHdrLen:])
		if full.MSN != 1 || rr.Size != 0 {
			return fmt.Errorf("%w: RTR Read Request MSN %d size %d", errHandshake, full.MSN, rr.Size)
		}
		rx.msn[qnReadReq] = 2
		c.irq[0] = inboundRead{sinkSTag: rr.SinkSTag, sinkTO: rr.SinkTO}
		c.irqLen = 1
	}
	return nil
}
