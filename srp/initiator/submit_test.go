package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
	"github.com/gosrp/gosrp/srp"
)

// submitOne submits cmd and returns a channel that delivers done's error.
func submitOne(t *testing.T, s *Session, cmd *Command, res *Result) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	if err := s.Submit(cmd, res, func(err error) { errc <- err }); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return errc
}

// waitErr waits for a callback's error, for the test's time at most.
func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-testCtx(t).Done():
		t.Fatal("callback not called")
		return nil
	}
}

// waitHeld waits until the fake target holds n TEST UNIT READYs.
func waitHeld(t *testing.T, ft *fakeTarget, n int) {
	t.Helper()
	waitFor(t, testCtx(t), "held commands", func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		return len(ft.held) == n
	})
}

// TestSubmitChainsFromCallbacks: commands submitted from the callbacks of
// earlier ones, several in flight over two channels, read back what was
// written, and never exceed the target's credits.
func TestSubmitChainsFromCallbacks(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { ft.reqLim = 6; o.ChCount = 2 })
	ctx := testCtx(t)
	want := make([]byte, fakeBlocks*512)
	rand.Read(want)
	for off := 0; off < len(want); off += 256 << 10 {
		if err := s.Write16(ctx, 0, uint64(off/512), want[off:off+256<<10], 512, false); err != nil {
			t.Fatal(err)
		}
	}
	const inFlight, perSlot, blocks = 8, 40, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	type slot struct {
		cmd  Command
		res  Result
		cdb  [16]byte
		buf  []byte
		lba  uint64
		left int
		done func(error)
	}
	for i := range inFlight {
		sl := &slot{buf: make([]byte, blocks*512), left: perSlot, lba: uint64(i * blocks)}
		issue := func() error {
			PutRW16(sl.cdb[:], false, sl.lba, blocks, false)
			sl.cmd = Command{CDB: sl.cdb[:], DataIn: [][]byte{sl.buf}}
			return s.Submit(&sl.cmd, &sl.res, sl.done)
		}
		sl.done = func(err error) {
			if err == nil {
				err = sl.res.Err()
			}
			if err == nil && !bytes.Equal(sl.buf, want[sl.lba*512:(sl.lba+blocks)*512]) {
				err = errors.New("data read differs from data written")
			}
			if err == nil {
				sl.left--
				sl.lba = (sl.lba + inFlight*blocks) % (fakeBlocks - blocks)
				if sl.left > 0 {
					// Credits and slots of this channel may all be taken
					// by other slots' commands: then wait as a blocking
					// caller would.
					if err = issue(); errors.Is(err, ErrQueueFull) {
						go func() {
							for errors.Is(err, ErrQueueFull) {
								time.Sleep(time.Millisecond)
								err = issue()
							}
							if err != nil {
								mu.Lock()
								failures = append(failures, err)
								mu.Unlock()
								wg.Done()
							}
						}()
						return
					}
					if err == nil {
						return
					}
				}
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
			wg.Done()
		}
		wg.Add(1)
		if err := issue(); err != nil {
			t.Fatalf("first Submit of slot %d: %v", i, err)
		}
	}
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	// Two channels, req_lim 6 each, one credit kept for TMFs.
	if ft.maxOut > 2*5 {
		t.Errorf("target saw %d commands outstanding, more than 2 channels × (req_lim-1)", ft.maxOut)
	}
}

// TestSubmitQueueFull: Submit does not wait for a credit; it reports
// ErrQueueFull once req_lim-1 commands are outstanding on the only channel.
func TestSubmitQueueFull(t *testing.T) {
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { ft.reqLim = 4 })
	ft.setHold(true)
	cmds := make([]Command, 4)
	ress := make([]Result, 4)
	var errcs []<-chan error
	for i := range 3 {
		cmds[i] = Command{CDB: make([]byte, 6)}
		errcs = append(errcs, submitOne(t, s, &cmds[i], &ress[i]))
	}
	cmds[3] = Command{CDB: make([]byte, 6)}
	if err := s.Submit(&cmds[3], &ress[3], func(error) { t.Error("callback of a command that was not submitted") }); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fourth Submit with req_lim 4: %v, want ErrQueueFull", err)
	}
	waitHeld(t, ft, 3)
	ft.mu.Lock()
	for _, rel := range ft.held {
		close(rel)
	}
	clear(ft.held)
	ft.hold = false
	ft.mu.Unlock()
	// Released held commands get no response (the fake target treats them
	// as aborted): the channel's loss ends them.
	s.Drop(0)
	for i, errc := range errcs {
		if err := waitErr(t, errc); !errors.Is(err, ErrChannelDown) {
			t.Errorf("command %d after the channel dropped: %v, want ErrChannelDown", i, err)
		}
	}
}

// TestSubmitTimeoutAborts: a submitted command without a response is
// aborted with ABORT TASK after CommandTimeout (to the watchdog's next
// tick), as Execute's would be.
func TestSubmitTimeoutAborts(t *testing.T) {
	clk := newManualClock()
	ft, s := setup(t, func(ft *fakeTarget, o *Options) { o.Clock = clk })
	ctx := testCtx(t)
	ft.setHold(true)
	var res Result
	errc := submitOne(t, s, &Command{CDB: make([]byte, 6)}, &res)
	waitHeld(t, ft, 1)
	tick := DefaultCommandTimeout / watchdogTicks
	// Submitted just after tick 0: CommandTimeout is up at tick
	// watchdogTicks (not seen as such), the command ends at the next.
	for i := 1; i <= watchdogTicks+1; i++ {
		waitFor(t, ctx, "the watchdog's timer", func() bool { return clk.running() == 1 })
		clk.Advance(tick)
		if i == watchdogTicks+1 {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("command ended after %v, before its timeout of %v: %v", time.Duration(i)*tick, DefaultCommandTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		t.Fatal("command not ended after its timeout")
	}
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("held command: %v, want ErrAborted", err)
	}
	ft.mu.Lock()
	if len(ft.tmfs) != 1 || ft.tmfs[0].Func != srp.TMFAbortTask || ft.tmfs[0].TaskTag != ft.cmds[len(ft.cmds)-1].Tag {
		t.Errorf("TMFs %+v, want one ABORT TASK naming tag %#x", ft.tmfs, ft.cmds[len(ft.cmds)-1].Tag)
	}
	ft.hold = false
	ft.mu.Unlock()
	if err := waitErr(t, submitOne(t, s, &Command{CDB: make([]byte, 6)}, &res)); err != nil || res.Err() != nil {
		t.Fatalf("after abort: %v, %v", err, res.Err())
	}
}

// TestSubmitLUNReset: a LOGICAL UNIT RESET ends the LUN's submitted
// commands with ErrAborted (the target sends no response for them).
func TestSubmitLUNReset(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	ft.setHold(true)
	var res Result
	errc := submitOne(t, s, &Command{CDB: make([]byte, 6)}, &res)
	waitHeld(t, ft, 1)
	if err := s.LUNReset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, errc); !errors.Is(err, ErrAborted) {
		t.Errorf("submitted command over a LUN reset: %v, want ErrAborted", err)
	}
}

// TestSubmitFromResetCallback: a command submitted by the callback of one
// a LOGICAL UNIT RESET ended is not taken for one of the reset's.
func TestSubmitFromResetCallback(t *testing.T) {
	ft, s := setup(t, nil)
	ctx := testCtx(t)
	ft.setHold(true)
	var res, res2 Result
	cmd2 := Command{CDB: make([]byte, 6)}
	first, second := make(chan error, 1), make(chan error, 1)
	err := s.Submit(&Command{CDB: make([]byte, 6)}, &res, func(err error) {
		first <- err
		ft.setHold(false)
		if err := s.Submit(&cmd2, &res2, func(err error) { second <- err }); err != nil {
			second <- err
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(t, ft, 1)
	if err := s.LUNReset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, first); !errors.Is(err, ErrAborted) {
		t.Errorf("command over the reset: %v, want ErrAborted", err)
	}
	if err := waitErr(t, second); err != nil || res2.Err() != nil {
		t.Errorf("command submitted after the reset: %v, %v; want GOOD", err, res2.Err())
	}
}

// TestSubmitClose: Close ends submitted commands (their callbacks have run
// when it returns) and Submit after Close fails at once.
func TestSubmitClose(t *testing.T) {
	ft, s := setup(t, nil)
	ft.setHold(true)
	var res Result
	errc := submitOne(t, s, &Command{CDB: make([]byte, 6)}, &res)
	waitHeld(t, ft, 1)
	s.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("submitted command at Close: %v, want ErrClosed", err)
		}
	default:
		t.Error("Close returned before the submitted command's callback ran")
	}
	if err := s.Submit(&Command{CDB: make([]byte, 6)}, &res, func(error) { t.Error("callback after Close") }); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v, want ErrClosed", err)
	}
}

// TestSubmitAllocations holds a submitted command, callback included, to
// no allocation in the initiator (as TestCommandPathAllocs does Execute's).
func TestSubmitAllocations(t *testing.T) {
	for _, dataIn := range []bool{true, false} {
		ch, _ := newStubChannel(t)
		ch.conn = &echoConn{ch: ch}
		ch.useImm = true
		ch.s.state, ch.s.chans = StateRunning, []*channel{ch}
		t.Cleanup(func() { close(ch.dead) })
		buf, err := ch.s.NewBuffer(4096, dataIn)
		if err != nil {
			t.Fatal(err)
		}
		op := map[bool]byte{true: opRead16, false: opWrite16}[dataIn]
		cmd := Command{CDB: rw16(op, 0, 8, !dataIn), Buffer: buf, Length: 4096}
		var res Result
		var got error
		called := 0
		done := func(err error) { got, called = err, called+1 }
		run := func() {
			if err := ch.s.Submit(&cmd, &res, done); err != nil {
				t.Fatal(err)
			}
		}
		run() // the watchdog starts with the first
		if n := testing.AllocsPerRun(100, run); n != 0 {
			t.Errorf("data-in %v: %v allocations per submitted command, want 0", dataIn, n)
		}
		if called != 102 || got != nil || res.Status != 0 {
			t.Errorf("data-in %v: %d callbacks for 102 commands, last error %v, status %#x", dataIn, called, got, res.Status)
		}
	}
}

// TestLUNResetSparesCommandsSentAfter: a command queued on the reset's
// channel after the LOGICAL UNIT RESET's TMF reaches the target after the
// reset and runs there. The reset must not end it: its caller would take
// it as aborted and reuse buffers the target is still to read. Its
// response ends it. The one sent before the TMF is ended by the reset.
func TestLUNResetSparesCommandsSentAfter(t *testing.T) {
	for _, async := range []bool{true, false} {
		t.Run(map[bool]string{true: "Submit", false: "Execute"}[async], func(t *testing.T) {
			ft, s := setup(t, nil)
			ctx := testCtx(t)
			gate := make(chan struct{})
			ft.mu.Lock()
			ft.hold, ft.resetGate = true, gate
			ft.mu.Unlock()
			send := func() (<-chan error, *Result) {
				res := new(Result)
				if async {
					return submitOne(t, s, &Command{CDB: make([]byte, 6)}, res), res
				}
				errc := make(chan error, 1)
				go func() {
					var err error
					*res, err = s.Execute(ctx, &Command{CDB: make([]byte, 6)})
					errc <- err
				}()
				return errc, res
			}
			errA, _ := send()
			waitHeld(t, ft, 1)
			resetErr := make(chan error, 1)
			go func() { resetErr <- s.LUNReset(ctx, 0) }()
			// The target has taken the reset, aborted A, and holds its response.
			waitFor(t, ctx, "the reset at the target", func() bool {
				ft.mu.Lock()
				defer ft.mu.Unlock()
				return len(ft.tmfs) == 1 && len(ft.held) == 0
			})
			errB, resB := send()
			waitHeld(t, ft, 1)
			close(gate)
			if err := <-resetErr; err != nil {
				t.Fatalf("LUNReset: %v", err)
			}
			if err := waitErr(t, errA); !errors.Is(err, ErrAborted) {
				t.Fatalf("command sent before the reset: %v, want ErrAborted", err)
			}
			select {
			case err := <-errB:
				t.Fatalf("command sent after the reset's TMF ended by the reset: %v", err)
			default:
			}
			ft.mu.Lock()
			for tag, rel := range ft.held {
				ft.answer[tag] = true
				delete(ft.held, tag)
				close(rel)
			}
			ft.mu.Unlock()
			if err := waitErr(t, errB); err != nil || resB.Err() != nil {
				t.Fatalf("command sent after the reset: %v / %v, want its GOOD response", err, resB.Err())
			}
		})
	}
}

// closeOrderDevice wraps a device: its connections' Close waits a while
// first, and notes whether a command had already been ended by then.
type closeOrderDevice struct {
	rdma.Device
	ended, early atomic.Bool
}

func (d *closeOrderDevice) Dial(ctx context.Context, addr string, cfg rdma.QPConfig, pd []byte) (rdma.Conn, []byte, error) {
	c, b, err := d.Device.Dial(ctx, addr, cfg, pd)
	if err != nil {
		return nil, b, err
	}
	return &closeOrderConn{Conn: c, d: d}, b, nil
}

type closeOrderConn struct {
	rdma.Conn
	d *closeOrderDevice
}

func (c *closeOrderConn) Close() error {
	time.Sleep(50 * time.Millisecond)
	if c.d.ended.Load() {
		c.d.early.Store(true)
	}
	return c.Conn.Close()
}

// TestChannelClosedBeforeCommandsEnd: when a channel goes down its
// connection is closed before its commands end with ErrChannelDown. A
// caller that has its command back reuses the buffers; the target must no
// longer reach them (RDMA READ of a WRITE's data-out).
func TestChannelClosedBeforeCommandsEnd(t *testing.T) {
	net := loopback.NewNetwork()
	ft := newFakeTarget(t, net)
	dev := &closeOrderDevice{Device: net.NewDevice("initiator")}
	t.Cleanup(func() { dev.Close() })
	s, err := Dial(testCtx(t), dev, Options{Dest: ft.addr(), IDExt: 0x0002c90300a1b2c3, IOCGUID: 0x0002c90300a1b2c3,
		InitiatorExt: 1, InitiatorGUID: 0x1122334455667788, ReconnectDelay: time.Hour})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ft.setHold(true)
	var res Result
	errc := make(chan error, 1)
	if err := s.Submit(&Command{CDB: make([]byte, 6)}, &res, func(err error) {
		dev.ended.Store(true)
		errc <- err
	}); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	waitHeld(t, ft, 1)
	s.Drop(0)
	if err := waitErr(t, errc); !errors.Is(err, ErrChannelDown) {
		t.Fatalf("command on the dropped channel: %v, want ErrChannelDown", err)
	}
	if dev.early.Load() {
		t.Fatal("the command ended before its channel's connection was closed")
	}
}
