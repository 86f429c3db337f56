package target

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp"
)

// blockLBA is where the fuzz core's commands block until aborted (or
// 300 ms).
const blockLBA = 1000

// FuzzSession drives one live channel with a random sequence of IUs
// decoded from the input, in the manner of a well-formed session with
// mutations: READ(10) and WRITE(10) (direct descriptors and immediate
// data), commands that block in the core until aborted, ABORT TASK of an
// outstanding command, LUN RESET, SRP_CMDs with one byte changed, and
// pauses that collect responses and answer SRP_CRED_REQs. It checks, as an
// initiator would (T10 SRP r16a §5.5.2, SAM-5 §7):
//   - credits: what the initiator holds (the LOGIN_RSP's req_lim_delta plus
//     every delta received, minus every request sent) never goes negative
//     and never exceeds the login's grant, and once the channel is quiet
//     every credit has come back;
//   - every command is answered exactly once, or aborted by a TMF whose
//     FUNCTION COMPLETE came first; no response for an unknown tag;
//   - no response for a command after the TMF that aborted it;
//   - no panic, no hang: the channel answers or is logged out, and the
//     env checks that it released every memory region.
func FuzzSession(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 5})
	f.Add([]byte{2, 3, 0, 5, 1, 5})
	f.Add([]byte{2, 2, 6, 5, 0, 5})
	f.Add([]byte{4, 17, 0x42, 4, 60, 0xff, 5, 0, 5})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 2, 3, 1, 5})
	f.Fuzz(fuzzSession)
}

type sessionModel struct {
	t           *testing.T
	i           *ini
	credit, max int
	nextTag     uint64
	outstanding map[uint64]bool   // SRP_CMD tags awaiting a response
	mutated     map[uint64]uint64 // mutated SRP_CMDs (tag → LUN field): at most one response
	tmfs        map[uint64]srp.TaskMgmt
	aborted     map[uint64]bool // aborted by a completed TMF: no response may follow
	closed      bool
}

func fuzzSession(t *testing.T, data []byte) {
	if len(data) > 256 {
		data = data[:256]
	}
	e := newEnv(t, nil)
	e.core.setHook(func(ctx context.Context, cmd *scsi.Command) (scsi.Result, bool) {
		if (cmd.CDB[0] == 0x28 || cmd.CDB[0] == 0x2a) && binary.BigEndian.Uint32(cmd.CDB[2:]) == blockLBA {
			// The test core's TMF cancels only the commands it already
			// runs: one just arriving completes after a while instead.
			select {
			case <-ctx.Done():
				return scsi.Result{Aborted: true}, true
			case <-time.After(300 * time.Millisecond):
			}
		}
		return scsi.Result{}, false
	})
	i := e.login(defaultLogin())
	m := &sessionModel{t: t, i: i, nextTag: 1, outstanding: map[uint64]bool{}, mutated: map[uint64]uint64{},
		tmfs: map[uint64]srp.TaskMgmt{}, aborted: map[uint64]bool{}}
	m.credit = int(binary.BigEndian.Uint32(i.rsp[4:]))
	m.max = m.credit
	mem, d := i.buf(0, 64<<10)
	_ = mem
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for len(data) > 0 && !m.closed {
		if m.credit == 0 {
			m.collect(200 * time.Millisecond)
			if m.credit == 0 {
				// Only blocked commands hold the credit: abort them all.
				m.request(&srp.TaskMgmt{Func: srp.TMFLUNReset})
				m.collect(2 * time.Second)
			}
			continue
		}
		switch op := next() % 7; op {
		case 0: // READ(10)
			n := uint16(1 + next()%8)
			m.command(&srp.Cmd{CDB: cdb10(0x28, uint32(next()), n), DataIn: direct(srp.DirectBuf{VA: d.VA, Key: d.Key, Len: uint32(n) * 512})})
		case 1: // WRITE(10) with immediate data
			n := uint16(1 + next()%8)
			m.command(&srp.Cmd{CDB: cdb10(0x2a, uint32(next()), n), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: make([]byte, int(n)*512)})
		case 2: // a command that blocks until aborted
			m.command(&srp.Cmd{CDB: cdb10(0x28, blockLBA, 1), DataIn: direct(srp.DirectBuf{VA: d.VA, Key: d.Key, Len: 512})})
		case 3: // ABORT TASK of an outstanding command (or of an unknown tag)
			victim := uint64(next())
			for tag := range m.outstanding {
				victim = tag
				break
			}
			m.request(&srp.TaskMgmt{Func: srp.TMFAbortTask, TaskTag: victim})
		case 4: // an SRP_CMD with one byte changed (not the opcode, not the tag)
			b, err := (&srp.Cmd{CDB: cdb10(0x28, uint32(next()), 1), DataIn: direct(srp.DirectBuf{VA: d.VA, Key: d.Key, Len: 512})}).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			pos := 1 + int(next())%(len(b)-1)
			if pos >= 8 && pos < 16 {
				pos += 8
			}
			b[pos%len(b)] = next()
			tag := m.tag()
			binary.BigEndian.PutUint64(b[8:], tag)
			m.mutated[tag] = binary.BigEndian.Uint64(b[20:]) // the mutation may change the LUN
			m.credit--
			if err := i.trySend(b); err != nil {
				m.closed = true
			}
		case 5: // a pause: collect what arrives
			m.collect(20 * time.Millisecond)
		case 6: // LUN RESET
			m.request(&srp.TaskMgmt{Func: srp.TMFLUNReset})
		}
		m.check()
	}
	if m.closed {
		return
	}
	// Quiesce: abort what blocks, collect everything, then one TEST UNIT
	// READY whose response carries any credit still owed.
	m.request(&srp.TaskMgmt{Func: srp.TMFLUNReset})
	deadline := time.Now().Add(10 * time.Second)
	for (len(m.outstanding) > 0 || len(m.tmfs) > 0) && !m.closed {
		if time.Now().After(deadline) {
			t.Fatalf("after LUN RESET: %d commands and %d TMFs unanswered", len(m.outstanding), len(m.tmfs))
		}
		m.collect(100 * time.Millisecond)
	}
	if m.closed {
		return
	}
	// The test core answers a TMF before the aborted commands have ended
	// (the SCSI core waits for them): their credit may be released after
	// a response, to ride on the next one.
	for try := 0; try < 5 && !m.closed && m.credit < m.max; try++ {
		m.command(&srp.Cmd{CDB: make([]byte, 16)})
		for len(m.outstanding) > 0 && !m.closed {
			if time.Now().After(deadline) {
				t.Fatal("TEST UNIT READY unanswered")
			}
			m.collect(100 * time.Millisecond)
		}
		m.collect(50 * time.Millisecond) // a mutated command may still be answered
	}
	if !m.closed && m.credit != m.max {
		t.Fatalf("quiet channel: the initiator holds %d credits, the login granted %d", m.credit, m.max)
	}
}

func (m *sessionModel) isMutated(tag uint64) bool { _, ok := m.mutated[tag]; return ok }

func (m *sessionModel) tag() uint64 { m.nextTag++; return m.nextTag }

// command sends an SRP_CMD with a fresh tag.
func (m *sessionModel) command(c *srp.Cmd) {
	c.Tag = m.tag()
	m.outstanding[c.Tag] = true
	m.send(c)
}

// request sends an SRP_TSK_MGMT with a fresh tag.
func (m *sessionModel) request(r *srp.TaskMgmt) {
	r.Tag = m.tag()
	m.tmfs[r.Tag] = *r
	m.send(r)
}

func (m *sessionModel) send(iu srp.IU) {
	b, err := iu.Marshal()
	if err != nil {
		m.t.Fatal(err)
	}
	m.credit--
	if err := m.i.trySend(b); err != nil {
		m.closed = true
	}
}

func (m *sessionModel) check() {
	if m.credit < 0 || m.credit > m.max {
		m.t.Fatalf("the initiator holds %d credits (login granted %d)", m.credit, m.max)
	}
}

// collect handles the IUs that arrive within d.
func (m *sessionModel) collect(d time.Duration) {
	ctx, cancel := context.WithTimeout(m.i.e.ctx, d)
	defer cancel()
	for {
		b, err := m.i.tryNext(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.closed = true // the target logged the channel out
			}
			return
		}
		m.handle(b)
	}
}

func (m *sessionModel) handle(b []byte) {
	t := m.t
	switch srp.Opcode(b[0]) {
	case srp.OpCredReq:
		r, err := srp.UnmarshalCredReq(b)
		if err != nil {
			t.Fatalf("bad SRP_CRED_REQ % x: %v", b, err)
		}
		m.credit += int(r.ReqLimDelta)
		rsp, _ := (&srp.CredRsp{Tag: r.Tag}).Marshal()
		if err := m.i.trySend(rsp); err != nil {
			m.closed = true
		}
	case srp.OpRsp:
		r, err := srp.UnmarshalRsp(b)
		if err != nil {
			t.Fatalf("bad SRP_RSP % x: %v", b, err)
		}
		m.credit += int(r.ReqLimDelta)
		switch {
		case m.outstanding[r.Tag]:
			delete(m.outstanding, r.Tag)
		case m.isMutated(r.Tag):
			delete(m.mutated, r.Tag)
		case m.aborted[r.Tag]:
			t.Fatalf("SRP_RSP for tag %d after the TMF that aborted it", r.Tag)
		default:
			tmf, ok := m.tmfs[r.Tag]
			if !ok {
				t.Fatalf("SRP_RSP for tag %d, which is not outstanding (answered twice or never sent)", r.Tag)
			}
			delete(m.tmfs, r.Tag)
			if r.Flags&srp.RspValid == 0 || len(r.RespData) < 4 {
				t.Fatalf("TMF response without response data: %+v", r)
			}
			if r.RespData[3] != 0 { // not FUNCTION COMPLETE: nothing aborted
				break
			}
			if tmf.Func == srp.TMFAbortTask {
				if m.outstanding[tmf.TaskTag] {
					delete(m.outstanding, tmf.TaskTag)
					m.aborted[tmf.TaskTag] = true
				}
				break
			}
			// LUN RESET: every command of LUN 0 sent before it (tags
			// grow) and still outstanding was aborted.
			for tag := range m.outstanding {
				if tag < r.Tag {
					delete(m.outstanding, tag)
					m.aborted[tag] = true
				}
			}
			for tag, lun := range m.mutated {
				if tag < r.Tag && lun == 0 {
					delete(m.mutated, tag)
					m.aborted[tag] = true
				}
			}
		}
	default:
		t.Fatalf("unexpected IU from the target: % x", b)
	}
	m.check()
}
