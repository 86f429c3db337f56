// Package reliability holds fault campaigns that run the whole stack in one
// process: srp/initiator and srp/target over pure-Go iWARP on 127.0.0.1,
// the SCSI core, and fault-injecting backstores (backstore.Fault) and
// connections (internal/faultproxy). Short runs are part of the test suite;
// scripts/campaign/*.sh run the documented long ones (docs/RELIABILITY.md).
package reliability

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/gosrp/gosrp/srp/target"
)

const (
	guid      = 0x0002c90300ae1001
	blockSize = 512
)

func testLogger() *slog.Logger {
	if os.Getenv("RELIABILITY_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// envInt returns the positive integer environment variable name, or def:
// the short runs in the test suite use def, scripts/campaign/*.sh the long
// ones.
func envInt(t *testing.T, name string, def int) int { return envValue(t, name, def, strconv.Atoi) }

// envDuration is envInt for a duration ("30s", "5m").
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	return envValue(t, name, def, time.ParseDuration)
}

func envValue[T int | time.Duration](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := parse(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: not a positive value", name, v)
	}
	return n
}

type coreOf struct{ t *scsi.Target }

func (c coreOf) OpenSession(n scsi.Nexus, v scsi.View) (scsi.Session, error) {
	return c.t.OpenSession(n, v), nil
}

// tgt is one in-process target: an iWARP port on 127.0.0.1:0 serving the
// given backstores as LUN 0, 1, ...
type tgt struct {
	addr string
	port *target.Port
}

func startTarget(t *testing.T, luns ...backstore.Backstore) *tgt {
	t.Helper()
	return startTargetCfg(t, nil, luns...)
}

// startTargetCfg is startTarget with the port configuration changed by mod.
func startTargetCfg(t *testing.T, mod func(*target.Config), luns ...backstore.Backstore) *tgt {
	t.Helper()
	log := testLogger()
	dev := iwarp.NewDevice(iwarp.Config{HandshakeTimeout: 2 * time.Second, CompleteOnTransmit: true, Logger: log})
	st := scsi.NewTarget(scsi.TargetConfig{Logger: log})
	for i, b := range luns {
		lu, err := scsi.NewLogicalUnit(scsi.LUConfig{Backstore: b, BlockSize: blockSize, Serial: "rel" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.AddLUN(uint64(i), lu); err != nil {
			t.Fatal(err)
		}
	}
	cfg := target.Config{ServiceGUID: guid, DemoMode: true, LogoutTimeout: 500 * time.Millisecond, Logger: log}
	if mod != nil {
		mod(&cfg)
	}
	p, err := target.NewPort(cfg, dev, coreOf{st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := dev.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = p.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-served
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		if err := p.Close(cctx); err != nil {
			t.Errorf("port Close: %v (channels did not drain)", err)
		}
		l.Close()
		dev.Close()
	})
	return &tgt{addr: l.Addr().String(), port: p}
}

// dial logs an initiator in to addr with o's timeouts (the address and
// identities are filled in).
func dial(t *testing.T, ctx context.Context, addr string, o initiator.Options) *initiator.Session {
	t.Helper()
	dev := iwarp.NewDevice(iwarp.Config{Logger: testLogger()})
	t.Cleanup(func() { dev.Close() })
	o.IDExt, o.IOCGUID, o.Dest = guid, guid, addr
	if o.InitiatorGUID == 0 {
		o.InitiatorGUID = 0x0002c903000e1001
	}
	if o.ChCount == 0 {
		o.ChCount = 1
	}
	o.Logger = testLogger()
	s, err := initiator.Dial(ctx, dev, o)
	if err != nil {
		t.Fatalf("login to %s: %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitIdle waits until the port has no command in progress and at most
// chans channels, failing the test after 20 s.
func (tg *tgt) waitIdle(t *testing.T, chans int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ss := tg.port.Sessions()
		busy := 0
		for _, s := range ss {
			busy += s.Outstanding
		}
		if busy == 0 && len(ss) <= chans {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("target not idle: %d channels, %d commands in progress", len(ss), busy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
