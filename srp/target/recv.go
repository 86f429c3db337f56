package target

import (
	"errors"
	"fmt"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

// Receive buffers beyond twice the request limit: room for the IUs that
// spend no credit (SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP) and a login IU.
//
// The ring holds 2*RQSize+extraRecv buffers because a command keeps its
// receive buffer (which may hold its immediate data) until its SRP_RSP send
// completes, while the initiator may reuse the credit as soon as it sees the
// response: up to RQSize answered-but-unreleased commands plus RQSize new
// requests can be in the ring at once. iWARP has no RNR retry, so a SEND
// finding no receive buffer is fatal to the connection (RFC 5041 §7.2).
const extraRecv = 4

func (c *channel) recvSlot(i int) []byte { return c.ring.slot(i) }

// postRecv posts receive slots again: to the channel's queue pair, or to
// the port's shared receive queue (even while the channel closes: the
// buffers belong to every channel), each held slot once.
func (c *channel) postRecv(slots ...int) {
	if c.srq != nil {
		k := 0
		for _, s := range slots {
			if _, ok := c.held[s]; ok {
				delete(c.held, s)
				slots[k] = s
				k++
			}
		}
		if k == 0 {
			return
		}
		if err := c.srq.PostRecv(c.recvWRs(slots[:k])...); err != nil && !errors.Is(err, rdma.ErrClosed) {
			c.log.Error("posting receive buffers to the shared receive queue failed; they are lost", "n", k, "err", err)
		}
		return
	}
	if c.state >= stateDisconnecting {
		return
	}
	if err := c.conn.PostRecv(c.recvWRs(slots)...); err != nil {
		c.log.Warn("post receive failed", "err", err)
		c.closeNow("post receive failed")
	}
}

// onRecv handles one receive completion.
func (c *channel) onRecv(wc *rdma.Completion) {
	slot := int(wc.ID)
	if slot < 0 || slot >= c.ring.n {
		c.log.Error("receive completion for unknown slot", "slot", slot)
		return
	}
	if c.srq != nil {
		// The slot left the shared queue for this channel, whatever the
		// status: it is the channel's to post back.
		c.held[slot] = struct{}{}
		if wc.Status != rdma.StatusSuccess || c.state >= stateDisconnecting {
			c.postRecv(slot)
		}
		// An initiator within its credit never has more IUs in the target
		// than a private ring holds; one far beyond it would starve the
		// other channels of the shared buffers: cut it off.
		if len(c.held) > c.nRecv && c.state < stateDisconnecting {
			c.stats.errors.Add(1)
			c.log.Warn("initiator overran its credit on the shared receive queue; closing the channel", "held", len(c.held), "limit", c.nRecv)
			c.postRecv(slot)
			c.closeNow("credit overrun on the shared receive queue")
			return
		}
	}
	if wc.Status != rdma.StatusSuccess {
		if wc.Status != rdma.StatusFlushed {
			c.stats.errors.Add(1)
			c.log.Warn("receive failed", "status", wc.Status, "err", wc.Err)
			c.closeNow("receive failed")
		}
		return
	}
	if c.state >= stateDisconnecting {
		return
	}
	c.setRecvLen(slot, wc.ByteLen)
	if c.state == stateConnecting && c.nx == nil {
		c.onLoginIU(slot)
		return
	}
	c.wait.push(slot)
	c.runWait()
}

// setRecvLen records the received length of a slot.
func (c *channel) setRecvLen(slot, n int) { c.ring.lens[slot] = n }

func (c *channel) iu(slot int) []byte {
	n := c.ring.lens[slot]
	b := c.recvSlot(slot)
	if n > len(b) {
		n = len(b)
	}
	return b[:n]
}

// recvWRs describes receive slots as work requests, in the channel's
// scratch list (providers copy what is posted).
func (c *channel) recvWRs(slots []int) []rdma.RecvWR {
	c.rwrs = c.rwrs[:0]
	for _, s := range slots {
		c.rwrs = append(c.rwrs, c.ring.wr(s))
	}
	return c.rwrs
}

// runWait dispatches parked IUs in arrival order until one cannot run.
func (c *channel) runWait() {
	if c.inRunWait {
		return // the outer call continues with the next parked IU
	}
	c.inRunWait = true
	defer func() { c.inRunWait = false }()
	for c.wait.len() > 0 && c.state == stateLive {
		// Off the list while it runs: a close during dispatch drops (and
		// reposts) only the IUs still parked.
		slot := *c.wait.front()
		c.wait.pop()
		if !c.dispatch(slot) {
			c.wait.unpop(slot)
			return
		}
	}
	// Credit given back while dispatching (an IU that needs no response)
	// may need an SRP_CRED_REQ now that nothing is parked.
	c.maybeCredReq()
}

// dispatch starts one IU. It returns false when the IU must stay parked
// (no free send context for its response).
func (c *channel) dispatch(slot int) bool {
	b := c.iu(slot)
	if len(b) == 0 {
		c.unexpectedIU(slot, b)
		return true
	}
	op := srp.Opcode(b[0])
	switch op {
	case srp.OpCmd, srp.OpTskMgmt:
		if len(c.freeSend) == 0 {
			return false
		}
		if !c.cred.request() && !c.warnedLim {
			c.warnedLim = true
			c.log.Warn("initiator sent a request without credit (req_lim 0); processing it anyway", "op", op)
		}
		send := c.freeSend[len(c.freeSend)-1]
		c.freeSend = c.freeSend[:len(c.freeSend)-1]
		c.nCmds++
		if int64(c.nCmds) > c.stats.maxOutstanding.Load() {
			c.stats.maxOutstanding.Store(int64(c.nCmds))
		}
		if op == srp.OpCmd {
			c.stats.commands.Add(1)
			c.startCmd(slot, send, b)
		} else {
			c.stats.tmfs.Add(1)
			c.startTMF(slot, send, b)
		}
	case srp.OpILogout:
		c.log.Info("initiator logout")
		c.postRecv(slot)
		c.closeNow("SRP_I_LOGOUT")
	case srp.OpCredRsp, srp.OpAerRsp:
		if op == srp.OpCredRsp {
			c.credReqOut = false
		}
		c.postRecv(slot)
		c.maybeCredReq()
	default:
		c.unexpectedIU(slot, b)
	}
	return true
}

// unexpectedIU applies the policy for an IU a target port does not accept
// on a live channel: an unknown opcode, or a misdirected one (an IU the
// target itself sends, such as SRP_RSP or SRP_LOGIN_RSP, or a second
// SRP_LOGIN_REQ), or an empty SEND. The first one is logged and its credit handed back (the
// next SRP_RSP or an SRP_CRED_REQ carries it), so req_lim stays what the
// initiator expects; a second one on the same channel gets SRP_T_LOGOUT
// with reason 2 (invalid IU type code; T10 SRP r16a §6.6) and the channel
// closes. Linux ib_srpt (srpt_handle_new_iu) logs "received IU with
// unknown opcode", reposts the buffer and keeps the credit, forever.
func (c *channel) unexpectedIU(slot int, b []byte) {
	c.postRecv(slot)
	c.stats.errors.Add(1)
	c.badIUs++
	n, opcode, op := len(b), "none", "empty IU"
	if n > 0 {
		opcode, op = fmt.Sprintf("0x%02x", b[0]), srp.Opcode(b[0]).String()
	}
	if c.badIUs == 1 {
		// Only a request the initiator paid for is paid back: when it held
		// no credit it spent none.
		if c.cred.request() {
			c.cred.release()
		}
		c.log.Warn("unexpected IU ignored, credit returned; another one closes the channel", "opcode", opcode, "op", op, "len", n)
		c.maybeCredReq()
		return
	}
	c.log.Warn("second unexpected IU on the channel; logging it out", "opcode", opcode, "op", op, "len", n, "count", c.badIUs)
	c.logout(srp.TLogoutInvalidIUType, "unexpected IU "+opcode)
}
