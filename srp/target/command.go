package target

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// command is one SRP_CMD in progress. Commands are reused (channel.cmdFree):
// gen tells a reference taken before a reuse from one to the new command.
type command struct {
	ch      *channel
	gen     uint32
	slot    int // receive slot holding the IU
	send    int // send context for the SRP_RSP
	tag     uint64
	lun     uint64
	attr    scsi.TaskAttr
	cdb     []byte
	state   cmdState
	aborted bool
	waiters []*tmfOp // TMFs waiting for this command to finish

	iu   srp.Cmd      // the decoded SRP_CMD (its descriptor lists are reused)
	sc   scsi.Command // what the SCSI core sees
	sges []rdma.SGE   // local halves of the RDMA READs or WRITEs
	wrs  []rdma.SendWR
	// sgeAt[i] is where wrs[i]'s SGEs start in sges (data-in WRITEs).
	sgeAt []int
	// fetch is how many bytes of data-out to fetch: the descriptors' total,
	// or less when the CDB asks for less (Session.Check).
	fetch int

	out, in     []srp.DirectBuf // data-out / data-in descriptors
	outLen      int             // data-out buffer length, bytes
	inLen       int             // data-in buffer length, bytes
	dataOut     []byte
	dataIn      []byte
	outMR, inMR rdma.MemoryRegion
	tableMR     rdma.MemoryRegion // external descriptor table being fetched
	tableFor    int               // descriptors expected in the external table
	tableOut    bool              // the table is the data-out list
	readsLeft   int
	readErr     bool
	// viewMem is the data memory budget taken for data-out placed into
	// the backstore's memory (ViewOut), given back when the command is
	// freed.
	viewMem int
	// viewMRs[i] holds DataInViews[i] at byte offset viewOffs[i]: cached
	// registrations (channel.regions) in use until the command is freed.
	viewMRs  []rdma.MemoryRegion
	viewOffs []int
}

// cmdState is where an SRP_CMD is in the target (the states of ib_srpt's
// srpt_command_state, in the order LIO's fabric callbacks visit them).
type cmdState uint8

const (
	cmdNew      cmdState = iota // decoded, checked by the core (Session.Check)
	cmdNeedData                 // waiting for RDMA READs (data-out or descriptor table): write pending
	cmdExec                     // in the SCSI core (Session.Submit)
	cmdExecData                 // in the core, its data-out being placed into the backstore's memory (scsi.Command.ViewOut)
	cmdRspSent                  // SRP_RSP posted (after any RDMA WRITEs of data-in)
)

func (s cmdState) String() string {
	switch s {
	case cmdNew:
		return "NEW"
	case cmdNeedData:
		return "NEED_DATA"
	case cmdExec:
		return "EXEC"
	case cmdExecData:
		return "EXEC_DATA"
	case cmdRspSent:
		return "RSP_SENT"
	}
	return fmt.Sprintf("cmdState(%d)", uint8(s))
}

// cmdNext lists the states a command may move to from each state: a
// refused or failed command is answered from NEW or NEED_DATA, an external
// descriptor table is fetched before the data-out (NEED_DATA twice), a
// WRITE whose data-out goes straight to the backstore's memory fetches it
// once the core has enabled it (EXEC_DATA, then EXEC for the core's
// result), and the core's result leads to the response.
var cmdNext = [...][]cmdState{
	cmdNew:      {cmdNeedData, cmdExec, cmdRspSent},
	cmdNeedData: {cmdNeedData, cmdExec, cmdRspSent},
	cmdExec:     {cmdExecData, cmdRspSent},
	cmdExecData: {cmdExec},
	cmdRspSent:  {},
}

// advance moves cmd to state next. A move cmdNext does not list is a bug
// in the channel: it is logged and counted, and the move is made.
func (c *channel) advance(cmd *command, next cmdState) {
	if !slices.Contains(cmdNext[cmd.state], next) {
		c.stats.errors.Add(1)
		c.log.Error("command state machine: unexpected transition", "tag", cmd.tag, "from", cmd.state, "to", next)
	}
	cmd.state = next
}

type readOp struct {
	cmd *command
	gen uint32
	wr  rdma.SendWR
}

// cmdRef names a command as it was when the reference was taken.
type cmdRef struct {
	cmd *command
	gen uint32
}

func (r cmdRef) live() bool { return r.cmd.gen == r.gen }

// newCommand returns a command (reused when one is free) for the IU in
// receive slot slot, answered from send context send.
func (c *channel) newCommand(slot, send int) *command {
	var cmd *command
	if n := len(c.cmdFree); n > 0 {
		cmd = c.cmdFree[n-1]
		c.cmdFree = c.cmdFree[:n-1]
	} else {
		cmd = &command{ch: c}
	}
	cmd.slot, cmd.send = slot, send
	return cmd
}

// Complete implements scsi.Completer: the core's result of a command it
// ran on a goroutine of its own goes to the channel's loop.
func (cmd *command) Complete(_ *scsi.Command, res scsi.Result) {
	cmd.ch.events <- event{cmd: cmd, res: res}
}

// done with one command or TMF: repost its receive buffer and free its send
// context.
func (c *channel) freeCommand(cmd *command) {
	if c.cmds[cmd.tag] == cmd {
		delete(c.cmds, cmd.tag)
	}
	c.putBuf(cmd.outMR)
	c.putBuf(cmd.inMR)
	c.putBuf(cmd.tableMR)
	cmd.outMR, cmd.inMR, cmd.tableMR = nil, nil, nil
	if cmd.viewMem > 0 {
		c.port.releaseData(cmd.viewMem)
		cmd.viewMem = 0
	}
	c.postRecv(cmd.slot)
	c.freeSendCtx(cmd.send)
	for _, t := range cmd.waiters {
		t.waitFor--
		if t.waitFor == 0 {
			c.tmfReady(t)
		}
	}
	cmd.waiters = cmd.waiters[:0]
	cmd.recycle()
	c.cmdFree = append(c.cmdFree, cmd)
	c.runWait()
	c.maybeCredReq()
}

// recycle clears cmd for its next use, keeping the capacity of its lists.
func (cmd *command) recycle() {
	cmd.gen++
	cmd.tag, cmd.lun, cmd.attr, cmd.cdb = 0, 0, 0, nil
	cmd.state, cmd.aborted = cmdNew, false
	cmd.releaseRegions()
	cmd.sc.ReleaseViews()
	// A no-op unless the command left the core waiting for its data-out,
	// which is a bug in the channel: the task must not stay in the task set.
	cmd.sc.DataOutPlaced(false)
	cmd.sc = scsi.Command{DataInViews: cmd.sc.DataInViews, DataOutViews: cmd.sc.DataOutViews}
	clear(cmd.sges)
	cmd.sges = cmd.sges[:0]
	clear(cmd.wrs)
	cmd.wrs = cmd.wrs[:0]
	cmd.out, cmd.in = cmd.out[:0], cmd.in[:0]
	cmd.outLen, cmd.inLen, cmd.fetch = 0, 0, 0
	cmd.dataOut, cmd.dataIn = nil, nil
	cmd.tableFor, cmd.tableOut = 0, false
	cmd.readsLeft, cmd.readErr = 0, false
}

// maxExternalDescs bounds an external descriptor table (in descriptors);
// larger tables get CHECK CONDITION. Linux ib_srp allows up to 2048
// (indirect_sg_entries).
const maxExternalDescs = 4096

// startCmd decodes an SRP_CMD, has the core check it, and starts moving
// its data (LIO's order: target_submit_cmd checks the command before the
// fabric's write_pending fetches data-out, so a refused command moves no
// data).
func (c *channel) startCmd(slot, send int, b []byte) {
	cmd := c.newCommand(slot, send)
	iu := &cmd.iu
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
		if len(b) >= 28 {
			cmd.lun = binary.BigEndian.Uint64(b[20:28])
		}
		c.stats.errors.Add(1)
		c.log.Warn("malformed SRP_CMD", "tag", cmd.tag, "err", err)
		c.refuse(cmd, scsi.ReasonInvalidCDBField)
		return
	}
	cmd.tag, cmd.lun, cmd.attr = iu.Tag, iu.LUN, scsi.TaskAttr(iu.TaskAttr)
	cmd.cdb = iu.CDB
	if old := c.cmds[cmd.tag]; old != nil {
		c.stats.errors.Add(1)
		c.log.Warn("SRP_CMD reuses an outstanding tag", "tag", cmd.tag)
		c.refuse(cmd, scsi.ReasonOverlappedCommands)
		return
	}
	c.cmds[cmd.tag] = cmd
	if bad := c.checkData(cmd, iu); bad != "" {
		c.stats.errors.Add(1)
		c.log.Warn("rejecting SRP_CMD data descriptors", "tag", cmd.tag, "why", bad)
		c.refuse(cmd, scsi.ReasonInvalidCDBField)
		return
	}
	sc := &cmd.sc
	sc.Tag, sc.LUN, sc.CDB, sc.Attr, sc.DataOutLen = cmd.tag, cmd.lun, cmd.cdb, cmd.attr, cmd.outLen
	// A WRITE's data-out of a page or more may go straight into a RAM
	// backstore's memory, fetched once the core has enabled the command:
	// one memory copy of the data less. Check says whether it does.
	df := iu.DataOut.Format
	sc.ViewOut = (c.local != nil && cmd.outLen >= viewOutMin || c.regions != nil && cmd.outLen >= viewRegionMin) &&
		(df == srp.DescDirect || df == srp.DescIndirect) && !iu.DataOut.External()
	res, ok := c.nx.sess.Check(sc)
	if !ok {
		// Refused before any data moved: residuals only where the core
		// compared the lengths.
		flags, outRes, inRes := cmd.residuals(res.DataOutWanted, res.DataInWanted, 0)
		c.respondWith(cmd, res.Status, res.Sense, flags, outRes, inRes, cmd.wrs[:0])
		return
	}
	sc.Checked = true
	// Buffers are sized from the CDB where it gives the length, never
	// beyond what the initiator described.
	inBuf := cmd.inLen
	if w := res.DataInWanted; w >= 0 && w < inBuf {
		inBuf = w
	}
	cmd.fetch = cmd.outLen
	if w := res.DataOutWanted; w >= 0 && w < cmd.fetch {
		cmd.fetch = w
	}
	var err error
	if inBuf > 0 {
		if cmd.inMR, err = c.getBuf(inBuf); err != nil {
			c.busy(cmd, err)
			return
		}
		cmd.dataIn = cmd.inMR.Bytes()[:inBuf]
		// The core may give a large READ's data-in as slices of a RAM
		// backstore, sent from there: one memory copy of the data less.
		sc.ViewIn = c.local != nil && inBuf >= viewInMin ||
			c.regions != nil && inBuf >= viewRegionMin
	}
	if sc.ViewOut {
		// No buffer, but the bytes in flight count against
		// max_data_memory as a buffer's would: a peer that never answers
		// the RDMA READs pins no more than the budget. Where the views
		// must be registered, a buffer's worth is taken, so that a
		// failed registration can fall back on a buffer (bounceOut)
		// without asking the budget again: the command then ends with
		// its data, not with an error the budget of other channels made.
		mem := cmd.fetch
		if c.local == nil {
			mem = bufClass(cmd.fetch)
		}
		if !c.port.reserveData(mem) {
			c.busy(cmd, errDataMemory)
			return
		}
		cmd.viewMem = mem
		c.execute(cmd)
		return
	}
	switch iu.DataOut.Format {
	case srp.DescImm:
		cmd.dataOut = iu.ImmData[:cmd.fetch]
	case srp.DescDirect, srp.DescIndirect:
		if cmd.fetch > 0 {
			if cmd.outMR, err = c.getBuf(cmd.fetch); err != nil {
				c.busy(cmd, err)
				return
			}
			cmd.dataOut = cmd.outMR.Bytes()[:cmd.fetch]
		}
	}
	if ext := &iu.DataOut; ext.External() && cmd.fetch > 0 {
		c.fetchTable(cmd, ext, true)
		return
	}
	if ext := &iu.DataIn; ext.External() && inBuf > 0 {
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
	cmd.out = coalesce(append(cmd.out[:0], out...))
	cmd.in = coalesce(append(cmd.in[:0], in...))
	cmd.outLen, cmd.inLen = int(outLen), int(inLen)
	return ""
}

// coalesce merges, in place, each run of descriptors that continue one
// another in the initiator's memory (same key, each starting where the
// previous ends), so a page list of one buffer (Linux ib_srp without fast
// registration: one descriptor per page) costs one RDMA READ or WRITE per
// MaxRDMASize instead of one per page, as LIO's rdma_rw merges contiguous
// scatterlist entries. The total length is unchanged.
func coalesce(d []srp.DirectBuf) []srp.DirectBuf {
	if len(d) < 2 {
		return d
	}
	k := 0
	for _, x := range d[1:] {
		last := &d[k]
		if x.Key == last.Key && last.VA+uint64(last.Len) == x.VA && uint64(last.Len)+uint64(x.Len) <= math.MaxUint32 {
			last.Len += x.Len
			continue
		}
		k++
		d[k] = x
	}
	return d[:k+1]
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
	c.advance(cmd, cmdNeedData)
	cmd.out, cmd.in = cmd.out[:0], cmd.in[:0]
	if out {
		cmd.out = append(cmd.out, d.Table)
		c.queueReads(cmd, mr, cmd.out, n)
	} else {
		cmd.in = append(cmd.in, d.Table)
		c.queueReads(cmd, mr, cmd.in, n)
	}
}

// onTable parses a fetched descriptor table.
func (c *channel) onTable(cmd *command) {
	tb := cmd.tableMR.Bytes()
	descs := make([]srp.DirectBuf, cmd.tableFor) // rare: external tables
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
		c.refuse(cmd, scsi.ReasonInvalidCDBField)
		return
	}
	if cmd.tableOut {
		cmd.out = coalesce(descs)
	} else {
		cmd.in = coalesce(descs)
	}
	c.fetchDataOut(cmd)
}

// fetchDataOut queues the RDMA READs of the data-out bytes to fetch, or
// executes at once when there is nothing to read.
func (c *channel) fetchDataOut(cmd *command) {
	if cmd.outMR == nil || cmd.fetch == 0 {
		c.execute(cmd)
		return
	}
	c.advance(cmd, cmdNeedData)
	c.queueReads(cmd, cmd.outMR, cmd.out, cmd.fetch)
}

// queueReads splits the first limit bytes of descs into RDMA READs of at
// most MaxRDMASize bytes into mr, in order.
func (c *channel) queueReads(cmd *command, mr rdma.MemoryRegion, descs []srp.DirectBuf, limit int) {
	off := 0
	cmd.sges = cmd.sges[:0]
	for _, d := range descs {
		for done := 0; done < int(d.Len) && off < limit; {
			n := min(int(d.Len)-done, c.cfg.MaxRDMASize, limit-off)
			cmd.sges = append(cmd.sges, rdma.SGE{MR: mr, Offset: off, Length: n})
			off += n
			done += n
		}
	}
	// A second pass, once cmd.sges no longer moves: each READ's local half.
	k := 0
	for _, d := range descs {
		for done := 0; done < int(d.Len) && k < len(cmd.sges); k++ {
			n := cmd.sges[k].Length
			c.readQ.push(readOp{cmd: cmd, gen: cmd.gen, wr: rdma.SendWR{
				Op:       rdma.OpRDMARead,
				Local:    cmd.sges[k : k+1 : k+1],
				Remote:   rdma.RemoteAddr{Addr: d.VA + uint64(done), RKey: d.Key},
				Signaled: true,
			}})
			cmd.readsLeft++
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
	case cmd.state == cmdExecData:
		c.endFetch(cmd, !cmd.readErr)
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

// execute hands the command to the SCSI core (Session.Submit): a command
// the core can finish without blocking completes here, any other on a
// goroutine of the core that reports back through the loop's events, so
// the receive path never waits for the backstore. Concurrency is bounded
// by the receive ring (each command holds its receive slot until it
// completes).
func (c *channel) execute(cmd *command) {
	if c.state != stateLive {
		c.freeCommand(cmd)
		return
	}
	c.advance(cmd, cmdExec)
	c.stats.writeBytes.Add(uint64(len(cmd.dataOut)))
	cmd.sc.DataOut, cmd.sc.DataIn = cmd.dataOut, cmd.dataIn
	res, inline := c.nx.sess.Submit(c.ctx, &cmd.sc, cmd)
	if inline {
		c.onExecuted(cmd, res)
		return
	}
	c.executing++
}

// onExecuted turns a SCSI result into RDMA WRITEs and an SRP_RSP, or
// fetches the data-out the core waits for.
func (c *channel) onExecuted(cmd *command, res scsi.Result) {
	if res.FetchViews {
		c.fetchViews(cmd)
		return
	}
	if c.state != stateLive {
		c.freeCommand(cmd)
		return
	}
	if res.Aborted || cmd.aborted {
		c.cred.release()
		c.freeCommand(cmd)
		return
	}
	n := min(max(res.DataInLen, 0), cmd.inLen)
	flags, outRes, inRes := cmd.residuals(res.DataOutWanted, res.DataInWanted, n)
	c.stats.readBytes.Add(uint64(n))
	c.dataInWrites(cmd, n)
	c.respondWith(cmd, res.Status, res.Sense, flags, outRes, inRes, cmd.wrs)
}

// fetchViews queues the RDMA READs that place a WRITE's data-out into the
// backstore's memory the core gave (scsi.Command.DataOutViews): one SGE
// per piece, a READ cut short at viewMaxSGE pieces, each at most
// MaxRDMASize bytes. A command that is aborted or whose channel is no
// longer live fetches nothing and ends at once.
func (c *channel) fetchViews(cmd *command) {
	c.advance(cmd, cmdExecData)
	if c.state != stateLive || cmd.aborted {
		c.endFetch(cmd, false)
		return
	}
	cur := viewCursor{views: cmd.sc.DataOutViews}
	if c.local == nil {
		// A buffer the core allocated for this command alone is not
		// cached: it is fetched into, and copied from, one of ours.
		if !cmd.sc.DataOutBuffered && c.viewRegions(cmd, cmd.sc.DataOutViews) {
			cur.mrs, cur.offs = cmd.viewMRs, cmd.viewOffs
		} else if !c.bounceOut(cmd) {
			c.endFetch(cmd, false)
			return
		}
	}
	maxSGE := c.viewSGELimit()
	cmd.sges, cmd.wrs, cmd.sgeAt = cmd.sges[:0], cmd.wrs[:0], cmd.sgeAt[:0]
	left := cmd.fetch
	for _, d := range cmd.out {
		for done := 0; done < int(d.Len) && left > 0 && (cmd.outMR != nil || cur.more()); {
			k := min(int(d.Len)-done, c.cfg.MaxRDMASize, left)
			cmd.sgeAt = append(cmd.sgeAt, len(cmd.sges))
			var got int
			if cmd.outMR != nil {
				cmd.sges = append(cmd.sges, rdma.SGE{MR: cmd.outMR, Offset: cmd.fetch - left, Length: k})
				got = k
			} else {
				cmd.sges, got = cur.take(c.local, cmd.sges, k, maxSGE)
			}
			cmd.wrs = append(cmd.wrs, rdma.SendWR{
				Op:       rdma.OpRDMARead,
				Remote:   rdma.RemoteAddr{Addr: d.VA + uint64(done), RKey: d.Key},
				Signaled: true,
			})
			done += got
			left -= got
		}
	}
	if left != 0 {
		// The core's views and the descriptors disagree (Check compared
		// the lengths, so this is a bug): nothing is fetched.
		c.stats.errors.Add(1)
		c.log.Error("data-out views do not cover the descriptors", "tag", cmd.tag, "short", left)
		c.endFetch(cmd, false)
		return
	}
	cmd.sgeAt = append(cmd.sgeAt, len(cmd.sges))
	for i, wr := range cmd.wrs {
		a, b := cmd.sgeAt[i], cmd.sgeAt[i+1]
		wr.Local = cmd.sges[a:b:b]
		c.readQ.push(readOp{cmd: cmd, gen: cmd.gen, wr: wr})
		cmd.readsLeft++
	}
	c.pump()
}

// endFetch tells the core the data-out of a command in EXEC_DATA is
// placed (ok) or will not be, and handles its result.
func (c *channel) endFetch(cmd *command, ok bool) {
	if ok {
		c.stats.writeBytes.Add(uint64(cmd.fetch))
		if cmd.outMR != nil {
			// Fetched into a buffer (bounceOut): now into the views.
			b := cmd.outMR.Bytes()[:cmd.fetch]
			for _, v := range cmd.sc.DataOutViews {
				b = b[copy(v, b):]
			}
		}
	}
	c.advance(cmd, cmdExec)
	res, inline := cmd.sc.DataOutPlaced(ok)
	if !inline {
		c.executing++
		return
	}
	c.onExecuted(cmd, res)
}

// viewOutMin is the smallest data-out, in bytes, placed straight into a
// backstore's memory (scsi.Command.ViewOut) rather than fetched into a
// buffer and copied: one page, as viewInMin (16 KiB random writes of a
// RAM LUN at QD32: 14 % more IOPS than with a 32 KiB threshold,
// docs/PERFORMANCE.md item 17). Immediate data is not fetched: it is
// copied from the receive buffer it came in.
const viewOutMin = 4 << 10

// viewInMin is the smallest data-in, in bytes, sent from a backstore's
// memory (scsi.Command.ViewIn) rather than copied: one page. A copy of a
// 4 KiB page costs more than its region and SGE (4 KiB random reads of a
// RAM LUN: 25-30 % more IOPS at QD32 and a third less target CPU per I/O
// with views than with copies, docs/PERFORMANCE.md item 11); below a page
// the copy is small. viewMaxSGE bounds the SGEs of one such RDMA WRITE (a
// RAM backstore's pieces are 64 KiB: 1 MiB per WRITE).
const (
	viewInMin  = 4 << 10
	viewMaxSGE = 16
)

// viewRegionMin is the smallest data-in, in bytes, sent from a backstore's
// memory on a device that needs it registered (channel.regions), and the
// smallest data-out placed there (viewOutMin's counterpart). A
// registration serves all later transfers from its RAM chunk, but a first
// one costs about what copying the chunk does, and small random reads
// over a large logical unit would register at nearly every read (4 KiB
// random reads over rxe spent 15 % of srptd's CPU time registering), so
// they are copied. At 64 KiB, a fifth of srptd's CPU time during 1 MiB
// reads from Linux ib_srp over rxe was still ReadAt's copy: ib_srp sent
// part of them as smaller commands (its descriptors cover at most
// cmd_sg_entries, 12 by default, pieces of scattered memory), and those go
// from the backstore too now. Over soft-RoCE (rxe, in a 2-CPU guest)
// 1 MiB reads took 17 instead of 31 ms of srptd's CPU time per I/O, half
// of it the copy (docs/PERFORMANCE.md).
const viewRegionMin = 32 << 10

// viewCursor walks the backstore memory a command's data moves from or to
// (scsi.Command.DataInViews or DataOutViews), in order.
type viewCursor struct {
	views  [][]byte
	vi, vo int // the next byte: views[vi][vo]
	// mrs and offs, when set, hold each view's registered region and its
	// offset there (command.viewMRs); else the device's LocalRegion serves.
	mrs  []rdma.MemoryRegion
	offs []int
}

// more reports whether bytes are left.
func (v *viewCursor) more() bool { return v.vi < len(v.views) }

// take appends to sges, as local regions of l, the next k bytes or fewer:
// at most maxSGE pieces, none beyond the last view. It returns sges and
// how many bytes it took.
func (v *viewCursor) take(l rdma.LocalRegioner, sges []rdma.SGE, k, maxSGE int) ([]rdma.SGE, int) {
	got := 0
	for n := 0; got < k && n < maxSGE && v.more(); n++ {
		p := v.views[v.vi][v.vo:]
		m := min(len(p), k-got)
		if v.mrs != nil {
			sges = append(sges, rdma.SGE{MR: v.mrs[v.vi], Offset: v.offs[v.vi] + v.vo, Length: m})
		} else {
			sges = append(sges, rdma.SGE{MR: l.LocalRegion(p[:m:m]), Length: m})
		}
		got += m
		if v.vo += m; v.vo == len(v.views[v.vi]) {
			v.vi, v.vo = v.vi+1, 0
		}
	}
	return sges, got
}

// viewSGELimit is the most SGEs of one RDMA READ or WRITE from or to views:
// viewMaxSGE, or fewer if the queue pair grants fewer.
func (c *channel) viewSGELimit() int {
	if c.maxSGE > 0 {
		return min(viewMaxSGE, c.maxSGE)
	}
	return viewMaxSGE
}

// dataInWrites builds in cmd.wrs the RDMA WRITEs that place n bytes of
// data-in into the initiator's data-in descriptors, in order, each at most
// MaxRDMASize bytes: from the command's buffer (one SGE each), or from the
// backstore's memory the core gave (one SGE per piece, a WRITE cut short
// at viewMaxSGE pieces).
func (c *channel) dataInWrites(cmd *command, n int) {
	cmd.sges, cmd.wrs, cmd.sgeAt = cmd.sges[:0], cmd.wrs[:0], cmd.sgeAt[:0]
	cur := viewCursor{views: cmd.sc.DataInViews}
	fromViews := len(cur.views) > 0
	if fromViews && c.local == nil {
		if c.viewRegions(cmd, cur.views) {
			cur.mrs, cur.offs = cmd.viewMRs, cmd.viewOffs
		} else {
			// Copied into the command's buffer instead.
			got := 0
			for _, v := range cur.views {
				got += copy(cmd.dataIn[got:n], v)
			}
			fromViews = false
		}
	}
	maxSGE := c.viewSGELimit()
	left, off := n, 0
	for _, d := range cmd.in {
		for done := 0; done < int(d.Len) && left > 0 && (!fromViews || cur.more()); {
			k := min(int(d.Len)-done, c.cfg.MaxRDMASize, left)
			cmd.sgeAt = append(cmd.sgeAt, len(cmd.sges))
			if fromViews {
				cmd.sges, k = cur.take(c.local, cmd.sges, k, maxSGE)
			} else {
				cmd.sges = append(cmd.sges, rdma.SGE{MR: cmd.inMR, Offset: off, Length: k})
			}
			cmd.wrs = append(cmd.wrs, rdma.SendWR{
				Op:     rdma.OpRDMAWrite,
				Remote: rdma.RemoteAddr{Addr: d.VA + uint64(done), RKey: d.Key},
			})
			off += k
			done += k
			left -= k
		}
	}
	cmd.sgeAt = append(cmd.sgeAt, len(cmd.sges))
	for i := range cmd.wrs {
		a, b := cmd.sgeAt[i], cmd.sgeAt[i+1]
		cmd.wrs[i].Local = cmd.sges[a:b:b]
	}
	// Room for the SEND queueSend appends, kept for the command's next use.
	cmd.wrs = slices.Grow(cmd.wrs, 1)
}

// viewRegions takes cached registrations (channel.regions) of views, the
// backstore memory of cmd's data-in or data-out, into cmd.viewMRs. When
// one fails (the locked-memory limit, say) it gives back those taken and
// returns false: the caller moves the data through a buffer.
func (c *channel) viewRegions(cmd *command, views [][]byte) bool {
	for _, v := range views {
		mr, off, err := c.regions.CachedRegion(v)
		if err != nil {
			cmd.releaseRegions()
			c.log.Debug("data copied: no registration of the backstore's memory", "err", err)
			return false
		}
		cmd.viewMRs = append(cmd.viewMRs, mr)
		cmd.viewOffs = append(cmd.viewOffs, off)
	}
	return true
}

// bounceOut gives a WRITE whose data-out goes into the backstore's memory
// a buffer to fetch it into when the views could not be registered, or
// are a buffer of the core's (scsi.Command.DataOutBuffered); the
// data is copied into the views when the fetch ends (endFetch). The data
// memory taken for the views goes to the buffer. It reports false when
// there is no buffer either (its registration failed): the fetch fails.
func (c *channel) bounceOut(cmd *command) bool {
	var mr rdma.MemoryRegion
	var err error
	if class := bufClass(cmd.fetch); cmd.viewMem >= class {
		// The budget taken for the views (startCmd) pays for the buffer.
		if mr, err = c.takeBuf(class); err == nil {
			c.port.releaseData(cmd.viewMem - class)
			cmd.viewMem = 0
		}
	} else {
		if cmd.viewMem > 0 {
			c.port.releaseData(cmd.viewMem)
			cmd.viewMem = 0
		}
		mr, err = c.getBuf(cmd.fetch)
	}
	if err != nil {
		c.log.Warn("no buffer for data-out", "tag", cmd.tag, "err", err)
		return false
	}
	cmd.outMR = mr
	return true
}

// releaseRegions gives back the cached registrations viewRegions took.
func (cmd *command) releaseRegions() {
	if len(cmd.viewMRs) == 0 {
		return
	}
	for i, mr := range cmd.viewMRs {
		cmd.ch.regions.ReleaseRegion(mr)
		cmd.viewMRs[i] = nil
	}
	cmd.viewMRs, cmd.viewOffs = cmd.viewMRs[:0], cmd.viewOffs[:0]
}

// residuals compares the descriptor totals with the CDB's transfer
// lengths (SAM-5 §5.4; LIO target_cmd_size_check: wanted > buffer is an
// overflow, wanted < buffer an underflow); a negative wanted length
// reports nothing. n is the data-in bytes returned.
func (cmd *command) residuals(outWanted, inWanted, n int) (flags srp.RspFlags, outRes, inRes uint32) {
	fo, outRes := residual(outWanted, cmd.outLen, outWanted, srp.DataOutOver, srp.DataOutUnder)
	fi, inRes := residual(inWanted, cmd.inLen, n, srp.DataInOver, srp.DataInUnder)
	return fo | fi, outRes, inRes
}

// residual is one direction's residual: an overflow when the CDB wants
// more than the descriptors hold, else an underflow when fewer than the
// descriptors' bytes moved (moved ≤ wanted).
func residual(wanted, desc, moved int, over, under srp.RspFlags) (srp.RspFlags, uint32) {
	switch {
	case wanted < 0:
		return 0, 0
	case wanted > desc:
		return over, uint32(wanted - desc)
	case moved < desc:
		return under, uint32(desc - moved)
	}
	return 0, 0
}

// busy answers a command the target lacks a data buffer for, in an
// SRP_RSP that returns its credit. Over Config.MaxDataMemory the status is
// TASK SET FULL (SAM-5 §5.3.1: not enough resources to accept the command
// now; as LIO transport_generic_request_failure answers
// TCM_OUT_OF_RESOURCES); when registering the buffer fails, BUSY.
func (c *channel) busy(cmd *command, err error) {
	status := sense.StatusBusy
	if errors.Is(err, errDataMemory) {
		status = sense.StatusTaskSetFull
	}
	c.log.Warn("no buffer for command", "tag", cmd.tag, "status", status, "err", err)
	c.respond(cmd, status, nil, 0, 0)
}

// refuse answers a command the fabric refuses for reason r (malformed
// descriptors, a tag in use) with the core's status and sense for r
// (Session.Refuse: the one sense table, the LU's D_SENSE), moving no data.
func (c *channel) refuse(cmd *command, r scsi.Reason) {
	res := c.nx.sess.Refuse(&scsi.Command{LUN: cmd.lun}, r)
	c.respond(cmd, res.Status, res.Sense, 0, 0)
}

func (c *channel) respond(cmd *command, status byte, senseData []byte, outRes, inRes uint32) {
	c.respondWith(cmd, status, senseData, 0, outRes, inRes, cmd.wrs[:0])
}

// respondWith builds the SRP_RSP in the command's send context (ib_srpt
// srpt_build_cmd_rsp: req_lim_delta = 1 + accumulated credit, sense
// truncated to max_ti_iu_len) and queues it behind the data-in writes.
func (c *channel) respondWith(cmd *command, status byte, senseData []byte, flags srp.RspFlags, outRes, inRes uint32, writes []rdma.SendWR) {
	c.advance(cmd, cmdRspSent)
	// The initiator may reuse the tag as soon as it sees this response,
	// possibly before the SEND's completion reaches us: the tag is free now.
	if c.cmds[cmd.tag] == cmd {
		delete(c.cmds, cmd.tag)
	}
	maxSense := max(0, min(c.maxTI, c.cfg.MaxRspSize)-srp.RspSize)
	if len(senseData) > maxSense {
		senseData = senseData[:maxSense]
	}
	if len(senseData) > 0 {
		flags |= srp.SnsValid
	}
	if status == sense.StatusCheckCondition {
		c.stats.checkConditions.Add(1)
	}
	rsp := srp.Rsp{
		ReqLimDelta:   uint32(c.cred.response()),
		Tag:           cmd.tag,
		Flags:         flags,
		Status:        status,
		DataOutResCnt: outRes,
		DataInResCnt:  inRes,
		Sense:         senseData,
	}
	b, err := rsp.AppendTo(c.sendSlot(cmd.send)[:0])
	if err != nil {
		c.log.Error("encode SRP_RSP", "err", err)
		c.freeCommand(cmd)
		return
	}
	c.queueSend(cmd.send, len(b), false, wrRec{kind: wrRsp, cmd: cmd, send: cmd.send}, writes)
}
