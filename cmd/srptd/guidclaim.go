package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// guidClaimName is the Linux abstract unix socket name through which a
// running srptd announces that it serves service GUID guid: one name per
// GUID, so a second srptd with the same GUID (a copied data directory,
// the same service_guid in two configurations, two daemons on one HCA's
// node GUID) finds the first. Abstract names belong to the network
// namespace, need no file and vanish with the process.
func guidClaimName(guid uint64) string {
	return fmt.Sprintf("@gosrp-srptd-guid-%016x", guid)
}

// guidClaim holds one announced service GUID.
type guidClaim struct {
	l net.Listener
}

// claimGUID announces that this srptd (data directory dataDir, "" for
// none) serves guid. When another running srptd announced it first, it
// logs a warning naming that srptd's process and data directory, since
// initiators cannot tell two targets with one port ID apart, and returns
// nil: the port still starts (a deliberate twin, e.g. an ALUA gateway with
// a configured service_guid, is the admin's call). The claim answers
// every connection with one line: "pid PID data_dir DIR".
func claimGUID(guid uint64, port, dataDir string, log *slog.Logger) *guidClaim {
	name := guidClaimName(guid)
	l, err := net.Listen("unix", name)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			log.Warn("another running srptd on this host serves the same service GUID: initiators cannot tell the two targets apart; give one a service_guid of its own (or remove its identity.json to make a new one)",
				"port", port, "service_guid", fmt.Sprintf("%016x", guid), "other", claimHolder(name))
		} else {
			log.Debug("service GUID not announced", "service_guid", fmt.Sprintf("%016x", guid), "err", err)
		}
		return nil
	}
	if dataDir == "" {
		dataDir = "(none)"
	}
	line := fmt.Sprintf("pid %d data_dir %s\n", os.Getpid(), dataDir)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, line)
			c.Close()
		}
	}()
	return &guidClaim{l: l}
}

// claimHolder asks the srptd holding claim name who it is.
func claimHolder(name string) string {
	c, err := net.DialTimeout("unix", name, time.Second)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	b, _ := io.ReadAll(io.LimitReader(c, 4096))
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "unknown"
}

// release withdraws the announcement. A nil claim is a no-op.
func (g *guidClaim) release() {
	if g != nil {
		_ = g.l.Close()
	}
}
