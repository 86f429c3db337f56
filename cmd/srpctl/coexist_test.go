package main

import (
	"bytes"
	"context"
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
