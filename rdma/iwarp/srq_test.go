package iwarp

import (
	"context"
	"errors"
	"testing"

	"github.com/gosrp/gosrp/rdma"
)

// srqPair is a listening device with an SRQ and n connections from another
// device whose acceptor ends take their receives from the SRQ.
func srqPair(t *testing.T, depth, n int) (s rdma.SRQ, ds, as []rdma.Conn, adev, ddev *Device, ctx context.Context) {
	t.Helper()
	ctx = testCtx(t)
	adev, ddev = NewDevice(Config{}), NewDevice(Config{})
	t.Cleanup(func() { ddev.Close(); adev.Close() })
	s, err := adev.CreateSRQ(depth)
	if err != nil {
		t.Fatal(err)
	}
	l, err := adev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for range n {
		ch := make(chan rdma.Conn, 1)
		go func() {
			r, err := l.Accept(ctx)
			if err != nil {
				t.Error(err)
				ch <- nil
				return
			}
			c, err := r.Accept(ctx, rdma.QPConfig{SRQ: s}, nil)
			if err != nil {
				t.Error(err)
			}
			ch <- c
		}()
		d, _, err := ddev.Dial(ctx, l.Addr().String(), rdma.QPConfig{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a := <-ch
		if a == nil {
			t.FailNow()
		}
		ds, as = append(ds, d), append(as, a)
	}
	return s, ds, as, adev, ddev, ctx
}

func poll1(t *testing.T, ctx context.Context, c rdma.Conn) rdma.Completion {
	t.Helper()
	var out [1]rdma.Completion
	if _, err := c.Poll(ctx, out[:]); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestSRQEmptyTerminates: a Send finding the SRQ empty is answered with the
// Terminate for an empty receive queue (RFC 5041 §7.2: DDP layer 1,
// untagged buffer error 2, code 0x02), the SRQ's other connection stays up,
// and a buffer posted after the failure stays in the SRQ for the next Send
// (posting order), whichever connection it arrives on.
func TestSRQEmptyTerminates(t *testing.T) {
	s, ds, as, adev, ddev, ctx := srqPair(t, 4, 2)
	sb := mustReg(t, nil, ddev, []byte("0123456789abcdef"), 0)
	if err := ds[0].PostSend(rdma.SendWR{ID: 1, Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: sb, Length: 16}}}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []rdma.Conn{as[0], ds[0]} {
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("connection not torn down by a Send to an empty SRQ")
		}
		var te *rdma.TerminateError
		if !errors.As(c.Err(), &te) || te.Layer != 1 || te.Type != 2 || te.Code != 0x02 || te.Local != (i == 0) {
			t.Fatalf("conn %d Err = %v, want a Terminate DDP 1/2/0x02 (local %v)", i, c.Err(), i == 0)
		}
	}
	rb := mustReg(t, nil, adev, make([]byte, 32), rdma.AccessLocalWrite)
	if err := s.PostRecv(rdma.RecvWR{ID: 77, Local: rdma.SGE{MR: rb, Length: 16}}, rdma.RecvWR{ID: 88, Local: rdma.SGE{MR: rb, Offset: 16, Length: 16}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Posted(); got != 2 {
		t.Fatalf("Posted = %d, want 2", got)
	}
	for _, id := range []uint64{77, 88} {
		if err := ds[1].PostSend(rdma.SendWR{ID: id, Op: rdma.OpSend, Signaled: true, Local: []rdma.SGE{{MR: sb, Length: 16}}}); err != nil {
			t.Fatal(err)
		}
		if c := poll1(t, ctx, as[1]); c.ID != id || c.Op != rdma.OpRecv || c.Status != rdma.StatusSuccess || c.ByteLen != 16 {
			t.Fatalf("receive %+v, want ID %d (posting order), 16 bytes", c, id)
		}
		if c := poll1(t, ctx, ds[1]); c.ID != id || c.Status != rdma.StatusSuccess {
			t.Fatalf("send completion %+v", c)
		}
	}
	if string(rb.Bytes()) != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("received %q", rb.Bytes())
	}
}

// TestSRQMisuse: the errors of CreateSRQ, QPConfig.SRQ and SRQ.Close.
func TestSRQMisuse(t *testing.T) {
	s, ds, as, adev, ddev, ctx := srqPair(t, 2, 1)
	if _, err := adev.CreateSRQ(0); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("CreateSRQ(0): %v, want ErrInvalidWR", err)
	}
	// An SRQ of another device.
	if _, _, err := ddev.Dial(ctx, as[0].LocalAddr().String(), rdma.QPConfig{SRQ: s}, nil); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Errorf("Dial with another device's SRQ: %v, want ErrInvalidWR", err)
	}
	if err := s.Close(); !errors.Is(err, ErrSRQInUse) {
		t.Errorf("Close with a connection on it: %v, want ErrSRQInUse", err)
	}
	as[0].Close()
	ds[0].Close()
	if err := s.Close(); err != nil {
		t.Errorf("Close after the connection closed: %v", err)
	}
	if _, err := adev.CreateSRQ(1); err != nil {
		t.Fatal(err)
	}
	adev.Close()
	if _, err := adev.CreateSRQ(1); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("CreateSRQ on a closed device: %v, want ErrClosed", err)
	}
}

// TestSRQDialer: the dialing side may use an SRQ too.
func TestSRQDialer(t *testing.T) {
	ctx := testCtx(t)
	a, b := NewDevice(Config{}), NewDevice(Config{})
	defer a.Close()
	defer b.Close()
	s, err := b.CreateSRQ(2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan rdma.Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			ch <- nil
			return
		}
		c, _ := r.Accept(ctx, rdma.QPConfig{}, nil)
		ch <- c
	}()
	d, _, err := b.Dial(ctx, l.Addr().String(), rdma.QPConfig{SRQ: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc == nil {
		t.Fatal("accept failed")
	}
	defer acc.Close()
	rb := mustReg(t, nil, b, make([]byte, 8), rdma.AccessLocalWrite)
	if err := d.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rb, Length: 8}}); !errors.Is(err, rdma.ErrInvalidWR) {
		t.Fatalf("Conn.PostRecv on an SRQ queue pair: %v", err)
	}
	if err := s.PostRecv(rdma.RecvWR{ID: 5, Local: rdma.SGE{MR: rb, Length: 8}}); err != nil {
		t.Fatal(err)
	}
	sb := mustReg(t, nil, a, []byte("abcdefgh"), 0)
	if err := acc.PostSend(rdma.SendWR{ID: 9, Op: rdma.OpSend, Local: []rdma.SGE{{MR: sb, Length: 8}}}); err != nil {
		t.Fatal(err)
	}
	if c := poll1(t, ctx, d); c.ID != 5 || c.ByteLen != 8 || string(rb.Bytes()) != "abcdefgh" {
		t.Fatalf("receive %+v %q", c, rb.Bytes())
	}
	d.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the dialer closed: %v", err)
	}
}
