package hostile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

// TestChaos runs hostile peers in parallel (protocol violations, malformed
// IUs, resets, garbage, IU-form logins) against one target while a
// well-behaved initiator writes and verifies data; afterwards the target
// holds no channel and no goroutine is left.
func TestChaos(t *testing.T) {
	t.Run("rings", func(t *testing.T) { chaos(t, targetCfgSmall(64)) })
	t.Run("srq", func(t *testing.T) {
		cfg := targetCfgSmall(64)
		cfg.UseSRQ, cfg.SRQSize = true, 1024
		chaos(t, cfg)
	})
}

func chaos(t *testing.T, cfg target.Config) {
	tg := startTarget(t, tgtOpts{port: cfg})
	workers, rounds := 6, 12
	if testing.Short() {
		workers, rounds = 3, 4
	}
	attacks := []struct {
		name string
		run  func(t *testing.T, r *rand.Rand)
	}{
		{"fpdu-violation", func(t *testing.T, r *rand.Rand) {
			p := dialRaw(t, tg.addr)
			p.mustLogin(r.IntN(2) == 0)
			bad := [][]byte{
				append(untagged(true, 3, 0, 9, 1, 0), tur(1)...),
				append(untagged(true, 3, 0, 0, 3, 0), tur(1)...),
				append(tagged(true, 0, r.Uint32(), r.Uint64()), make([]byte, r.IntN(300))...),
				readReq(1, 1, 0, r.Uint32(), r.Uint32(), r.Uint64()),
				append(untagged(true, byte(8+r.IntN(7)), 0, 0, 1, 0), tur(1)...),
			}
			p.write(p.fpdu(bad[r.IntN(len(bad))]))
			for {
				f, err := p.readFPDU()
				if err != nil {
					t.Fatalf("no Terminate: %v", err)
				}
				if !f.tagged && f.opcode == 7 {
					break
				}
			}
			p.expectEOF()
		}},
		{"malformed-cmd", func(t *testing.T, r *rand.Rand) {
			p, _ := loggedIn(t, tg.addr)
			iu := cmdIU(7, lun0, read10(0, 1), fmtNone, byte(r.IntN(16)), 0, byte(r.IntN(4)), byte(r.IntN(64))&^3, randBytes(r, r.IntN(80)))
			p.send(iu)
			if _, err := p.recvIU(); err != nil {
				t.Fatalf("no answer to a malformed SRP_CMD: %v", err)
			}
			rst(p)
		}},
		{"random-iu", func(t *testing.T, r *rand.Rand) {
			p, _ := loggedIn(t, tg.addr)
			for i := 0; i < 3; i++ {
				if p.send(randBytes(r, r.IntN(200))) != nil {
					break
				}
			}
			if r.IntN(2) == 0 {
				rst(p)
			} else {
				p.nc.Close()
			}
		}},
		{"mpa-garbage", func(t *testing.T, r *rand.Rand) {
			p := dialRaw(t, tg.addr)
			p.write(randBytes(r, r.IntN(600)))
			if r.IntN(2) == 0 {
				rst(p)
				return
			}
			p.nc.Close()
		}},
		{"iu-form-login", func(t *testing.T, r *rand.Rand) {
			p := iuFormIdle(t, tg.addr)
			if p == nil {
				return // refused: the port is full
			}
			lr := srp.LoginRequest{Tag: 9, ReqITIULen: 8260, ReqBufFmt: srp.BufFmtDirect | srp.BufFmtIndirect,
				InitiatorPortID: srp.NewPortID(r.Uint64(), r.Uint64()), TargetPortID: srp.NewPortID(guid, guid)}
			b, _ := lr.Marshal()
			p.send(b)
			iu, err := p.recvIU()
			if err != nil {
				t.Fatalf("IU-form login: %v", err)
			}
			if srp.Opcode(iu[0]) != srp.OpLoginRsp {
				t.Fatalf("IU-form login answered with % x", iu)
			}
			p.send(tur(1))
			p.expectRsp(t, 1)
			p.nc.Close()
		}},
		{"stall-then-reset", func(t *testing.T, r *rand.Rand) {
			p, _ := loggedIn(t, tg.addr)
			for i := 0; i < 4; i++ {
				p.send(cmdIU(uint64(10+i), lun0, read10(0, 1024), fmtNone, fmtDirect, 0, 1, 0, direct(peerVA, peerSTag, 512*1024)))
			}
			rst(p)
		}},
	}
	t.Run("group", func(t *testing.T) {
		for w := 0; w < workers; w++ {
			t.Run(fmt.Sprintf("attacker-%d", w), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(uint64(w), 0x5eed))
				for i := 0; i < rounds; i++ {
					a := attacks[r.IntN(len(attacks))]
					t.Run(a.name, func(t *testing.T) { a.run(t, r) })
				}
			})
		}
		t.Run("good", func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, 60*time.Second)
			dev := iwarp.NewDevice(iwarp.Config{Logger: testLogger(t)})
			defer dev.Close()
			s, err := initiator.Dial(ctx, dev, initiator.Options{
				IDExt: guid, IOCGUID: guid, Dest: tg.addr, InitiatorExt: 0x600d, InitiatorGUID: 0x600d,
				ChCount: 1, ReconnectDelay: -1, CommandTimeout: 30 * time.Second, Logger: testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_ = s.TestUnitReady(ctx, initiator.LUN(0)) // power-on UNIT ATTENTION
			for i := 0; i < 3*rounds; i++ {
				w := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xc0, 0xde}, 8192/4)
				lba := uint64(1024 + (i%8)*16)
				if err := s.Write16(ctx, initiator.LUN(0), lba, w, blockSize, false); err != nil {
					t.Fatalf("WRITE(16) %d: %v", i, err)
				}
				got := make([]byte, len(w))
				if err := s.Read16(ctx, initiator.LUN(0), lba, got, blockSize, false); err != nil {
					t.Fatalf("READ(16) %d: %v", i, err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("round %d: read back differs", i)
				}
			}
		})
	})
	tg.waitSessions(t, 0)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
