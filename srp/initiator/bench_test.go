package initiator

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/srp"
)

// echoConn answers every SRP_CMD posted to it at once with a GOOD SRP_RSP
// (one credit back) and completes the SEND: the initiator's command path
// with nothing else around it (no target, no provider data movement).
type echoConn struct {
	rdma.Conn
	ch   *channel
	rsp  srp.Rsp
	buf  []byte
	comp rdma.Completion
}

func (c *echoConn) PostSend(wrs ...rdma.SendWR) error {
	for i := range wrs {
		iu := wrs[i].Local[0].Bytes()
		if srp.Opcode(iu[0]) == srp.OpCmd {
			c.rsp = srp.Rsp{ReqLimDelta: 1, Tag: binary.BigEndian.Uint64(iu[8:])}
			c.buf, _ = c.rsp.AppendTo(c.buf[:0])
			c.ch.receive(c.buf)
		}
		c.comp = rdma.Completion{ID: wrs[i].ID, Status: rdma.StatusSuccess}
		c.ch.complete(&c.comp)
	}
	return nil
}

// BenchmarkCommandPath measures one command through the initiator: encode
// the SRP_CMD into its IU slot, post it, decode the SRP_RSP, fill the
// Result. Commands use a registered Buffer (nothing registered per
// command), 4 KiB data-in, data-out as immediate data, and data-out by
// direct descriptor. The path allocates nothing per command.
func BenchmarkCommandPath(b *testing.B) {
	for _, tc := range []struct {
		name   string
		dataIn bool
		noImm  bool
		cdb    []byte
	}{
		{"read", true, false, rw16(opRead16, 0, 8, false)},
		{"write-imm", false, false, rw16(opWrite16, 0, 8, true)},
		{"write-direct", false, true, rw16(opWrite16, 0, 8, true)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ch, _ := newStubChannel(b)
			ec := &echoConn{ch: ch}
			ch.conn = ec
			ch.useImm = !tc.noImm
			buf, err := ch.s.NewBuffer(4096, tc.dataIn)
			if err != nil {
				b.Fatal(err)
			}
			cmd := Command{CDB: tc.cdb, Buffer: buf, Length: 4096}
			var res Result
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(4096)
			for b.Loop() {
				if err := ch.execute(ctx, &cmd, &res); err != nil || res.Status != 0 {
					b.Fatalf("execute: %v, status %#x", err, res.Status)
				}
			}
		})
	}
}

// TestCommandPathAllocs holds the command path to no allocation per
// command (see BenchmarkCommandPath).
func TestCommandPathAllocs(t *testing.T) {
	for _, dataIn := range []bool{true, false} {
		ch, _ := newStubChannel(t)
		ch.conn = &echoConn{ch: ch}
		ch.useImm = true
		buf, err := ch.s.NewBuffer(4096, dataIn)
		if err != nil {
			t.Fatal(err)
		}
		op := map[bool]byte{true: opRead16, false: opWrite16}[dataIn]
		cmd := Command{CDB: rw16(op, 0, 8, !dataIn), Buffer: buf, Length: 4096}
		var res Result
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() {
			if err := ch.execute(ctx, &cmd, &res); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("data-in %v: %v allocations per command, want 0", dataIn, n)
		}
	}
}
