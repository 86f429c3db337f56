package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/spf13/cobra"
)

// TestOneShotKeepsLongSession: one-shot commands (luns, inquiry, readcap,
// login) join the I_T nexus of a long-running session of the same
// initiator port, as attach holds it, instead of logging its channels out
// (SRP_LOGIN_REQ MULTI-CHANNEL ACTION MULTI, answered "existing channels
// maintained"); with --single they log it out, as a Linux ib_srp login
// does.
func TestOneShotKeepsLongSession(t *testing.T) {
	ctx := adminTestCtx(t)
	info, _ := startSrptd(t, ctx)

	// The long session logs in as attach does: SINGLE, and here without
	// reconnecting, so that a logout shows as a lost session.
	opts, err := initiator.ParseTarget(info[0])
	if err != nil {
		t.Fatal(err)
	}
	opts.ReconnectDelay = -1
	opts.ChCount = 2
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	long, err := initiator.Dial(ctx, dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()

	run := func(c *cobra.Command, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(append([]string{info[0]}, args...))
		if err := c.ExecuteContext(ctx); err != nil {
			t.Fatalf("%s %v: %v\n%s", c.Name(), args, err, out.String())
		}
		return out.String()
	}
	run(newLUNsCmd())
	run(newInquiryCmd())
	run(newReadcapCmd())
	if out := run(newLoginCmd()); !strings.Contains(out, "existing channels maintained") {
		t.Errorf("login beside a running session:\n%s\nwant rsp_flags \"existing channels maintained\"", out)
	}
	if err := long.TestUnitReady(ctx, initiator.LUN(0)); err != nil {
		t.Fatalf("long session after one-shot commands: %v", err)
	}
	if st := long.State(); st != initiator.StateRunning {
		t.Fatalf("long session state %v after one-shot commands", st)
	}

	// --single takes the I_T nexus over, as ib_srp's login does.
	if out := run(newLoginCmd(), "--single"); !strings.Contains(out, "existing channels terminated") {
		t.Errorf("login --single:\n%s\nwant rsp_flags \"existing channels terminated\"", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for long.State() == initiator.StateRunning {
		if time.Now().After(deadline) {
			t.Fatal("long session still running after a SINGLE login of its initiator port")
		}
		time.Sleep(20 * time.Millisecond)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := long.TestUnitReady(tctx, initiator.LUN(0)); err == nil {
		t.Fatal("long session still serves commands after a SINGLE login of its initiator port")
	}
}

// TestTwoSingleLoginsSettle: two sessions of one initiator port that both
// log in with SINGLE, as two srpctl attach do, do not log each other out
// forever: the first, logged out by the second's login (SRP_T_LOGOUT
// multi-channel action), reconnects with MULTI and joins the nexus, and
// then the target's channel list stays the same.
func TestTwoSingleLoginsSettle(t *testing.T) {
	ctx := adminTestCtx(t)
	info, data := startSrptd(t, ctx)
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	var sessions []*initiator.Session
	for range 2 {
		opts, err := initiator.ParseTarget(info[0])
		if err != nil {
			t.Fatal(err)
		}
		opts.ChCount, opts.ReconnectDelay = 2, 100*time.Millisecond
		s, err := initiator.Dial(ctx, dev, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions = append(sessions, s)
	}
	channels := func() string {
		out, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "sessions")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, l := range strings.Split(out, "\n")[1:] {
			if f := strings.Fields(l); len(f) > 1 {
				ids = append(ids, f[1])
			}
		}
		return strings.Join(ids, " ")
	}
	// Settled: four channels (two per session) that stay.
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for {
		time.Sleep(time.Second)
		now := channels()
		if now == last && len(strings.Fields(now)) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("channels still changing: %q, then %q", last, now)
		}
		last = now
	}
	for i, s := range sessions {
		if err := s.TestUnitReady(ctx, initiator.LUN(0)); err != nil && !initiator.IsSense(err, 6, 0x29, 0) {
			t.Errorf("session %d: %v", i, err)
		}
	}
}
