package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
)

// TestWriteTop: the rates are the counters' growth over the interval, the
// latency the interval's mean (growth of the latency sum over growth of
// the command count), the queue depth the current one.
func TestWriteTop(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	prev := topSample{at: t0,
		luns:     []adminapi.LUN{{LUN: 0, Name: "disk0", Counters: adminapi.LUNCounters{Commands: 1000, ReadBytes: 1 << 30, AvgLatencyUs: 100}}},
		sessions: []adminapi.Session{{Port: "p0", Channel: 3, InitiatorPort: "00ab", Commands: 500, WriteBytes: 0, ReqLim: 64}},
	}
	cur := topSample{at: t0.Add(2 * time.Second),
		// 1000 more commands whose mean is 400 µs: the cumulative mean is
		// (1000*100 + 1000*400) / 2000 = 250 µs.
		luns:     []adminapi.LUN{{LUN: 0, Name: "disk0", Counters: adminapi.LUNCounters{Commands: 2000, ReadBytes: 1<<30 + 200<<20, WriteBytes: 10 << 20, AvgLatencyUs: 250, InFlight: 7, Errors: 2}}},
		sessions: []adminapi.Session{{Port: "p0", Channel: 3, InitiatorPort: "00ab", Commands: 1100, WriteBytes: 4 << 20, Outstanding: 5, ReqLim: 60}},
	}
	var out bytes.Buffer
	writeTop(&out, prev, cur)
	for _, re := range []string{
		`(?m)^\s*0\s+disk0\s+500\s+100\.0\s+5\.0\s+400\s+7\s+2\s*$`,
		`(?m)^\s*p0\s+3\s+00ab\s+300\s+0\.0\s+2\.0\s+5\s+60\s*$`,
		`interval 2s\s+1 LUN\(s\)\s+1 channel\(s\)`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("no %s in\n%s", re, out.String())
		}
	}
}

// TestTargetTop: srpctl target top against a running srptd prints --count
// refreshes with the LUN and the logged-in channel.
func TestTargetTop(t *testing.T) {
	ctx := adminTestCtx(t)
	_, data := startSrptd(t, ctx)
	out, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "top", "--count", "2", "--interval", "100ms")
	if err != nil {
		t.Fatalf("top: %v\n%s", err, out)
	}
	if n := strings.Count(out, "srptd  "); n != 2 || !regexp.MustCompile(`(?m)^\s*0\s+disk0\s+\d+`).MatchString(out) {
		t.Fatalf("top printed %d refreshes:\n%s", n, out)
	}
	if _, err := srpctl(ctx, filepath.Join(data, "srptd.sock"), "top", "--interval", "1ms"); err == nil {
		t.Error("--interval 1ms accepted")
	}
}
