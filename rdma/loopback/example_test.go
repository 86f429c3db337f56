package loopback_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/loopback"
)

// A target listens, an initiator dials with a login in the private data and
// sends one message after the target posted a receive buffer.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	net := loopback.NewNetwork()
	tgt, ini := net.NewDevice("target"), net.NewDevice("initiator")
	defer tgt.Close()
	defer ini.Close()

	l, err := tgt.Listen(ctx, "target:5555")
	if err != nil {
		panic(err)
	}
	accepted := make(chan rdma.Conn)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request private data %q\n", req.PrivateData())
		c, err := req.Accept(ctx, rdma.QPConfig{}, []byte("welcome"))
		if err != nil {
			panic(err)
		}
		accepted <- c
	}()
	ic, reply, err := ini.Dial(ctx, "target:5555", rdma.QPConfig{}, []byte("login"))
	if err != nil {
		panic(err)
	}
	defer ic.Close()
	fmt.Printf("reply private data %q\n", reply)
	tc := <-accepted

	rbuf, _ := tgt.Register(make([]byte, 64), rdma.AccessLocalWrite)
	if err := tc.PostRecv(rdma.RecvWR{ID: 1, Local: rdma.SGE{MR: rbuf, Length: 64}}); err != nil {
		panic(err)
	}
	sbuf, _ := ini.Register([]byte("SRP_CMD"), 0)
	if err := ic.PostSend(rdma.SendWR{ID: 2, Op: rdma.OpSend, Signaled: true,
		Local: []rdma.SGE{{MR: sbuf, Length: len(sbuf.Bytes())}}}); err != nil {
		panic(err)
	}
	var wc [1]rdma.Completion
	if _, err := tc.Poll(ctx, wc[:]); err != nil {
		panic(err)
	}
	fmt.Printf("%v %v: %q\n", wc[0].Op, wc[0].Status, rbuf.Bytes()[:wc[0].ByteLen])
	// Output:
	// request private data "login"
	// reply private data "welcome"
	// RECV success: "SRP_CMD"
}
