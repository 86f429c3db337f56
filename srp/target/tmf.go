package target

import (
	"encoding/binary"

	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// tmfOp is one SRP_TSK_MGMT in progress.
type tmfOp struct {
	slot    int
	send    int
	tm      srp.TaskMgmt
	waitFor int   // commands (in NEED_DATA) still to finish before the core is asked
	local   bool  // ABORT TASK of a command that never reached the core
	code    uint8 // SRP_RSP response code
	// targets are the channel's commands in the core the TMF may abort,
	// taken when it was handed to the core.
	targets []cmdRef
}

func (c *channel) freeTMF(t *tmfOp) {
	c.postRecv(t.slot)
	c.freeSendCtx(t.send)
	c.runWait()
	c.maybeCredReq()
}

// startTMF handles an SRP_TSK_MGMT (T10 SRP r16a §6.7; ib_srpt
// srpt_handle_tsk_mgmt).
func (c *channel) startTMF(slot, send int, b []byte) {
	t := &tmfOp{slot: slot, send: send}
	if err := t.tm.Unmarshal(b); err != nil {
		if len(b) < 16 {
			c.stats.errors.Add(1)
			c.log.Warn("truncated SRP_TSK_MGMT dropped", "len", len(b))
			c.cred.release()
			c.freeTMF(t)
			return
		}
		t.tm.Tag = binary.BigEndian.Uint64(b[8:16])
		c.stats.errors.Add(1)
		c.log.Warn("malformed SRP_TSK_MGMT", "tag", t.tm.Tag, "err", err)
		t.code = srp.TMFRspInvalidIU
		c.sendTMFRsp(t)
		return
	}
	switch t.tm.Func {
	case srp.TMFAbortTask, srp.TMFAbortTaskSet, srp.TMFClearTaskSet, srp.TMFLUNReset, srp.TMFClearACA:
	default:
		t.code = srp.TMFRspNotSupported
		c.sendTMFRsp(t)
		return
	}
	c.log.Debug("task management", "fn", t.tm.Func, "lun", t.tm.LUN, "task", t.tm.TaskTag)
	// Commands still fetching data (or their descriptor table) are not yet
	// in the core: abort them here, and ask the core once they finished.
	for _, cmd := range c.cmds {
		if cmd.state != cmdNeedData || cmd.aborted {
			continue
		}
		hit := false
		switch t.tm.Func {
		case srp.TMFAbortTask:
			hit = cmd.tag == t.tm.TaskTag && cmd.lun == t.tm.LUN
		case srp.TMFAbortTaskSet, srp.TMFClearTaskSet, srp.TMFLUNReset:
			hit = cmd.lun == t.tm.LUN
		}
		if hit {
			cmd.aborted = true
			cmd.waiters = append(cmd.waiters, t)
			t.waitFor++
			if t.tm.Func == srp.TMFAbortTask {
				t.local = true
			}
		}
	}
	if t.waitFor == 0 {
		c.tmfReady(t)
	}
}

// tmfReady runs the TMF in the core once no command it aborts is still
// fetching data. An ABORT TASK whose task was fetching data is complete
// without asking the core.
func (c *channel) tmfReady(t *tmfOp) {
	if c.state != stateLive {
		c.freeTMF(t)
		return
	}
	if t.local {
		t.code = srp.TMFRspComplete
		c.sendTMFRsp(t)
		return
	}
	// The commands of this channel in the core that the TMF may abort. If
	// the core reports FUNCTION COMPLETE, those that have not answered yet
	// must not answer: their result may still be on its way to the loop,
	// behind the TMF's (see onTMFDone).
	for _, cmd := range c.cmds {
		if (cmd.state == cmdExec || cmd.state == cmdExecData) && cmd.lun == t.tm.LUN &&
			(t.tm.Func != srp.TMFAbortTask || cmd.tag == t.tm.TaskTag) {
			t.targets = append(t.targets, cmdRef{cmd, cmd.gen})
		}
	}
	c.executing++
	sess, ctx := c.nx.sess, c.ctx
	go func() {
		r := sess.TaskManagement(ctx, scsi.TMF(t.tm.Func), t.tm.LUN, t.tm.TaskTag)
		t.code = uint8(r)
		c.events <- event{tmf: t}
	}()
}

// onTMFDone handles the core's answer to a TMF. After FUNCTION COMPLETE
// the initiator holds the aborted commands dead (SAM-5 §7.2), so those of
// its targets whose results have not been answered yet are dropped when
// they arrive (their credit rides on a later response) rather than
// answered after the TMF's response.
func (c *channel) onTMFDone(t *tmfOp) {
	if t.code == srp.TMFRspComplete && t.tm.Func != srp.TMFClearACA {
		for _, r := range t.targets {
			if r.live() && (r.cmd.state == cmdExec || r.cmd.state == cmdExecData) {
				r.cmd.aborted = true
			}
		}
	}
	t.targets = nil
	c.sendTMFRsp(t)
}

// sendTMFRsp sends the TMF's SRP_RSP: RSPVALID, resp_data_len 4, the
// response code in byte 3 of the response data (ib_srpt
// srpt_build_tskmgmt_rsp).
func (c *channel) sendTMFRsp(t *tmfOp) {
	if c.state != stateLive {
		c.freeTMF(t)
		return
	}
	rsp := srp.Rsp{
		ReqLimDelta: uint32(c.cred.response()),
		Tag:         t.tm.Tag,
		Flags:       srp.RspValid,
		RespData:    []byte{0, 0, 0, t.code},
	}
	b, err := rsp.AppendTo(c.sendSlot(t.send)[:0])
	if err != nil {
		c.freeTMF(t)
		return
	}
	c.queueSend(t.send, len(b), false, wrRec{kind: wrTMFRsp, tmf: t, send: t.send}, c.ctxWRs(t.send))
}
