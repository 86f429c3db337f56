package iwarp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

func qp(ird, ord int) rdma.QPConfig {
	return rdma.QPConfig{SendDepth: 8, RecvDepth: 8, MaxSGE: 2, IRD: ird, ORD: ord}
}

// TestMPAExchange runs the pure MPA decisions of both sides against each
// other: RFC 6581 §5 IRD/ORD, RFC 5044 §7.1 CRC and revision fallback,
// peer-to-peer RTR choice.
func TestMPAExchange(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		ini, rsp             mpaParams
		wantWord             string // reply's IRD/ORD word, hex; "" for none
		iniIRD, iniORD       int
		rspIRD, rspORD       int
		crc                  bool
		rtr                  RTRType
		iniErr, rspErr, rejc bool
	}{
		{name: "siw-like", ini: mpaParams{Revision: 2, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, QP: qp(4, 4)},
			wantWord: "00040004", iniIRD: 4, iniORD: 4, rspIRD: 4, rspORD: 4},
		{name: "ORD cut", ini: mpaParams{Revision: 2, QP: qp(2, 16)}, rsp: mpaParams{Revision: 2, QP: qp(8, 16)},
			wantWord: "00080002", iniIRD: 2, iniORD: 8, rspIRD: 8, rspORD: 2},
		{name: "responder asks CRC", ini: mpaParams{Revision: 2, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, CRC: true, QP: qp(4, 4)},
			wantWord: "00040004", iniIRD: 4, iniORD: 4, rspIRD: 4, rspORD: 4, crc: true},
		{name: "v1 responder", ini: mpaParams{Revision: 2, CRC: true, QP: qp(4, 4)}, rsp: mpaParams{Revision: 1, QP: qp(2, 2)},
			iniIRD: 4, iniORD: 4, rspIRD: 2, rspORD: 2, crc: true},
		{name: "v1 initiator", ini: mpaParams{Revision: 1, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, QP: qp(2, 2)},
			iniIRD: 4, iniORD: 4, rspIRD: 2, rspORD: 2},
		{name: "p2p write", ini: mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)},
			wantWord: "80048004", iniIRD: 4, iniORD: 4, rspIRD: 4, rspORD: 4, rtr: RTRWrite},
		{name: "p2p read only", ini: mpaParams{Revision: 2, PeerToPeer: true, RTR: RTRRead, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)},
			wantWord: "80044004", iniIRD: 4, iniORD: 4, rspIRD: 4, rspORD: 4, rtr: RTRRead},
		{name: "p2p responder off", ini: mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)}, rsp: mpaParams{Revision: 2, QP: qp(4, 4)},
			wantWord: "00040004", iniIRD: 4, iniORD: 4, rspIRD: 4, rspORD: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mpaRequest(tc.ini, []byte("login"))
			b := req.marshal()
			req2, err := parseMPAFrame(b, false)
			if err != nil {
				t.Fatal(err)
			}
			if mpaRequestRefused(req2) != nil {
				t.Fatal("request refused")
			}
			rep, ro, err := mpaReply(tc.rsp, req2, false, []byte("ok"))
			if err != nil {
				t.Fatal(err)
			}
			rep2, err := parseMPAFrame(rep.marshal(), true)
			if err != nil {
				t.Fatal(err)
			}
			w, enh, pd := rep2.ulpPrivateData()
			if string(pd) != "ok" || enh != (tc.wantWord != "") {
				t.Fatalf("reply pd %q enhanced %v", pd, enh)
			}
			if enh {
				var wb [4]byte
				w.put(wb[:])
				if !bytes.Equal(wb[:], unhex(t, tc.wantWord)) {
					t.Fatalf("reply word %x, want %s", wb, tc.wantWord)
				}
			}
			io, ipd, err := mpaInitiatorOutcome(tc.ini, req, rep2)
			if err != nil {
				t.Fatal(err)
			}
			if string(ipd) != "ok" {
				t.Fatalf("initiator pd %q", ipd)
			}
			if io.Caps.IRD != tc.iniIRD || io.Caps.ORD != tc.iniORD || ro.Caps.IRD != tc.rspIRD || ro.Caps.ORD != tc.rspORD {
				t.Fatalf("initiator IRD/ORD %d/%d responder %d/%d", io.Caps.IRD, io.Caps.ORD, ro.Caps.IRD, ro.Caps.ORD)
			}
			if io.CRC != tc.crc || ro.CRC != tc.crc || io.RTR != tc.rtr || ro.RTR != tc.rtr {
				t.Fatalf("crc %v/%v rtr %v/%v", io.CRC, ro.CRC, io.RTR, ro.RTR)
			}
			if io.IRDLimit != tc.ini.QP.IRD || ro.IRDLimit != tc.rsp.QP.IRD {
				t.Fatalf("IRD limits %d/%d", io.IRDLimit, ro.IRDLimit)
			}
		})
	}
}

func TestMPAExchangeFailures(t *testing.T) {
	ini := mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)}
	req := mpaRequest(ini, nil)
	// A reject carries the consumer private data after the IRD/ORD word.
	rej, _, _ := mpaReply(mpaParams{Revision: 2, QP: qp(4, 4)}, req, true, []byte("no"))
	_, _, err := mpaInitiatorOutcome(ini, req, rej)
	var re *rdma.RejectError
	if !errors.As(err, &re) || string(re.PrivateData) != "no" {
		t.Fatalf("reject: %v", err)
	}
	// Only a Send RTR offered: the responder rejects.
	sendOnly := mpaFrame{Revision: 2, Enhanced: true, PrivateData: unhex(t, "c0040004")}
	rep, _, err := mpaReply(mpaParams{Revision: 2, PeerToPeer: true, QP: qp(4, 4)}, sendOnly, false, nil)
	if err == nil || !rep.Reject {
		t.Fatalf("Send-only RTR: reject %v err %v", rep.Reject, err)
	}
	// A reply whose ORD exceeds our IRD, or that picks an RTR we did not offer.
	for _, word := range []string{"00040005", "80040001"} {
		rep := mpaFrame{Reply: true, Revision: 2, Enhanced: true, PrivateData: unhex(t, word)}
		p := ini
		if word == "80040001" {
			p.RTR = RTRRead
			req = mpaRequest(p, nil)
			rep.PrivateData = unhex(t, "80048001")
		}
		if _, _, err := mpaInitiatorOutcome(p, req, rep); err == nil {
			t.Fatalf("reply word %s accepted", word)
		}
	}
	for _, r := range []mpaFrame{{Markers: true, Revision: 2}, {Revision: 0}, {Revision: 3}} {
		if mpaRequestRefused(r) == nil {
			t.Fatalf("request %+v not refused", r)
		}
	}
}
