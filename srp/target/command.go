package target

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// SCSI status codes and sense used by the fabric itself (SAM-5 §5.3.1,
// SPC-4 §4.5.6 table 28).
const (
	statusGood           = 0x00
	statusCheckCondition = 0x02
	statusBusy           = 0x08
	statusTaskSetFull    = 0x28
)

// maxExternalDescs bounds an external descriptor table (in descriptors);
// larger tables get CHECK CONDITION. Linux ib_srp allows up to 2048
// (indirect_sg_entries).
const maxExternalDescs = 4096

// fixedSense returns fixed-format sense data (SPC-4 §4.5.3, response code
// 70h, additional length 10) for key/ASC/ASCQ.
func fixedSense(key, asc, ascq byte) []byte {
	s := make([]byte, 18)
	s[0] = 0x70
	s[2] = key
	s[7] = 10
	s[12] = asc
	s[13] = ascq
	return s
}

// senseInvalidFieldInCDB is ILLEGAL REQUEST, INVALID FIELD IN CDB (05/24/00):
// the answer to malformed descriptors, bidirectional commands and
// oversized transfers.
var senseInvalidFieldInCDB = fixedSense(0x05, 0x24, 0x00)

// senseOverlapped is ABORTED COMMAND, OVERLAPPED COMMANDS ATTEMPTED
// (0B/4E/00; SAM-5 §5.9): a new command reused the tag of an outstanding one.
var senseOverlapped = fixedSense(0x0b, 0x4e, 0x00)

// startCmd decodes an SRP_CMD and starts moving its data.
func (c *channel) startCmd(slot, send int, b []byte) {
	cmd := &command{slot: slot, send: send}
	var iu srp.Cmd
	imm := c.immOffset
	if imm == 0 {
		imm = srp.DefaultImmDataOffset
	}
	if err := iu.UnmarshalImm(b, imm); err != nil {
		if len(b) < 16 {
			c.stats.errors.Add(1)
			// Not even a tag to answer to: drop it and give its credit back.
			c.log.Warn("truncated SRP_CMD dropped", "len", len(b), "err", err)
			c.cred.release()
			c.freeCommand(cmd)
			return
		}
		cmd.tag = binary.BigEndian.Uint64(b[8:16])
		c.stats.errors.Add(1)
		c.log.Warn("malformed SRP_CMD", "tag", cmd.tag, "err", err)
		c.respond(cmd, statusCheckCondition, senseInvalidFieldInCDB, 0, 0)
		return
	}
	cmd.tag, cmd.lun, cmd.attr = iu.Tag, iu.LUN, scsi.TaskAttr(iu.TaskAttr)
	cmd.cdb = iu.CDB
	if old := c.cmds[cmd.tag]; old != nil {
		c.stats.errors.Add(1)
		c.log.Warn("SRP_CMD reuses an outstanding tag", "tag", cmd.tag)
		c.respond(cmd, statusCheckCondition, senseOverlapped, 0, 0)
		return
	}
	c.cmds[cmd.tag] = cmd
	if bad := c.checkData(cmd, &iu); bad != "" {
		c.stats.errors.Add(1)
		c.log.Warn("rejecting SRP_CMD data descriptors", "tag", cmd.tag, "why", bad)
		c.respond(cmd, statusCheckCondition, senseInvalidFieldInCDB, 0, 0)
		return
	}
	var err error
	if cmd.inLen > 0 {
		if cmd.inMR, err = c.getBuf(cmd.inLen); err != nil {
			c.busy(cmd, err)
			return
		}
		cmd.dataIn = cmd.inMR.Bytes()[:cmd.inLen]
	}
	switch iu.DataOut.Format {
	case srp.DescImm:
		cmd.dataOut = iu.ImmData
		cmd.outLen = len(iu.ImmData)
	case srp.DescDirect, srp.DescIndirect:
		if cmd.outMR, err = c.getBuf(cmd.outLen); err != nil {
			c.busy(cmd, err)
			return
		}
		cmd.dataOut = cmd.outMR.Bytes()[:cmd.outLen]
	}
	if ext := &iu.DataOut; ext.External() {
		c.fetchTable(cmd, ext, true)
		return
	}
	if ext := &iu.DataIn; ext.External() {
		c.fetchTable(cmd, ext, false)
		return
	}
	c.fetchDataOut(cmd)
}

// checkData validates the descriptors against our limits and records them
// in cmd. It returns why they are refused, or "".
func (c *channel) checkData(cmd *command, iu *srp.Cmd) string {
	out, in, outLen, inLen := iu.Data()
	of, inf := iu.DataOut.Format, iu.DataIn.Format
	if of != srp.DescNone && inf != srp.DescNone {
		return "bidirectional commands are not supported"
	}
	if outLen > uint64(c.cfg.MaxDataLen) || inLen > uint64(c.cfg.MaxDataLen) {
		return "data length over max_data_len"
	}
	if of == srp.DescImm {
		if c.immOffset == 0 {
			return "immediate data was not negotiated at login"
		}
		if c.immOffset+len(iu.ImmData) > c.cfg.MaxReqSize {
			return "immediate data beyond max_it_iu_len"
		}
	}
	for _, d := range [...]*srp.DataBuf{&iu.DataOut, &iu.DataIn} {
		if d.External() && uint64(d.Table.Len)/srp.DirectBufSize > maxExternalDescs {
			return "external descriptor table too long"
		}
		if d.Format == srp.DescIndirect && !d.External() {
			// The decoder checked that the inline list sums to Len.
			continue
		}
	}
	cmd.out = append(cmd.out[:0], out...)
	cmd.in = append(cmd.in[:0], in...)
	cmd.outLen, cmd.inLen = int(outLen), int(inLen)
	return ""
}

// fetchTable reads an indirect descriptor table that lies only in initiator
// memory (T10 SRP r16a §5.2.2.3; beyond Linux ib_srpt, which refuses it).
func (c *channel) fetchTable(cmd *command, d *srp.DataBuf, out bool) {
	n := int(d.Table.Len)
	mr, err := c.getBuf(n)
	if err != nil {
		c.busy(cmd, err)
		return
	}
	cmd.tableMR, cmd.tableOut = mr, out
	cmd.tableFor = n / srp.DirectBufSize
	cmd.state = cmdNeedData
	c.queueReads(cmd, mr, []srp.DirectBuf{d.Table})
}

// onTable parses a fetched descriptor table.
func (c *channel) onTable(cmd *command) {
	tb := cmd.tableMR.Bytes()
	descs := make([]srp.DirectBuf, cmd.tableFor)
	var sum uint64
	for i := range descs {
		p := tb[i*srp.DirectBufSize:]
		descs[i] = srp.DirectBuf{VA: binary.BigEndian.Uint64(p), Key: binary.BigEndian.Uint32(p[8:]), Len: binary.BigEndian.Uint32(p[12:])}
		sum += uint64(descs[i].Len)
	}
	c.putBuf(cmd.tableMR)
	cmd.tableMR = nil
	want := cmd.inLen
	if cmd.tableOut {
		want = cmd.outLen
	}
	if sum != uint64(want) {
		c.log.Warn("external descriptor table disagrees with the total length", "tag", cmd.tag, "sum", sum, "len", want)
		c.respond(cmd, statusCheckCondition, senseInvalidFieldInCDB, 0, 0)
		return
	}
	if cmd.tableOut {
		cmd.out = descs
	} else {
		cmd.in = descs
	}
	c.fetchDataOut(cmd)
}

// fetchDataOut queues the RDMA READs of the data-out buffer, or executes at
// once when there is nothing to read.
func (c *channel) fetchDataOut(cmd *command) {
	if cmd.outMR == nil || cmd.outLen == 0 {
		c.execute(cmd)
		return
	}
	cmd.state = cmdNeedData
	c.queueReads(cmd, cmd.outMR, cmd.out)
}

// queueReads splits descs into RDMA READs of at most MaxRDMASize bytes into
// mr, in order.
func (c *channel) queueReads(cmd *command, mr rdma.MemoryRegion, descs []srp.DirectBuf) {
	off := 0
	for _, d := range descs {
		for done := 0; done < int(d.Len); {
			n := min(int(d.Len)-done, c.cfg.MaxRDMASize)
			c.readQ = append(c.readQ, &readOp{cmd: cmd, wr: rdma.SendWR{
				Op:       rdma.OpRDMARead,
				Local:    []rdma.SGE{{MR: mr, Offset: off, Length: n}},
				Remote:   rdma.RemoteAddr{Addr: d.VA + uint64(done), RKey: d.Key},
				Signaled: true,
			}})
			cmd.readsLeft++
			off += n
			done += n
		}
	}
	if cmd.readsLeft == 0 {
		c.afterReads(cmd)
		return
	}
	c.pump()
}

func (c *channel) onReadDone(cmd *command, ok bool) {
	if !ok {
		cmd.readErr = true
	}
	cmd.readsLeft--
	if cmd.readsLeft > 0 {
		return
	}
	c.afterReads(cmd)
}

func (c *channel) afterReads(cmd *command) {
	switch {
	case cmd.readErr:
		// The queue pair is in error; no response can be sent.
		c.freeCommand(cmd)
	case cmd.aborted:
		c.log.Debug("command aborted while fetching data", "tag", cmd.tag)
		c.cred.release()
		c.freeCommand(cmd)
	case cmd.tableMR != nil:
		c.onTable(cmd)
	default:
		c.execute(cmd)
	}
}

// execute hands the command to the SCSI core in its own goroutine, so the
// receive path never waits for the backstore. Concurrency is bounded by the
// receive ring (each command holds its receive slot until it completes).
func (c *channel) execute(cmd *command) {
	if c.state != stateLive {
		c.freeCommand(cmd)
		return
	}
	cmd.state = cmdExec
	c.executing++
	c.stats.writeBytes.Add(uint64(len(cmd.dataOut)))
	sc := &scsi.Command{Tag: cmd.tag, LUN: cmd.lun, CDB: cmd.cdb, Attr: cmd.attr, DataOut: cmd.dataOut, DataIn: cmd.dataIn}
	sess, ctx := c.nx.sess, c.ctx
	go func() {
		res := sess.Execute(ctx, sc)
		c.events <- event{cmd: cmd, res: res}
	}()
}

// onExecuted turns a SCSI result into RDMA WRITEs and an SRP_RSP.
func (c *channel) onExecuted(cmd *command, res scsi.Result) {
	if c.state != stateLive {
		c.freeCommand(cmd)
		return
	}
	if res.Aborted || cmd.aborted {
		c.cred.release()
		c.freeCommand(cmd)
		return
	}
	var flags srp.RspFlags
	var outRes, inRes uint32
	// Residuals compare the descriptor total with the CDB's transfer length
	// (SAM-5 §5.4; LIO target_cmd_size_check: wanted > buffer is an
	// overflow, wanted < buffer an underflow).
	if res.DataOutWanted > cmd.outLen {
		flags |= srp.DataOutOver
		outRes = uint32(res.DataOutWanted - cmd.outLen)
	} else if res.DataOutWanted < cmd.outLen {
		flags |= srp.DataOutUnder
		outRes = uint32(cmd.outLen - res.DataOutWanted)
	}
	n := min(max(res.DataInLen, 0), cmd.inLen)
	if res.DataInWanted > cmd.inLen {
		flags |= srp.DataInOver
		inRes = uint32(res.DataInWanted - cmd.inLen)
	} else if n < cmd.inLen {
		flags |= srp.DataInUnder
		inRes = uint32(cmd.inLen - n)
	}
	c.stats.readBytes.Add(uint64(n))
	var writes []rdma.SendWR
	left, off := n, 0
	for _, d := range cmd.in {
		for done := 0; done < int(d.Len) && left > 0; {
			k := min(int(d.Len)-done, c.cfg.MaxRDMASize, left)
			writes = append(writes, rdma.SendWR{
				Op:     rdma.OpRDMAWrite,
				Local:  []rdma.SGE{{MR: cmd.inMR, Offset: off, Length: k}},
				Remote: rdma.RemoteAddr{Addr: d.VA + uint64(done), RKey: d.Key},
			})
			off += k
			done += k
			left -= k
		}
	}
	c.respondWith(cmd, res.Status, res.Sense, flags, outRes, inRes, writes)
}

// busy answers a command the target lacks a data buffer for, in an
// SRP_RSP that returns its credit. Over Config.MaxDataMemory the status is
// TASK SET FULL (SAM-5 §5.3.1: not enough resources to accept the command
// now; as LIO transport_generic_request_failure answers
// TCM_OUT_OF_RESOURCES); when registering the buffer fails, BUSY.
func (c *channel) busy(cmd *command, err error) {
	status := byte(statusBusy)
	if errors.Is(err, errDataMemory) {
		status = statusTaskSetFull
	}
	c.log.Warn("no buffer for command", "tag", cmd.tag, "status", status, "err", err)
	c.respond(cmd, status, nil, 0, 0)
}

func (c *channel) respond(cmd *command, status byte, sense []byte, outRes, inRes uint32) {
	c.respondWith(cmd, status, sense, 0, outRes, inRes, nil)
}

// respondWith builds the SRP_RSP in the command's send context (ib_srpt
// srpt_build_cmd_rsp: req_lim_delta = 1 + accumulated credit, sense
// truncated to max_ti_iu_len) and queues it behind the data-in writes.
func (c *channel) respondWith(cmd *command, status byte, sense []byte, flags srp.RspFlags, outRes, inRes uint32, writes []rdma.SendWR) {
	cmd.state = cmdRspSent
	// The initiator may reuse the tag as soon as it sees this response,
	// possibly before the SEND's completion reaches us: the tag is free now.
	if c.cmds[cmd.tag] == cmd {
		delete(c.cmds, cmd.tag)
	}
	maxSense := max(0, min(c.maxTI, c.cfg.MaxRspSize)-srp.RspSize)
	if len(sense) > maxSense {
		sense = sense[:maxSense]
	}
	if len(sense) > 0 {
		flags |= srp.SnsValid
	}
	if status == statusCheckCondition {
		c.stats.checkConditions.Add(1)
	}
	rsp := srp.Rsp{
		ReqLimDelta:   uint32(c.cred.response()),
		Tag:           cmd.tag,
		Flags:         flags,
		Status:        status,
		DataOutResCnt: outRes,
		DataInResCnt:  inRes,
		Sense:         sense,
	}
	b, err := rsp.AppendTo(c.sendSlot(cmd.send)[:0])
	if err != nil {
		c.log.Error("encode SRP_RSP", "err", err)
		c.freeCommand(cmd)
		return
	}
	c.queueSend(cmd.send, len(b), false, &wrRec{kind: wrRsp, cmd: cmd, send: cmd.send}, writes)
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
		if cmd.state == cmdExec && cmd.lun == t.tm.LUN &&
			(t.tm.Func != srp.TMFAbortTask || cmd.tag == t.tm.TaskTag) {
			t.targets = append(t.targets, cmd)
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
		for _, cmd := range t.targets {
			if cmd.state == cmdExec {
				cmd.aborted = true
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
	c.queueSend(t.send, len(b), false, &wrRec{kind: wrTMFRsp, tmf: t, send: t.send}, nil)
}

// onLoginIU handles the first IU of a connection accepted without private
// data: it must be a 64-byte SRP_LOGIN_REQ, answered with an SRP_LOGIN_RSP
// or an SRP_LOGIN_REJ (then the channel closes) in a SEND.
func (c *channel) onLoginIU(slot int) {
	b := c.iu(slot)
	var reason srp.RejectReason
	var tag uint64
	lr, err := srp.UnmarshalLoginRequest(b)
	var pl *pendingLogin
	if err != nil {
		c.log.Warn("first IU is not a login", "err", err)
		reason = srp.RejUnableEstablishChannel
		if len(b) >= 16 {
			tag = binary.BigEndian.Uint64(b[8:16])
		}
	} else {
		tag = lr.Tag
		pl, reason = c.port.prepareLogin(lr, c.conn.RemoteAddr(), c, c.log)
	}
	i := c.cfg.RQSize + sendLogout
	if reason != 0 {
		c.log.Info("login rejected", "reason", reason)
		iu := rejectIU(tag, reason)
		n := copy(c.sendSlot(i), iu)
		c.transition(evLogout)
		c.pendClose = true
		c.queueSend(i, n, false, &wrRec{kind: wrLogout, send: -1}, nil)
		c.armLogoutTimer()
		return
	}
	c.port.mu.Lock()
	pl.attachLocked(c)
	c.port.mu.Unlock()
	c.maxTI = int(lr.ReqITIULen)
	c.loginFlags = lr.ReqFlags
	c.immOffset = pl.immOffset
	if c.immOffset > 0 && c.immOffset != srp.DefaultImmDataOffset {
		c.log.Debug("immediate data will not be 512-byte aligned (receive ring set up before the login)", "offset", c.immOffset)
	}
	rsp := c.loginResponse(lr.Tag, pl.rspFlags)
	n := copy(c.sendSlot(i), rsp)
	c.queueSend(i, n, false, &wrRec{kind: wrWrites, send: -1}, nil)
	c.postRecv(slot)
	c.port.closeTerminated(pl)
	c.transition(evEstablished)
}

func (c *channel) armLogoutTimer() {
	time.AfterFunc(c.cfg.LogoutTimeout, func() {
		select {
		case c.events <- event{tick: true}:
		case <-c.done:
		}
	})
}
