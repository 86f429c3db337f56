package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// Command is one SCSI command to send. DataOut and DataIn are scatter/gather
// lists of caller memory: each non-empty element is registered for the
// duration of the command (data-out with remote read rights, data-in with
// remote write rights) unless it goes as immediate data. A command moves data
// in one direction only, as ib_srp does.
type Command struct {
	// LUN is the 8-byte SAM LUN field as a big-endian integer (see LUN).
	LUN uint64
	// CDB is 6 to 32 bytes.
	CDB []byte
	// Attr is the task attribute (SIMPLE when zero).
	Attr srp.TaskAttr
	// DataOut is the data-out buffer (written to the target).
	DataOut [][]byte
	// DataIn receives data-in (read from the target).
	DataIn [][]byte
	// Buffer, when set, holds the command's data instead of DataOut/DataIn
	// (which must then be empty): Length bytes at Offset, data-in or
	// data-out as the Buffer was registered. Nothing is registered per
	// command.
	Buffer         *Buffer
	Offset, Length int
	// NoRetry forbids re-issuing the command on a new channel when its
	// channel went down before the response arrived (set it for commands
	// that are not idempotent, such as COMPARE AND WRITE).
	NoRetry bool
}

// Result is a command's outcome as SRP_RSP reported it (T10 SRP r16a §6.9).
type Result struct {
	// Status is the SCSI status byte.
	Status uint8
	// Sense is the sense data when SNSVALID was set (a copy).
	Sense []byte
	// Flags are the SRP_RSP flags (DOOVER 0x04, DOUNDER 0x08, DIOVER 0x10,
	// DIUNDER 0x20).
	Flags uint8
	// DataInLen is the number of data-in bytes transferred: the data-in
	// buffer length less the DIUNDER residual.
	DataInLen int
	// DataInResidual / DataOutResidual are the residual counts in bytes
	// (underflow or overflow per Flags).
	DataInResidual, DataOutResidual uint32

	// ch is the channel a submitted command completed on (Submit's first
	// choice for the next command into this Result).
	ch *channel
}

// Err converts a non-GOOD status to an error: *SenseError for CHECK
// CONDITION with sense data, *StatusError otherwise. GOOD and CONDITION MET
// give nil.
func (r *Result) Err() error {
	if r.Status == sense.StatusGood || r.Status == sense.StatusConditionMet {
		return nil
	}
	if e := DecodeSense(r.Status, r.Sense); e != nil {
		return e
	}
	return &StatusError{Status: r.Status}
}

// LUN returns the SAM LUN field for LUN number n: peripheral device
// addressing below 256, flat space addressing up to 16383 (SAM-5 §4.7.7;
// Linux int_to_scsilun).
func LUN(n int) uint64 {
	if n < 256 {
		return uint64(n) << 48
	}
	return (0x4000 | uint64(n&0x3fff)) << 48
}

// LUNNumber is the inverse of LUN for the first level of a LUN field.
func LUNNumber(lun uint64) int {
	return int(lun>>48) & 0x3fff
}

func totalLen(b [][]byte) int {
	n := 0
	for _, s := range b {
		n += len(s)
	}
	return n
}

// execute runs cmd on the channel. It returns ErrChannelDown when the
// channel went down before the response (the command may or may not have
// run), or a mapping error.
func (ch *channel) execute(ctx context.Context, cmd *Command, res *Result) error {
	var r *request
	select {
	case r = <-ch.free:
	case <-ch.dead:
		return ErrChannelDown
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ch.takeCredit(ctx, tmfReserve); err != nil {
		ch.free <- r
		return err
	}
	r.lun = cmd.LUN
	r.activate(2)
	n, inLen, err := ch.build(r, cmd)
	if err == nil {
		err = r.post(n)
	}
	if err != nil {
		return ch.unissue(r, err)
	}
	var timedOut <-chan time.Time
	if d := ch.s.opts.CommandTimeout; d > 0 {
		r.timer.Reset(d)
		timedOut = r.timer.C()
	}
	var why error
	responded := false
	select {
	case <-r.done:
		responded = true
	case <-ch.dead:
	case <-ctx.Done():
		why = ctx.Err()
	case <-timedOut:
		why = context.DeadlineExceeded
	}
	// Stop the slot's timer before the slot can be freed and reused.
	r.timer.Stop()
	if why != nil {
		return ch.abort(r, cmd.LUN, why, res, inLen)
	}
	if !responded {
		select {
		case <-r.done: // the response made it before the channel went down
		default:
			r.unmap()
			r.put()
			return ErrChannelDown
		}
	}
	return ch.finish(r, res, inLen)
}

// unissue gives back the slot and credit of a command that was not posted
// (err is why); a closed connection takes the channel down and reads as
// ErrChannelDown.
func (ch *channel) unissue(r *request, err error) error {
	r.deactivate()
	r.unmap()
	ch.returnCredit()
	r.put()
	r.put()
	if errors.Is(err, rdma.ErrClosed) {
		ch.fail(err)
		return ErrChannelDown
	}
	return err
}

func (ch *channel) fill(r *request, res *Result, inLen int) {
	res.Status, res.Flags = r.status, r.flags
	res.DataInResidual, res.DataOutResidual = r.dataInRes, r.dataOutRes
	res.DataInLen = inLen
	if srp.RspFlags(r.flags)&srp.DataInUnder != 0 {
		res.DataInLen = max(0, inLen-int(r.dataInRes))
	}
	res.Sense = nil
	if len(r.sense) > 0 {
		res.Sense = append([]byte(nil), r.sense...)
	}
}

// abort ends a command that timed out or was cancelled: ABORT TASK names its
// tag (ib_srp srp_abort). When the target confirms, or the response arrives
// meanwhile, the slot is freed; otherwise the channel is taken down so the
// target can no longer touch the command's memory.
func (ch *channel) abort(r *request, lun uint64, why error, res *Result, inLen int) error {
	ch.log.Debug("srp: aborting command", "tag", r.tag, "lun", lun, "err", why)
	code, err := ch.tmf(context.Background(), srp.TMFAbortTask, lun, r.tag)
	if err == nil && code != 0 {
		// Not found: the response is on its way or already here.
		t := ch.s.clock.NewTimer(ch.s.opts.TMFTimeout)
		select {
		case <-r.done:
			t.Stop()
			return ch.finish(r, res, inLen)
		case <-t.C():
			err = fmt.Errorf("ABORT TASK failed (%s) and no response arrived", srp.TMFRspName(code))
		case <-ch.dead:
			err = ErrChannelDown
		}
	}
	select {
	case <-r.done:
		// The command completed after all (or a LUN reset ended it).
		return ch.finish(r, res, inLen)
	default:
	}
	if err != nil {
		ch.fail(fmt.Errorf("%w: %v", ErrChannelDown, err))
		r.unmap()
		r.put()
		return fmt.Errorf("%w (%v): %v", ErrAborted, why, err)
	}
	// Aborted at the target: no response will come (LIO sends none; its
	// credit returns in a later req_lim_delta).
	r.deactivate()
	r.unmap()
	r.put()
	return fmt.Errorf("%w: %w", ErrAborted, why)
}

// finish ends a command whose response token came: its SRP_RSP, or a
// LOGICAL UNIT RESET that ended it without one (resetDone).
func (ch *channel) finish(r *request, res *Result, inLen int) error {
	if r.reset {
		r.unmap()
		r.put()
		return fmt.Errorf("%w: logical unit reset", ErrAborted)
	}
	ch.fill(r, res, inLen)
	r.unmap()
	r.put()
	return nil
}

// build encodes the SRP_CMD for cmd into r.iu with the srp codec and maps
// its data (ib_srp srp_queuecommand + srp_map_data). It returns the IU
// length and the data-in length in bytes. r.cmd and r.descs are the slot's
// scratch, so building allocates nothing beyond what mapping registers.
func (ch *channel) build(r *request, cmd *Command) (int, int, error) {
	if len(cmd.CDB) == 0 || len(cmd.CDB) > 32 {
		return 0, 0, fmt.Errorf("srp initiator: CDB length %d not in 1..32", len(cmd.CDB))
	}
	outLen, inLen := totalLen(cmd.DataOut), totalLen(cmd.DataIn)
	if b := cmd.Buffer; b != nil {
		if outLen+inLen > 0 || cmd.Offset < 0 || cmd.Length < 0 || cmd.Offset+cmd.Length > len(b.Bytes()) {
			return 0, 0, fmt.Errorf("srp initiator: Buffer range %d+%d outside its %d bytes, or DataIn/DataOut also set", cmd.Offset, cmd.Length, len(b.Bytes()))
		}
		if b.dataIn {
			inLen = cmd.Length
		} else {
			outLen = cmd.Length
		}
	}
	if outLen > 0 && inLen > 0 {
		return 0, 0, errors.New("srp initiator: bidirectional commands are not supported")
	}
	if max(outLen, inLen) > ch.s.opts.MaxSect*512 {
		return 0, 0, fmt.Errorf("%w: %d bytes > %d", ErrTransferTooLarge, max(outLen, inLen), ch.s.opts.MaxSect*512)
	}
	c := &r.cmd
	*c = srp.Cmd{Tag: r.tag, LUN: cmd.LUN, TaskAttr: cmd.Attr & 7, CDB: cmd.CDB,
		DataOut: srp.DataBuf{Desc: c.DataOut.Desc[:0]}, DataIn: srp.DataBuf{Desc: c.DataIn.Desc[:0]}}
	switch {
	case outLen > 0 && ch.useImm && len(cmd.CDB) <= 16 && ImmDataOffset+outLen <= ch.maxIT:
		// Immediate data (SRP-2; ib_srp SRP_DATA_DESC_IMM): imm_buf, then
		// the data at imm_data_offset 68.
		c.DataOut.Format, c.ImmDataOffset = srp.DescImm, ImmDataOffset
		c.ImmData = r.gather(cmd, outLen)
	case outLen > 0:
		if err := ch.describe(r, &c.DataOut, cmd, cmd.DataOut, rdma.AccessRemoteRead); err != nil {
			return 0, 0, err
		}
	case inLen > 0:
		if err := ch.describe(r, &c.DataIn, cmd, cmd.DataIn, rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
			return 0, 0, err
		}
	}
	if err := ch.fits(c.Size()); err != nil {
		r.unmap()
		return 0, 0, err
	}
	b, err := c.AppendTo(r.iu[:0])
	if err != nil {
		r.unmap()
		return 0, 0, fmt.Errorf("srp initiator: %w", err)
	}
	return len(b), inLen, nil
}

// gather returns the data-out bytes of cmd as one slice: the Buffer range,
// the only segment, or the segments copied into the slot's gather buffer.
func (r *request) gather(cmd *Command, n int) []byte {
	if b := cmd.Buffer; b != nil {
		return b.Bytes()[cmd.Offset : cmd.Offset+cmd.Length]
	}
	var one []byte
	segs := 0
	for _, s := range cmd.DataOut {
		if len(s) > 0 {
			one = s
			segs++
		}
	}
	if segs <= 1 {
		return one
	}
	if cap(r.immBuf) < n {
		r.immBuf = make([]byte, 0, r.ch.maxIT)
	}
	g := r.immBuf[:0]
	for _, s := range cmd.DataOut {
		g = append(g, s...)
	}
	return g
}

// fits reports ErrIUTooLong when an SRP_CMD of n bytes exceeds the
// channel's initiator-to-target IU length (min of the login's req_it_iu_len
// and the target's max_it_iu_len).
func (ch *channel) fits(n int) error {
	if n > ch.maxIT {
		return fmt.Errorf("%w: %d bytes > %d", ErrIUTooLong, n, ch.maxIT)
	}
	return nil
}

// addCDBLen is the SRP_CMD additional CDB length for cdb: the bytes past
// 16 rounded up to a multiple of 4 (T10 SRP r16a add_cdb_len).
func addCDBLen(cdb []byte) int {
	return (max(len(cdb), 16) - 16 + 3) &^ 3
}

// describe fills one direction's data buffer descriptor: the command's
// registered Buffer range as a direct descriptor, or the segments of sg
// registered now: one segment → direct descriptor (count 0, as ib_srp
// leaves it); several → indirect descriptor with every descriptor inline
// and the same table in registered memory (ib_srp srp_map_data).
func (ch *channel) describe(r *request, d *srp.DataBuf, cmd *Command, sg [][]byte, acc rdma.Access) error {
	if b := cmd.Buffer; b != nil {
		d.Format = srp.DescDirect
		d.Desc = append(d.Desc, srp.DirectBuf{VA: b.mr.Addr() + uint64(cmd.Offset), Key: b.mr.RKey(), Len: uint32(cmd.Length)})
		return nil
	}
	nseg := 0
	for _, s := range sg {
		if len(s) > 0 {
			nseg++
		}
	}
	if nseg > ch.s.opts.CmdSGEntries {
		return fmt.Errorf("%w: %d segments, cmd_sg_entries %d", ErrTooManySegments, nseg, ch.s.opts.CmdSGEntries)
	}
	// Refuse before registering: a direct descriptor takes 16 bytes, an
	// indirect one 20 plus 16 per segment.
	need := srp.CmdSize + addCDBLen(cmd.CDB) + 16
	if nseg > 1 {
		need += 4 + 16*nseg
	}
	if err := ch.fits(need); err != nil {
		return err
	}
	for _, s := range sg {
		if len(s) == 0 {
			continue
		}
		mr, err := ch.s.dev.Register(s, acc)
		if err != nil {
			r.unmap()
			return fmt.Errorf("srp initiator: register data buffer: %w", err)
		}
		r.mrs = append(r.mrs, mr)
		d.Desc = append(d.Desc, srp.DirectBuf{VA: mr.Addr(), Key: mr.RKey(), Len: uint32(len(mr.Bytes()))})
	}
	if nseg == 1 {
		d.Format = srp.DescDirect
		return nil
	}
	// srp_indirect_buf: table_desc, len, desc_list[]; the table also in
	// registered memory.
	d.Format = srp.DescIndirect
	d.Table = srp.DirectBuf{VA: ch.tableMR.Addr() + uint64(r.tOff), Key: ch.tableMR.RKey(), Len: uint32(16 * nseg)}
	tbl := r.table[:0]
	for _, x := range d.Desc {
		d.Len += x.Len
		tbl = x.AppendTo(tbl)
	}
	return nil
}

// tmf sends an SRP_TSK_MGMT (T10 SRP r16a §6.7, table 18) and waits for its
// SRP_RSP; it returns the response code. A timeout takes the channel down.
func (ch *channel) tmf(ctx context.Context, fn srp.TMF, lun, taskTag uint64) (uint8, error) {
	code, _, err := ch.tmfSent(ctx, fn, lun, taskTag)
	return code, err
}

// tmfSent is tmf that also returns the TMF's place in the channel's send
// queue (request.sent): the channel's SRP_CMDs the target received before
// it are those placed lower.
func (ch *channel) tmfSent(ctx context.Context, fn srp.TMF, lun, taskTag uint64) (uint8, uint64, error) {
	var r *request
	select {
	case r = <-ch.tmfFree:
	case <-ch.dead:
		return 0, 0, ErrChannelDown
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if err := ch.takeCredit(ctx, 0); err != nil {
		ch.tmfFree <- r
		return 0, 0, err
	}
	r.activate(2)
	tm := srp.TaskMgmt{Tag: r.tag, LUN: lun, Func: fn, TaskTag: taskTag}
	b, _ := tm.AppendTo(r.iu[:0])
	if err := r.post(len(b)); err != nil {
		r.deactivate()
		ch.returnCredit()
		r.put()
		r.put()
		if errors.Is(err, rdma.ErrClosed) {
			ch.fail(err)
			return 0, 0, ErrChannelDown
		}
		return 0, 0, err
	}
	r.timer.Reset(ch.s.opts.TMFTimeout)
	select {
	case <-r.done:
		r.timer.Stop()
	case <-r.timer.C():
		ch.fail(fmt.Errorf("%w: %s timed out", ErrChannelDown, fn.Name()))
		r.put()
		return 0, 0, fmt.Errorf("srp: %s timed out after %v", fn.Name(), ch.s.opts.TMFTimeout)
	case <-ctx.Done():
		r.timer.Stop()
		ch.fail(fmt.Errorf("%w: %s cancelled", ErrChannelDown, fn.Name()))
		r.put()
		return 0, 0, ctx.Err()
	case <-ch.dead:
		r.timer.Stop()
		r.put()
		return 0, 0, ErrChannelDown
	}
	valid, code, sent := r.respValid, r.respCode, r.sent.Load()
	r.put()
	if !valid {
		return 0, 0, fmt.Errorf("%w: task management response without response data", ErrProtocol)
	}
	return code, sent, nil
}

// Buffer is memory registered once and reused by many commands: the
// registered-pool alternative to registering each command's memory (which is
// cheap in software providers and costly on RDMA hardware). Its remote
// rights are those of one direction only: remote write for data-in buffers,
// remote read for data-out buffers. A Buffer belongs to the device, so it
// stays valid across reconnects.
//
// A data-in Buffer is one command's at a time (rdma.AccessPlaceAhead):
// while a command reads into it, the provider may also write the bytes
// past the command's range, to the Buffer's end, with bytes of the
// target's stream (iWARP reads the target's RDMA Write segments several at
// a time, guessing where they go).
type Buffer struct {
	mr     rdma.MemoryRegion
	dataIn bool
}

// NewBuffer allocates and registers size bytes for data-in (dataIn true) or
// data-out commands.
func (s *Session) NewBuffer(size int, dataIn bool) (*Buffer, error) {
	acc := rdma.AccessRemoteRead
	if dataIn {
		acc = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessPlaceAhead
	}
	mr, err := s.dev.Register(make([]byte, size), acc)
	if err != nil {
		return nil, fmt.Errorf("srp initiator: register buffer: %w", err)
	}
	return &Buffer{mr: mr, dataIn: dataIn}, nil
}

// Bytes is the registered memory.
func (b *Buffer) Bytes() []byte { return b.mr.Bytes() }

// Release deregisters the buffer; no command may be using it.
func (b *Buffer) Release() error { return b.mr.Deregister() }
