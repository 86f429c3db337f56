package target

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gosrp/gosrp/srp"
)

// FuzzIU sends one arbitrary IU on a live channel, then a TEST UNIT READY.
// The target must not panic or hang: it answers, or logs the channel out,
// and the port cleans up (the env checks for leaked regions).
func FuzzIU(f *testing.F) {
	_, d := (&ini{}).fakeBuf()
	seeds := []srp.IU{
		&srp.Cmd{Tag: 1, CDB: cdb10(0x28, 0, 8), DataIn: direct(d)},
		&srp.Cmd{Tag: 1, CDB: cdb10(0x2a, 0, 8), DataOut: srp.DataBuf{Format: srp.DescImm}, ImmData: make([]byte, 4096)},
		&srp.Cmd{Tag: 1, CDB: cdb10(0x2a, 0, 8), DataOut: srp.DataBuf{Format: srp.DescIndirect, Desc: []srp.DirectBuf{d}, Table: srp.DirectBuf{VA: d.VA, Key: d.Key, Len: 32}, Len: 8192}},
		&srp.TaskMgmt{Tag: 1, Func: srp.TMFAbortTask, TaskTag: 9},
		&srp.ILogout{Tag: 1},
		&srp.CredRsp{Tag: 1},
	}
	for _, s := range seeds {
		b, err := s.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x77})
	f.Fuzz(fuzzOne)
}

func fuzzOne(t *testing.T, iu []byte) {
	{
		if len(iu) > 8260 {
			iu = iu[:8260]
		}
		e := newEnv(t, nil)
		i := e.login(defaultLogin())
		// Point descriptors at real initiator memory half of the time.
		if len(iu) >= 64 && iu[0] == 0x02 && iu[1]&1 == 0 {
			_, d := i.buf(0, 1<<20)
			binary.BigEndian.PutUint64(iu[48:], d.VA)
			binary.BigEndian.PutUint32(iu[56:], d.Key)
		}
		i.send(iu)
		tur, _ := (&srp.Cmd{Tag: 0xfeed, CDB: make([]byte, 16)}).Marshal()
		if err := i.trySend(tur); err != nil {
			return // the IU closed the channel
		}
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		for {
			b, err := i.tryNext(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("no answer and no close for % x", iu)
				}
				return // channel closed
			}
			if len(b) >= 16 && b[0] == 0xc1 && binary.BigEndian.Uint64(b[8:]) == 0xfeed {
				return
			}
			if b[0] == 0x81 {
				r, _ := (&srp.CredRsp{Tag: binary.BigEndian.Uint64(b[8:])}).Marshal()
				_ = i.trySend(r)
			}
		}
	}
}

// fakeBuf is a descriptor for seeds (not a real region).
func (*ini) fakeBuf() ([]byte, srp.DirectBuf) {
	return nil, srp.DirectBuf{VA: 0x10000000, Key: 0x152, Len: 4096}
}
