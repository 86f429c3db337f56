package rdmatest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// Remote access errors: bad R_Key, out of bounds, missing rights,
// deregistered regions, seen from either side.

// remoteCase makes a bad RDMA work request against a region of dev.
type remoteCase func(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR

func badRKey(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
	wr.Remote.RKey ^= 0x00ffff00 // some other key, most likely unknown
	for _, k := range []uint32{m.RKey(), m.LKey()} {
		if wr.Remote.RKey == k {
			wr.Remote.RKey ^= 0x80000000
		}
	}
	return wr
}

func pastEnd(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 57) // last byte at 64
}

func beforeStart(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMARead, sge(local, 0, 8), m, 0)
	wr.Remote.Addr--
	return wr
}

func addrWrap(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	wr := rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
	wr.Remote.Addr = ^uint64(0) - 3 // the range wraps past 2^64
	return wr
}

func writeNoRight(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, lw|rdma.AccessRemoteRead, 0)
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
}

func readNoRight(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, lw|rdma.AccessRemoteWrite, 0)
	return rdmaWR(7, rdma.OpRDMARead, sge(local, 0, 8), m, 0)
}

func deregWrite(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	m := e.reg(dev, 64, all, 0)
	if err := m.Deregister(); err != nil {
		e.t.Fatal(err)
	}
	return rdmaWR(7, rdma.OpRDMAWrite, sge(local, 0, 8), m, 0)
}

func deregRead(e *env, dev rdma.Device, local rdma.MemoryRegion) rdma.SendWR {
	wr := deregWrite(e, dev, local)
	wr.Op = rdma.OpRDMARead
	return wr
}

// testRemoteError posts a bad RDMA request from the dialer, followed by a
// SEND, with receives posted on both sides, and checks the error completion,
// the flushes and the teardown on both sides.
// remoteError: with fromAcceptor the acceptor is the requester (as an SRP
// target reading or writing initiator memory), else the dialer.
func remoteError(mk remoteCase, fromAcceptor bool, opts Options) func(*testing.T, Factory) {
	return func(t *testing.T, f Factory) {
		e := newEnv(t, f)
		// d is the requester, a the responder.
		d, a := e.connect(rdma.QPConfig{}, rdma.QPConfig{})
		reqDev, respDev := e.b, e.a
		if fromAcceptor {
			d, a = a, d
			reqDev, respDev = e.a, e.b
		}
		local := e.reg(reqDev, 64, lw, 0)
		rbA, rbD := e.reg(respDev, 64, lw, 0), e.reg(reqDev, 64, lw, 0)
		if err := a.PostRecv(recv(21, rbA, 0, 32), recv(22, rbA, 32, 32)); err != nil {
			t.Fatal(err)
		}
		if err := d.PostRecv(recv(31, rbD, 0, 32)); err != nil {
			t.Fatal(err)
		}
		bad := mk(e, respDev, local)
		err := d.PostSend(bad, send(8, local, 0, 8))
		if err != nil && !errors.Is(err, rdma.ErrClosed) {
			t.Fatalf("PostSend: %v", err)
		}
		// The first completion must be the error (a success means the
		// access was wrongly allowed; fail at once rather than at the
		// deadline), unless WRITEs complete on transmit.
		first := e.pollN(d, 1)[0]
		onTransmit := opts.CompletesOnTransmit && bad.Op == rdma.OpRDMAWrite && first.Status == rdma.StatusSuccess
		if first.ID != 7 || first.Op != bad.Op || (!opts.remoteAccessOK(first.Status) && !onTransmit) {
			t.Fatalf("completion {ID %d, %v, %v (err %v)}, want {ID 7, %v, remote access error}", first.ID, first.Op, first.Status, first.Err, bad.Op)
		}
		sends := []rdma.Completion{first}
		var recvs []rdma.Completion
		for _, c := range e.drain(d) {
			if c.Op == rdma.OpRecv {
				recvs = append(recvs, c)
			} else {
				sends = append(sends, c)
			}
		}
		switch {
		case len(sends) == 2 && opts.CompletesOnTransmit:
			// The SEND may have gone out before the error came back.
			if sends[1].ID != 8 || sends[1].Op != rdma.OpSend {
				t.Fatalf("requester send completions %v, want the WRITE then SEND 8", sends)
			}
		case len(sends) == 2:
			want(t, sends[1], 8, rdma.OpSend, rdma.StatusFlushed)
		case len(sends) == 1 && err != nil:
			// The SEND was refused with ErrClosed.
		default:
			t.Fatalf("requester send completions %v, want the error then SEND 8 flushed (or refused)", sends)
		}
		if len(recvs) != 1 {
			t.Fatalf("requester receive completions %v, want receive 31 flushed", recvs)
		}
		want(t, recvs[0], 31, rdma.OpRecv, rdma.StatusFlushed)
		ac := e.drain(a)
		if len(ac) != 2 {
			t.Fatalf("responder completions %v, want receives 21, 22 flushed", ac)
		}
		want(t, ac[0], 21, rdma.OpRecv, rdma.StatusFlushed)
		want(t, ac[1], 22, rdma.OpRecv, rdma.StatusFlushed)
		e.waitDone(d, "requester")
		e.waitDone(a, "responder")
		if bad.Op == rdma.OpRDMARead && !bytes.Equal(local.Bytes()[:8], pattern(64, 0)[:8]) {
			t.Error("refused RDMA READ placed data in the sink")
		}
		if err := d.PostSend(send(9, local, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("PostSend on a down connection: %v, want rdma.ErrClosed", err)
		}
		if err := a.PostRecv(recv(23, rbA, 0, 1)); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("PostRecv on a down connection: %v, want rdma.ErrClosed", err)
		}
	}
}

// ---- queue limits ----

const maxQueueTest = 4096
