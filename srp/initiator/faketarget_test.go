package initiator

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
)

// fakeTarget is a small SRP target over rdma/loopback for the initiator's
// unit tests: a RAM disk of 512-byte blocks behind READ(16)/WRITE(16),
// INQUIRY, READ CAPACITY(16), REPORT LUNS, SYNCHRONIZE CACHE and TEST UNIT
// READY (which it can hold to exercise aborts).
type fakeTarget struct {
	t      testing.TB
	dev    *loopback.Device
	ln     rdma.Listener
	disk   []byte
	reqLim uint32
	maxIT  uint32
	reject srp.RejectReason // non-zero: reject every login
	silent bool             // answer no login (the request stays pending)
	immOK  bool

	acceptMu sync.Mutex // held from Accept until the conn is in conns
	mu       sync.Mutex
	conns    []rdma.Conn
	logins   []srp.LoginRequest
	cmds     []srp.Cmd // copies of every SRP_CMD received (CDB only kept by value)
	tmfs     []srp.TaskMgmt
	rawIUs   [][]byte
	held     map[uint64]chan struct{} // tag → release (TEST UNIT READY held)
	answer   map[uint64]bool          // released held commands that get GOOD (not aborted)
	hold     bool
	// resetGate, when set, holds a LOGICAL UNIT RESET's response (after
	// it aborted the held commands) until it is closed.
	resetGate chan struct{}
	ignoreTMF bool // never answer task management
	// unitAttentions is how many of the next SRP_CMDs get CHECK CONDITION,
	// UNIT ATTENTION 29h/00h instead of running.
	unitAttentions int
	outstanding    int
	maxOut         int
	credRsps       []uint64
	aerRsps        []uint64
}

const fakeBlocks = 2048

func newFakeTarget(t testing.TB, net *loopback.Network) *fakeTarget {
	ft := &fakeTarget{t: t, dev: net.NewDevice("target"), disk: make([]byte, fakeBlocks*512),
		reqLim: 32, maxIT: 8276, immOK: true, held: map[uint64]chan struct{}{}, answer: map[uint64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := ft.dev.Listen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	ft.ln = ln
	go ft.acceptLoop(ctx)
	t.Cleanup(func() {
		cancel()
		ln.Close()
		ft.dropAll()
		ft.dev.Close()
	})
	return ft
}

func (ft *fakeTarget) addr() string { return ft.ln.Addr().String() }

func (ft *fakeTarget) dropAll() {
	ft.acceptMu.Lock()
	defer ft.acceptMu.Unlock()
	ft.mu.Lock()
	cs := ft.conns
	ft.conns = nil
	for _, c := range ft.held {
		close(c)
	}
	ft.held = map[uint64]chan struct{}{}
	ft.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (ft *fakeTarget) acceptLoop(ctx context.Context) {
	for {
		req, err := ft.ln.Accept(ctx)
		if err != nil {
			return
		}
		var lr srp.LoginRequestRDMA
		if err := lr.Unmarshal(req.PrivateData()); err != nil {
			ft.t.Errorf("fake target: bad login: %v", err)
			req.Reject(nil)
			continue
		}
		ft.mu.Lock()
		ft.logins = append(ft.logins, srp.LoginRequest(lr))
		reject, silent := ft.reject, ft.silent
		ft.mu.Unlock()
		if silent {
			continue
		}
		if reject != 0 {
			b, _ := (&srp.LoginReject{Reason: reject, BufFmt: srp.BufFmtDirect | srp.BufFmtIndirect}).Marshal()
			req.Reject(b)
			continue
		}
		rsp := srp.LoginResponse{ReqLimDelta: ft.reqLim, MaxITIULen: ft.maxIT, MaxTIIULen: 256,
			BufFmt: srp.BufFmtDirect | srp.BufFmtIndirect}
		if ft.immOK && lr.ReqFlags&srp.LoginImmRequested != 0 {
			rsp.RspFlags |= srp.LoginRspImmSupp
		}
		b, _ := rsp.Marshal()
		ft.acceptMu.Lock()
		conn, err := req.Accept(ctx, rdma.QPConfig{SendDepth: 256, RecvDepth: int(ft.reqLim) + 4, IRD: 16, ORD: 16}, b)
		if err != nil {
			ft.acceptMu.Unlock()
			ft.t.Errorf("fake target: accept: %v", err)
			continue
		}
		ft.mu.Lock()
		ft.conns = append(ft.conns, conn)
		ft.mu.Unlock()
		ft.acceptMu.Unlock()
		go (&fakeConn{ft: ft, conn: conn}).serve()
	}
}

type fakeConn struct {
	ft      *fakeTarget
	conn    rdma.Conn
	mu      sync.Mutex
	waiters map[uint64]chan rdma.Completion
	nextID  atomic.Uint64
	sendMu  sync.Mutex
}

func (fc *fakeConn) serve() {
	ft := fc.ft
	fc.waiters = map[uint64]chan rdma.Completion{}
	n := int(ft.reqLim) + 4
	mr, err := ft.dev.Register(make([]byte, n*int(ft.maxIT)), rdma.AccessLocalWrite)
	if err != nil {
		return
	}
	for i := 0; i < n; i++ {
		fc.conn.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: mr, Offset: i * int(ft.maxIT), Length: int(ft.maxIT)}})
	}
	var cs [16]rdma.Completion
	for {
		k, err := fc.conn.Poll(context.Background(), cs[:])
		for _, c := range cs[:k] {
			if c.Op == rdma.OpRecv {
				if c.Status != rdma.StatusSuccess {
					continue
				}
				iu := append([]byte(nil), mr.Bytes()[int(c.ID)*int(ft.maxIT):][:c.ByteLen]...)
				fc.conn.PostRecv(rdma.RecvWR{ID: c.ID, Local: rdma.SGE{MR: mr, Offset: int(c.ID) * int(ft.maxIT), Length: int(ft.maxIT)}})
				go fc.handle(iu)
				continue
			}
			fc.mu.Lock()
			w := fc.waiters[c.ID]
			delete(fc.waiters, c.ID)
			fc.mu.Unlock()
			if w != nil {
				w <- c
			}
		}
		if err != nil {
			fc.mu.Lock()
			for id, w := range fc.waiters {
				w <- rdma.Completion{ID: id, Status: rdma.StatusFlushed}
			}
			fc.waiters = map[uint64]chan rdma.Completion{}
			fc.mu.Unlock()
			return
		}
	}
}

// post posts wr signaled and waits for its completion.
func (fc *fakeConn) post(wr rdma.SendWR) rdma.Completion {
	wr.ID = fc.nextID.Add(1)
	wr.Signaled = true
	w := make(chan rdma.Completion, 1)
	fc.mu.Lock()
	fc.waiters[wr.ID] = w
	fc.mu.Unlock()
	fc.sendMu.Lock()
	err := fc.conn.PostSend(wr)
	fc.sendMu.Unlock()
	if err != nil {
		return rdma.Completion{Status: rdma.StatusFlushed, Err: err}
	}
	return <-w
}

func (fc *fakeConn) send(iu srp.IU) {
	b, _ := iu.AppendTo(nil)
	mr, err := fc.ft.dev.Register(b, 0)
	if err != nil {
		return
	}
	fc.post(rdma.SendWR{Op: rdma.OpSend, Local: []rdma.SGE{{MR: mr, Length: len(b)}}})
	mr.Deregister()
}

func (fc *fakeConn) handle(iu []byte) {
	ft := fc.ft
	op, _ := srp.PeekOpcode(iu)
	ft.mu.Lock()
	ft.rawIUs = append(ft.rawIUs, iu)
	ft.mu.Unlock()
	switch op {
	case srp.OpCredRsp, srp.OpAerRsp:
		tag := binary.BigEndian.Uint64(iu[8:])
		ft.mu.Lock()
		if op == srp.OpCredRsp {
			ft.credRsps = append(ft.credRsps, tag)
		} else {
			ft.aerRsps = append(ft.aerRsps, tag)
		}
		ft.mu.Unlock()
	case srp.OpTskMgmt:
		var tm srp.TaskMgmt
		if err := tm.Unmarshal(iu); err != nil {
			ft.t.Errorf("fake target: %v", err)
			return
		}
		ft.mu.Lock()
		ft.tmfs = append(ft.tmfs, tm)
		if ft.ignoreTMF {
			ft.mu.Unlock()
			return
		}
		code := srp.TMFRspFailed
		switch tm.Func {
		case srp.TMFAbortTask:
			if c, ok := ft.held[tm.TaskTag]; ok {
				delete(ft.held, tm.TaskTag)
				close(c)
				code = 0
			}
		case srp.TMFLUNReset:
			for tag, c := range ft.held {
				delete(ft.held, tag)
				close(c)
			}
			code = 0
		}
		gate := ft.resetGate
		ft.mu.Unlock()
		if gate != nil && tm.Func == srp.TMFLUNReset {
			<-gate
		}
		fc.send(&srp.Rsp{ReqLimDelta: 1, Tag: tm.Tag, Flags: srp.RspValid, RespData: []byte{0, 0, 0, code}})
	case srp.OpCmd:
		var c srp.Cmd
		if err := c.UnmarshalImm(iu, srp.DefaultImmDataOffset); err != nil {
			ft.t.Errorf("fake target: bad SRP_CMD: %v", err)
			return
		}
		ft.mu.Lock()
		ft.cmds = append(ft.cmds, c)
		ft.outstanding++
		ft.maxOut = max(ft.maxOut, ft.outstanding)
		ft.mu.Unlock()
		rsp := fc.command(&c)
		ft.mu.Lock()
		ft.outstanding--
		ft.mu.Unlock()
		if rsp != nil {
			fc.send(rsp)
		}
	default:
		ft.t.Errorf("fake target: unexpected IU %v", op)
	}
}

// rdmaBufs moves data between local and the initiator's descriptors.
func (fc *fakeConn) rdma(op rdma.Opcode, descs []srp.DirectBuf, data []byte) bool {
	off := 0
	for _, d := range descs {
		n := min(int(d.Len), len(data)-off)
		if n <= 0 {
			break
		}
		mr, err := fc.ft.dev.Register(data[off:off+n], rdma.AccessLocalWrite)
		if err != nil {
			return false
		}
		c := fc.post(rdma.SendWR{Op: op, Local: []rdma.SGE{{MR: mr, Length: n}}, Remote: rdma.RemoteAddr{Addr: d.VA, RKey: d.Key}})
		mr.Deregister()
		if c.Status != rdma.StatusSuccess {
			return false
		}
		off += n
	}
	return true
}

func checkCondition(key, asc, ascq uint8) []byte {
	s := make([]byte, 18)
	s[0], s[2], s[7], s[12], s[13] = 0x70, key, 10, asc, ascq
	return s
}

func (fc *fakeConn) command(c *srp.Cmd) *srp.Rsp {
	ft := fc.ft
	out, in, outLen, inLen := c.Data()
	rsp := &srp.Rsp{ReqLimDelta: 1, Tag: c.Tag}
	var dataOut []byte
	if c.DataOut.Format == srp.DescImm {
		dataOut = c.ImmData
	} else if outLen > 0 {
		dataOut = make([]byte, outLen)
		if !fc.rdma(rdma.OpRDMARead, out, dataOut) {
			return nil
		}
	}
	var dataIn []byte
	cdb := c.CDB
	ft.mu.Lock()
	ua := ft.unitAttentions > 0
	if ua {
		ft.unitAttentions--
	}
	ft.mu.Unlock()
	if ua {
		// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED; the command did not run.
		rsp.Status, rsp.Flags, rsp.Sense = sense.StatusCheckCondition, srp.SnsValid, checkCondition(sense.KeyUnitAttention, 0x29, 0x00)
		return rsp
	}
	switch cdb[0] {
	case 0x00: // TEST UNIT READY
		ft.mu.Lock()
		hold := ft.hold
		var rel chan struct{}
		if hold {
			rel = make(chan struct{})
			ft.held[c.Tag] = rel
		}
		ft.mu.Unlock()
		if hold {
			<-rel
			ft.mu.Lock()
			good := ft.answer[c.Tag]
			delete(ft.answer, c.Tag)
			ft.mu.Unlock()
			if !good {
				return nil // aborted: no response (TAS=0)
			}
		}
	case 0x12:
		dataIn = make([]byte, 36)
		copy(dataIn[8:], "GOSRP   FAKE TARGET     0001")
		dataIn[2], dataIn[3], dataIn[4] = 6, 2, 31
	case 0x9e:
		dataIn = make([]byte, 32)
		binary.BigEndian.PutUint64(dataIn, fakeBlocks-1)
		binary.BigEndian.PutUint32(dataIn[8:], 512)
	case 0xa0:
		dataIn = make([]byte, 24)
		binary.BigEndian.PutUint32(dataIn, 16)
		binary.BigEndian.PutUint64(dataIn[16:], LUN(1))
	case 0x35:
	case 0x88, 0x8a:
		lba := binary.BigEndian.Uint64(cdb[2:])
		n := uint64(binary.BigEndian.Uint32(cdb[10:]))
		if lba+n > fakeBlocks {
			rsp.Status, rsp.Flags, rsp.Sense = sense.StatusCheckCondition, srp.SnsValid, checkCondition(5, 0x21, 0)
			break
		}
		ft.mu.Lock()
		if cdb[0] == 0x88 {
			dataIn = append([]byte(nil), ft.disk[lba*512:(lba+n)*512]...)
		} else {
			copy(ft.disk[lba*512:], dataOut[:min(len(dataOut), int(n*512))])
		}
		ft.mu.Unlock()
	default:
		rsp.Status, rsp.Flags, rsp.Sense = sense.StatusCheckCondition, srp.SnsValid, checkCondition(5, 0x20, 0)
	}
	if len(dataIn) > int(inLen) {
		dataIn = dataIn[:inLen]
	}
	if inLen > 0 {
		if !fc.rdma(rdma.OpRDMAWrite, in, dataIn) {
			return nil
		}
		if uint64(len(dataIn)) < inLen {
			rsp.Flags |= srp.DataInUnder
			rsp.DataInResCnt = uint32(inLen - uint64(len(dataIn)))
		}
	}
	return rsp
}

// waitConn waits until the target holds at least one channel: Dial
// returns once the login response is in, which can be before the target's
// serving side has recorded the channel.
func (ft *fakeTarget) waitConn(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ft.mu.Lock()
		n := len(ft.conns)
		ft.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake target recorded no channel")
		}
		time.Sleep(time.Millisecond)
	}
}

// sendToAll sends iu on every channel the target holds (CRED_REQ, AER_REQ
// tests) and returns how many that is.
func (ft *fakeTarget) sendToAll(iu srp.IU) int {
	ft.mu.Lock()
	cs := append([]rdma.Conn(nil), ft.conns...)
	ft.mu.Unlock()
	for _, c := range cs {
		fc := &fakeConn{ft: ft, conn: c, waiters: map[uint64]chan rdma.Completion{}}
		b, _ := iu.AppendTo(nil)
		mr, _ := ft.dev.Register(b, 0)
		// Unsignaled: the serving goroutine owns the completions.
		fc.conn.PostSend(rdma.SendWR{ID: 1 << 40, Op: rdma.OpSend, Local: []rdma.SGE{{MR: mr, Length: len(b)}}})
	}
	return len(cs)
}

// setHold sets whether the target holds the TEST UNIT READYs it receives
// (unanswered until released through held, or aborted).
func (ft *fakeTarget) setHold(on bool) {
	ft.mu.Lock()
	ft.hold = on
	ft.mu.Unlock()
}
