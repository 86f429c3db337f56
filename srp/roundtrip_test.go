package srp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func randBytes(r *rand.Rand, n int) []byte {
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randPortID(r *rand.Rand) PortID { return NewPortID(r.Uint64(), r.Uint64()) }

func randDirect(r *rand.Rand) DirectBuf {
	return DirectBuf{VA: r.Uint64(), Key: r.Uint32(), Len: r.Uint32()}
}

func randDataBuf(r *rand.Rand, in bool) DataBuf {
	n := 3
	if !in {
		n = 4
	}
	switch DescFormat(r.IntN(n)) {
	case DescDirect:
		return DataBuf{Format: DescDirect, Count: uint8(r.IntN(2)), Desc: []DirectBuf{randDirect(r)}}
	case DescIndirect:
		k := r.IntN(6)
		d := DataBuf{Format: DescIndirect, Count: uint8(k), Table: randDirect(r)}
		var sum uint32
		for range k {
			x := randDirect(r)
			x.Len >>= 4
			sum += x.Len
			d.Desc = append(d.Desc, x)
		}
		extra := r.IntN(3)
		d.Table.Len = uint32(16 * (k + extra))
		if extra == 0 {
			d.Len = sum
		} else {
			d.Len = sum + r.Uint32()>>8
		}
		return d
	case DescImm:
		return DataBuf{Format: DescImm, Count: uint8(r.IntN(2))}
	}
	return DataBuf{}
}

func randCmd(r *rand.Rand, immOff int) *Cmd {
	c := &Cmd{SolNot: uint8(r.Uint32()), Tag: r.Uint64(), LUN: r.Uint64(), TaskAttr: TaskAttr(r.IntN(8)),
		CDB: randBytes(r, 16+4*r.IntN(64))}
	c.DataOut = randDataBuf(r, false)
	c.DataIn = randDataBuf(r, true)
	if c.DataOut.Format == DescImm {
		c.ImmData = randBytes(r, r.IntN(100))
		c.DataOut.Len = uint32(len(c.ImmData))
		c.ImmDataOffset = max(immOff, c.descEnd())
	}
	return c
}

// randIU returns a random valid IU of type op. Commands with immediate data
// use DefaultImmDataOffset when possible, else a larger offset.
func randIU(r *rand.Rand, op Opcode) IU {
	switch op {
	case OpLoginReq:
		return &LoginRequest{Tag: r.Uint64(), ReqITIULen: r.Uint32(), ReqBufFmt: BufFormats(r.Uint32()),
			ReqFlags: LoginReqFlags(r.Uint32()), ImmDataOffset: uint16(r.Uint32()),
			InitiatorPortID: randPortID(r), TargetPortID: randPortID(r)}
	case OpTskMgmt:
		return &TaskMgmt{SolNot: uint8(r.Uint32()), Tag: r.Uint64(), LUN: r.Uint64(), Func: TMF(r.Uint32()), TaskTag: r.Uint64()}
	case OpCmd:
		return randCmd(r, DefaultImmDataOffset)
	case OpILogout:
		return &ILogout{Tag: r.Uint64()}
	case OpCredRsp:
		return &CredRsp{Tag: r.Uint64()}
	case OpAerRsp:
		return &AerRsp{Tag: r.Uint64()}
	case OpTLogout:
		return &TLogout{SolNot: uint8(r.Uint32()), Reason: TLogoutReason(r.Uint32()), Tag: r.Uint64()}
	case OpCredReq:
		return &CredReq{SolNot: uint8(r.Uint32()), ReqLimDelta: r.Uint32(), Tag: r.Uint64()}
	case OpAerReq:
		return &AerReq{SolNot: uint8(r.Uint32()), ReqLimDelta: r.Uint32(), Tag: r.Uint64(), LUN: r.Uint64(),
			Sense: randBytes(r, r.IntN(100))}
	case OpLoginRsp:
		return &LoginResponse{ReqLimDelta: r.Uint32(), Tag: r.Uint64(), MaxITIULen: r.Uint32(), MaxTIIULen: r.Uint32(),
			BufFmt: BufFormats(r.Uint32()), RspFlags: LoginRspFlags(r.Uint32())}
	case OpRsp:
		return &Rsp{SolNot: uint8(r.Uint32()), ReqLimDelta: r.Uint32(), Tag: r.Uint64(), Flags: RspFlags(r.Uint32()),
			Status: uint8(r.Uint32()), DataOutResCnt: r.Uint32(), DataInResCnt: r.Uint32(),
			RespData: randBytes(r, r.IntN(3)*4), Sense: randBytes(r, r.IntN(97))}
	case OpLoginRej:
		return &LoginReject{Reason: RejectReason(r.Uint32()), Tag: r.Uint64(), BufFmt: BufFormats(r.Uint32())}
	}
	panic("unknown opcode")
}

var allOpcodes = []Opcode{OpLoginReq, OpTskMgmt, OpCmd, OpILogout, OpCredRsp, OpAerRsp,
	OpTLogout, OpCredReq, OpAerReq, OpLoginRsp, OpRsp, OpLoginRej}

// decodeAs decodes b as iu's type, with iu's immediate-data offset.
func decodeAs(iu IU, b []byte) (IU, error) {
	if c, ok := iu.(*Cmd); ok {
		d := new(Cmd)
		off := DefaultImmDataOffset
		if c.DataOut.Format == DescImm {
			off = c.immOff()
		}
		return d, d.UnmarshalImm(b, off)
	}
	return Decode(b)
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, op := range allOpcodes {
		for i := range 300 {
			iu := randIU(r, op)
			b, err := iu.Marshal()
			if err != nil {
				t.Fatalf("%v #%d: Marshal: %v (%+v)", op, i, err, iu)
			}
			if len(b) != iu.Size() || Opcode(b[0]) != op {
				t.Fatalf("%v #%d: %d bytes, Size %d, opcode %#x", op, i, len(b), iu.Size(), b[0])
			}
			got, err := decodeAs(iu, b)
			if err != nil {
				t.Fatalf("%v #%d: decode: %v\n%x", op, i, err, b)
			}
			if !reflect.DeepEqual(got, iu) {
				t.Fatalf("%v #%d: round trip:\n got %+v\nwant %+v", op, i, got, iu)
			}
			b2, _ := got.Marshal()
			if !bytes.Equal(b, b2) {
				t.Fatalf("%v #%d: re-encode differs", op, i)
			}
			// Every strict prefix fails, as truncation.
			for n := range len(b) {
				_, err := decodeAs(iu, b[:n])
				if err == nil {
					t.Fatalf("%v #%d: prefix %d of %d decoded", op, i, n, len(b))
				}
				var de *DecodeError
				if !errors.As(err, &de) || !errors.Is(err, ErrTruncated) {
					t.Fatalf("%v #%d: prefix %d: %v is not a truncation DecodeError", op, i, n, err)
				}
			}
		}
	}
}

func TestRoundTripLoginRDMA(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		lr := randIU(r, OpLoginReq).(*LoginRequest)
		rd := LoginRequestRDMA(*lr)
		b, _ := rd.Marshal()
		if len(b) != LoginReqRDMASize || b[11] != 0 {
			t.Fatalf("bad rdma form %x", b)
		}
		got, err := UnmarshalLoginRequestRDMA(b)
		if err != nil || *got != *lr {
			t.Fatalf("rdma round trip: %v %+v %+v", err, got, lr)
		}
		for n := range len(b) {
			if _, err := UnmarshalLoginRequestRDMA(b[:n]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("prefix %d: %v", n, err)
			}
		}
	}
}

// TestCmdDecodeReuse checks that decoding into a reused Cmd does not
// allocate once its descriptor slices have grown.
func TestCmdDecodeReuse(t *testing.T) {
	var bufs [][]byte
	for _, g := range goldens {
		if g.iu.Opcode() == OpCmd {
			bufs = append(bufs, hx(t, g.hex))
		}
	}
	var c Cmd
	for _, b := range bufs {
		if err := c.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, b := range bufs {
			if err := c.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decode round", allocs)
	}
	rsp := &Rsp{Tag: 1, Flags: SnsValid, Status: 2, Sense: make([]byte, 18)}
	buf := make([]byte, 0, 256)
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := rsp.AppendTo(buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Rsp.AppendTo: %v allocations", allocs)
	}
}

func BenchmarkCmdUnmarshal(b *testing.B) {
	buf := goldenBytes(b, "cmd_indirect_out")
	var c Cmd
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Unmarshal(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRspAppend(b *testing.B) {
	rsp := &Rsp{Tag: 1, ReqLimDelta: 1, Flags: SnsValid, Status: 2, Sense: make([]byte, 18)}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rsp.AppendTo(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCmdAppendImm4K encodes a 4 KiB WRITE with immediate data, the
// initiator's IU for small writes (ib_srp's SRP_DATA_DESC_IMM).
func BenchmarkCmdAppendImm4K(b *testing.B) {
	c := &Cmd{Tag: 1, CDB: []byte{0x2a, 0, 0, 0, 0, 8, 0, 0, 8, 0},
		DataOut: DataBuf{Format: DescImm}, ImmDataOffset: 68, ImmData: make([]byte, 4096)}
	buf := make([]byte, 0, 8260)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.AppendTo(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
