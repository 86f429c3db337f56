package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/rping"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{}, {"-s", "-c"}, {"-c"}, {"-c", "-a", "x", "-S", "25"}, {"-s", "-S", "65536"},
		{"-s", "-C", "-1"}, {"-s", "--mpa-rev", "3"}, {"-s", "-p", "70000"}, {"-s", "extra"}, {"-nope"},
	} {
		var out, errb bytes.Buffer
		if rc := run(context.Background(), args, &out, &errb); rc != 2 {
			t.Errorf("gorping %q: exit %d, want 2 (%s)", args, rc, errb.String())
		}
	}
}

// TestClientAgainstServer runs the command's client against a server of
// package rping (with CRC asked by the client only) and checks -v output and
// the exit status; then against a server that is gone (exit 1).
func TestClientAgainstServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dev := iwarp.NewDevice(iwarp.Config{})
	defer dev.Close()
	l, err := dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		_, err := rping.Server(ctx, dev, l, rping.Config{Size: 40, Validate: true})
		done <- err
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	var out, errb bytes.Buffer
	rc := run(ctx, []string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "3", "-S", "40", "-v", "-V", "-d", "--crc", "--timeout", "50s"}, &out, &errb)
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ\nping data: rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\nping data: rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), "crc=true") {
		t.Errorf("debug log does not report CRC in use:\n%s", errb.String())
	}
	l.Close()
	errb.Reset()
	if rc := run(ctx, []string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "1", "--timeout", "10s"}, &out, &errb); rc != 1 {
		t.Errorf("client with no server: exit %d, want 1 (%s)", rc, errb.String())
	}
}
