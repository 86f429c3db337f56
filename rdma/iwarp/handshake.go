package iwarp

import (
	"fmt"

	"github.com/gosrp/gosrp/rdma"
)

// The MPA exchange as pure decisions (frames in, frames and outcomes out);
// Dial and ConnRequest do the socket I/O around them.

// mpaParams are one side's settings for an MPA exchange.
type mpaParams struct {
	Revision   uint8 // highest revision spoken: 1 or 2
	CRC        bool  // ask for CRC (C bit)
	PeerToPeer bool
	RTR        RTRType       // RTR types offered as initiator (0: Write and Read)
	QP         rdma.QPConfig // queue sizes and IRD/ORD, defaults applied
}

func (d *Device) mpaParams(q rdma.QPConfig) mpaParams {
	return mpaParams{Revision: uint8(d.cfg.MPARevision), CRC: d.cfg.CRC, PeerToPeer: d.cfg.PeerToPeer, RTR: d.cfg.RTR, QP: q}
}

// mpaOutcome is what an accepted exchange settled.
type mpaOutcome struct {
	Caps rdma.Caps
	// IRDLimit is the IRD we advertised (Read Requests beyond it are
	// refused); Caps.IRD may be lower, the peer's negotiated ORD.
	IRDLimit int
	CRC      bool    // FPDUs carry CRC32c: either side asked (RFC 5044 §7.1)
	RTR      RTRType // peer-to-peer RTR to send (initiator) or await (responder)
	// Negotiated: IRD/ORD came from an RFC 6581 exchange (else the peer's
	// IRD is unknown).
	Negotiated bool
}

func baseCaps(q rdma.QPConfig) rdma.Caps {
	return rdma.Caps{SendDepth: q.SendDepth, RecvDepth: q.RecvDepth, MaxSGE: q.MaxSGE, IRD: q.IRD, ORD: q.ORD}
}

// mpaRequest is the initiator's request: revision 2 with the H flag and the
// RFC 6581 §5 IRD/ORD word (P bit and RTR offers in peer-to-peer mode), or
// revision 1 with the private data alone.
func mpaRequest(p mpaParams, pd []byte) mpaFrame {
	req := mpaFrame{CRC: p.CRC, Revision: 1, PrivateData: pd}
	if p.Revision >= 2 {
		w := mpaV2Word{IRD: clampCount(p.QP.IRD), ORD: clampCount(p.QP.ORD)}
		if p.PeerToPeer {
			w.PeerToPeer = true
			w.WriteRTR = p.RTR == 0 || p.RTR == RTRWrite
			w.ReadRTR = p.RTR == 0 || p.RTR == RTRRead
		}
		req.Revision, req.Enhanced = 2, true
		req.PrivateData = make([]byte, mpaV2WordLen+len(pd))
		w.put(req.PrivateData)
		copy(req.PrivateData[mpaV2WordLen:], pd)
	}
	return req
}

// mpaInitiatorOutcome judges the reply to req: a reject is a
// *rdma.RejectError with the peer's private data; markers, a revision above
// the request's, a peer ORD above our IRD or an RTR we did not offer fail.
// Otherwise our ORD is cut to the responder's IRD and our IRD is the
// responder's ORD (RFC 6581 §5). It returns the reply's consumer private data.
func mpaInitiatorOutcome(p mpaParams, req, rep mpaFrame) (mpaOutcome, []byte, error) {
	w, enhanced, pd := rep.ulpPrivateData()
	if rep.Reject {
		return mpaOutcome{}, nil, &rdma.RejectError{PrivateData: append([]byte(nil), pd...), Reason: "MPA reject"}
	}
	if rep.Markers {
		return mpaOutcome{}, nil, fmt.Errorf("%w: peer requires MPA markers", errHandshake)
	}
	if rep.Revision != 1 && rep.Revision != 2 || rep.Revision > req.Revision {
		return mpaOutcome{}, nil, fmt.Errorf("%w: reply revision %d to a revision %d request", errHandshake, rep.Revision, req.Revision)
	}
	o := mpaOutcome{Caps: baseCaps(p.QP), IRDLimit: p.QP.IRD, CRC: req.CRC || rep.CRC}
	if !enhanced {
		return o, pd, nil
	}
	offered, _, _ := req.ulpPrivateData()
	if int(w.ORD) > p.QP.IRD {
		return mpaOutcome{}, nil, fmt.Errorf("%w: peer ORD %d exceeds our IRD %d", errHandshake, w.ORD, p.QP.IRD)
	}
	o.Caps.ORD = min(p.QP.ORD, int(w.IRD))
	o.Caps.IRD = int(w.ORD)
	o.Negotiated = true
	if offered.PeerToPeer && w.PeerToPeer {
		switch {
		case w.WriteRTR && offered.WriteRTR:
			o.RTR = RTRWrite
		case w.ReadRTR && offered.ReadRTR:
			o.RTR = RTRRead
		default:
			return mpaOutcome{}, nil, fmt.Errorf("%w: no matching RTR in the reply", errHandshake)
		}
	}
	return o, pd, nil
}

// mpaRequestRefused says why a request is answered with an MPA reject before
// the consumer sees it: markers (refused, as by Linux siw) or a revision
// other than 1 and 2.
func mpaRequestRefused(req mpaFrame) error {
	if req.Markers {
		return fmt.Errorf("%w: markers requested", errHandshake)
	}
	if req.Revision < 1 || req.Revision > 2 {
		return fmt.Errorf("%w: MPA revision %d", errHandshake, req.Revision)
	}
	return nil
}

// mpaReplyRevision is the revision a responder speaking up to ours answers
// req with, and whether the reply carries the IRD/ORD word.
func mpaReplyRevision(p mpaParams, req mpaFrame) (rev uint8, enhanced bool) {
	rev = min(req.Revision, p.Revision)
	return rev, rev == 2 && req.Enhanced && len(req.PrivateData) >= mpaV2WordLen
}

// mpaReply is the responder's reply to req carrying pd. Accepting, our ORD
// is cut to the initiator's IRD and our IRD (as reported) to its ORD, while
// the reply advertises our full IRD (RFC 6581 §5). In peer-to-peer mode we
// pick the Write RTR, else the Read RTR; a request offering only the Send
// RTR is rejected (it would consume a consumer receive buffer).
func mpaReply(p mpaParams, req mpaFrame, reject bool, pd []byte) (mpaFrame, mpaOutcome, error) {
	rev, enhanced := mpaReplyRevision(p, req)
	rep := mpaFrame{Reply: true, Reject: reject, Revision: rev, CRC: p.CRC || req.CRC, PrivateData: pd}
	o := mpaOutcome{Caps: baseCaps(p.QP), IRDLimit: p.QP.IRD, CRC: rep.CRC}
	var err error
	if enhanced {
		rw, _, _ := req.ulpPrivateData()
		w := mpaV2Word{IRD: clampCount(p.QP.IRD), ORD: clampCount(p.QP.ORD)}
		if !reject {
			o.Caps.ORD = min(p.QP.ORD, int(rw.IRD))
			o.Caps.IRD = min(p.QP.IRD, int(rw.ORD))
			o.Negotiated = true
			w.ORD = uint16(o.Caps.ORD)
			if rw.PeerToPeer && p.PeerToPeer {
				w.PeerToPeer = true
				switch {
				case rw.WriteRTR:
					o.RTR, w.WriteRTR = RTRWrite, true
				case rw.ReadRTR:
					o.RTR, w.ReadRTR = RTRRead, true
				default:
					rep.Reject = true
					err = fmt.Errorf("%w: no supported RTR offered (only Send)", errHandshake)
				}
			}
		}
		rep.Enhanced = true
		rep.PrivateData = make([]byte, mpaV2WordLen+len(pd))
		w.put(rep.PrivateData)
		copy(rep.PrivateData[mpaV2WordLen:], pd)
	}
	return rep, o, err
}
