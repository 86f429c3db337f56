package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// Task attributes (SAM-5 §8.6; SRP_CMD task_attr).
const (
	TaskSimple      uint8 = 0
	TaskHeadOfQueue uint8 = 1
	TaskOrdered     uint8 = 2
	TaskACA         uint8 = 4
)

// Task management functions (T10 SRP r16a table 19).
const (
	TMFAbortTask    uint8 = 0x01
	TMFAbortTaskSet uint8 = 0x02
	TMFClearTaskSet uint8 = 0x04
	TMFLUNReset     uint8 = 0x08
	TMFClearACA     uint8 = 0x40
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
	CDB  []byte
	Attr uint8
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
	var timedOut <-chan time.Time
	if d := ch.s.opts.CommandTimeout; d > 0 {
		r.timer.Reset(d)
		timedOut = r.timer.C
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
	code, err := ch.tmf(context.Background(), TMFAbortTask, lun, r.tag)
	if err == nil && code != 0 {
		// Not found: the response is on its way or already here.
		t := time.NewTimer(ch.s.opts.TMFTimeout)
		select {
		case <-r.done:
			t.Stop()
			ch.fill(r, res, inLen)
			r.unmap()
			r.put()
			return nil
		case <-t.C:
			err = fmt.Errorf("ABORT TASK failed (%s) and no response arrived", TMFResponseName(code))
		case <-ch.dead:
			err = ErrChannelDown
		}
	}
	select {
	case <-r.done:
		// The command completed after all.
		ch.fill(r, res, inLen)
		r.unmap()
		r.put()
		return nil
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

// build encodes the SRP_CMD for cmd into r.iu and maps its data (ib_srp
// srp_queuecommand + srp_map_data). It returns the IU length and the data-in
// length in bytes.
func (ch *channel) build(r *request, cmd *Command) (int, int, error) {
	iu := r.iu
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
	// SRP_CMD (T10 SRP r16a §6.8, table 16).
	clear(iu[:48])
	iu[0] = byte(srp.OpCmd)
	binary.BigEndian.PutUint64(iu[8:], r.tag)
	binary.BigEndian.PutUint64(iu[20:], cmd.LUN)
	iu[29] = cmd.Attr & 7
	addCDB := 0
	if len(cmd.CDB) > 16 {
		addCDB = (len(cmd.CDB) - 16 + 3) &^ 3
		clear(iu[48 : 48+addCDB])
		iu[31] = byte(addCDB)
	}
	copy(iu[32:], cmd.CDB)
	n := 48 + addCDB
	switch {
	case outLen > 0:
		if ch.useImm && addCDB == 0 && ImmDataOffset+outLen <= ch.maxIT {
			// Immediate data (SRP-2; ib_srp SRP_DATA_DESC_IMM): imm_buf then the
			// data at imm_data_offset 68.
			iu[5] = byte(srp.DescImm) << 4
			binary.BigEndian.PutUint32(iu[48:], uint32(outLen))
			clear(iu[52:ImmDataOffset])
			off := ImmDataOffset
			if b := cmd.Buffer; b != nil {
				off += copy(iu[off:], b.Bytes()[cmd.Offset:cmd.Offset+cmd.Length])
			}
			for _, s := range cmd.DataOut {
				off += copy(iu[off:], s)
			}
			return off, 0, nil
		}
		if cmd.Buffer != nil {
			if err := ch.fits(n + 16); err != nil {
				return 0, 0, err
			}
			iu[5] = byte(srp.DescDirect) << 4
			return putBufferDesc(iu, n, cmd), 0, nil
		}
		f, cnt, m, err := ch.mapData(r, n, cmd.DataOut, rdma.AccessRemoteRead)
		if err != nil {
			return 0, 0, err
		}
		iu[5], iu[6] = f<<4, cnt
		n = m
	case inLen > 0 && cmd.Buffer != nil:
		if err := ch.fits(n + 16); err != nil {
			return 0, 0, err
		}
		iu[5] = byte(srp.DescDirect)
		n = putBufferDesc(iu, n, cmd)
	case inLen > 0:
		f, cnt, m, err := ch.mapData(r, n, cmd.DataIn, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err != nil {
			return 0, 0, err
		}
		iu[5], iu[7] = f, cnt
		n = m
	}
	return n, inLen, nil
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

// putBufferDesc writes the direct descriptor of a command's registered
// Buffer range at iu[n:] and returns the new IU length.
func putBufferDesc(iu []byte, n int, cmd *Command) int {
	mr := cmd.Buffer.mr
	binary.BigEndian.PutUint64(iu[n:], mr.Addr()+uint64(cmd.Offset))
	binary.BigEndian.PutUint32(iu[n+8:], mr.RKey())
	binary.BigEndian.PutUint32(iu[n+12:], uint32(cmd.Length))
	return n + 16
}

// mapData registers the segments of sg and writes their descriptor at
// iu[n:]: one segment → direct descriptor (count 0, as ib_srp leaves it);
// several → indirect descriptor with every descriptor inline and the same
// table in registered memory (ib_srp srp_map_data). It returns the format,
// the descriptor count for the SRP_CMD and the new IU length.
func (ch *channel) mapData(r *request, n int, sg [][]byte, acc rdma.Access) (byte, byte, int, error) {
	nseg := 0
	for _, s := range sg {
		if len(s) > 0 {
			nseg++
		}
	}
	if nseg > ch.s.opts.CmdSGEntries {
		return 0, 0, 0, fmt.Errorf("%w: %d segments, cmd_sg_entries %d", ErrTooManySegments, nseg, ch.s.opts.CmdSGEntries)
	}
	// A direct descriptor takes 16 bytes, an indirect one 20 plus 16 per
	// segment.
	need := n + 16
	if nseg > 1 {
		need = n + 20 + 16*nseg
	}
	if err := ch.fits(need); err != nil {
		return 0, 0, 0, err
	}
	dev := ch.s.dev
	iu := r.iu
	for _, s := range sg {
		if len(s) == 0 {
			continue
		}
		mr, err := dev.Register(s, acc)
		if err != nil {
			r.unmap()
			return 0, 0, 0, fmt.Errorf("srp initiator: register data buffer: %w", err)
		}
		r.mrs = append(r.mrs, mr)
	}
	putDesc := func(b []byte, mr rdma.MemoryRegion) {
		binary.BigEndian.PutUint64(b, mr.Addr())
		binary.BigEndian.PutUint32(b[8:], mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(len(mr.Bytes())))
	}
	if nseg == 1 {
		putDesc(iu[n:], r.mrs[0])
		return byte(srp.DescDirect), 0, n + 16, nil
	}
	// srp_indirect_buf: table_desc, len, desc_list[].
	binary.BigEndian.PutUint64(iu[n:], ch.tableMR.Addr()+uint64(r.tOff))
	binary.BigEndian.PutUint32(iu[n+8:], ch.tableMR.RKey())
	binary.BigEndian.PutUint32(iu[n+12:], uint32(16*nseg))
	total := 0
	for i, mr := range r.mrs {
		putDesc(iu[n+20+16*i:], mr)
		putDesc(r.table[16*i:], mr)
		total += len(mr.Bytes())
	}
	binary.BigEndian.PutUint32(iu[n+16:], uint32(total))
	return byte(srp.DescIndirect), byte(nseg), n + 20 + 16*nseg, nil
}

// tmf sends an SRP_TSK_MGMT (T10 SRP r16a §6.7, table 18) and waits for its
// SRP_RSP; it returns the response code. A timeout takes the channel down.
func (ch *channel) tmf(ctx context.Context, fn uint8, lun, taskTag uint64) (uint8, error) {
	var r *request
	select {
	case r = <-ch.tmfFree:
	case <-ch.dead:
		return 0, ErrChannelDown
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if err := ch.takeCredit(ctx, 0); err != nil {
		ch.tmfFree <- r
		return 0, err
	}
	r.activate(2)
	tm := srp.TaskMgmt{Tag: r.tag, LUN: lun, Func: srp.TMF(fn), TaskTag: taskTag}
	b, _ := tm.AppendTo(r.iu[:0])
	if err := r.post(len(b)); err != nil {
		r.deactivate()
		ch.returnCredit()
		r.put()
		r.put()
		if errors.Is(err, rdma.ErrClosed) {
			ch.fail(err)
			return 0, ErrChannelDown
		}
		return 0, err
	}
	r.timer.Reset(ch.s.opts.TMFTimeout)
	select {
	case <-r.done:
		r.timer.Stop()
	case <-r.timer.C:
		ch.fail(fmt.Errorf("%w: %s timed out", ErrChannelDown, TMFName(fn)))
		r.put()
		return 0, fmt.Errorf("srp: %s timed out after %v", TMFName(fn), ch.s.opts.TMFTimeout)
	case <-ctx.Done():
		r.timer.Stop()
		ch.fail(fmt.Errorf("%w: %s cancelled", ErrChannelDown, TMFName(fn)))
		r.put()
		return 0, ctx.Err()
	case <-ch.dead:
		r.timer.Stop()
		r.put()
		return 0, ErrChannelDown
	}
	valid, code := r.respValid, r.respCode
	r.put()
	if !valid {
		return 0, fmt.Errorf("%w: task management response without response data", ErrProtocol)
	}
	return code, nil
}

// Buffer is memory registered once and reused by many commands: the
// registered-pool alternative to registering each command's memory (which is
// cheap in software providers and costly on RDMA hardware). Its remote
// rights are those of one direction only: remote write for data-in buffers,
// remote read for data-out buffers. A Buffer belongs to the device, so it
// stays valid across reconnects.
type Buffer struct {
	mr     rdma.MemoryRegion
	dataIn bool
}

// NewBuffer allocates and registers size bytes for data-in (dataIn true) or
// data-out commands.
func (s *Session) NewBuffer(size int, dataIn bool) (*Buffer, error) {
	acc := rdma.AccessRemoteRead
	if dataIn {
		acc = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
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
