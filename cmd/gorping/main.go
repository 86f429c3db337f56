// Command gorping is rping (librdmacm's RDMA ping) over the pure-Go iWARP
// provider: it pings, or answers the pings of, the kernel's rping on Linux
// soft-iWARP (siw) or another gorping, over TCP.
//
// Usage:
//
//	gorping -s [-v] [-V] [-d] [-S size] [-C count] [-a addr] [-p port] [--crc]
//	gorping -c [-v] [-V] [-d] [-S size] [-C count] -a addr [-p port] [--crc]
//
// The flags are rping's: -s server, -c client, -a address (the server's
// listening address, default all), -p port (default 7174), -C ping count
// (0: until interrupted; the server serves one client until it
// disconnects, and with -C fails if the client stopped short of it), -S ping data size in bytes (26..65535, default 64), -v print
// the ping data, -V validate it (the client compares what came back; the
// server checks what it read against rping's pattern), -d debug logging
// (includes the negotiated MPA revision and CRC). Beyond rping: --crc asks
// for the MPA CRC32c, --mpa-rev picks MPA revision 1 or 2, --timeout bounds
// the whole run. SENDs and RDMA WRITEs complete once written to TCP, as on
// siw (iwarp.Config.CompleteOnTransmit), so the wire carries rping's
// messages only.
//
// Exit status: 0 on success, 1 on any error (connection, protocol, data
// mismatch), 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/rping"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.Bool("s", false, "server side")
	client := fs.Bool("c", false, "client side")
	addr := fs.String("a", "", "address: the server's to connect to (client), to listen on (server; default all)")
	port := fs.Int("p", rping.DefaultPort, "port")
	count := fs.Int("C", 0, "ping count (0: until interrupted)")
	size := fs.Int("S", rping.DefaultSize, fmt.Sprintf("ping data size, bytes (%d to %d)", rping.MinSize, rping.MaxSize))
	verbose := fs.Bool("v", false, "display ping data to stdout")
	validate := fs.Bool("V", false, "validate ping data")
	debug := fs.Bool("d", false, "debug logging to stderr")
	crc := fs.Bool("crc", false, "request the MPA CRC32c")
	rev := fs.Int("mpa-rev", 2, "MPA revision: 2 (RFC 6581, as siw) or 1 (RFC 5044)")
	timeout := fs.Duration("timeout", 0, "bound the whole run (0: none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [--crc]")
		fmt.Fprintln(stderr, "       gorping -c [-vVd] [-S size] [-C count] -a addr [-p port] [--crc]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintln(stderr, "gorping:", msg)
		fs.Usage()
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument " + fs.Arg(0))
	case *server == *client:
		return usage("exactly one of -s and -c")
	case *client && *addr == "":
		return usage("the client needs -a")
	case *port < 0 || *port > 65535:
		return usage("bad port " + strconv.Itoa(*port))
	case *rev != 1 && *rev != 2:
		return usage("--mpa-rev must be 1 or 2")
	case *size < rping.MinSize || *size > rping.MaxSize:
		return usage(fmt.Sprintf("invalid size %d (valid range is %d to %d)", *size, rping.MinSize, rping.MaxSize))
	case *count < 0:
		return usage(fmt.Sprintf("invalid count %d", *count))
	}
	level := slog.LevelWarn
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	// Completion at transmit, as siw and every verbs rping peer: no
	// zero-length fencing Reads on the wire, only rping's own messages.
	dev := iwarp.NewDevice(iwarp.Config{Logger: log, CRC: *crc, MPARevision: *rev, CompleteOnTransmit: true})
	defer dev.Close()
	cfg := rping.Config{Size: *size, Count: *count, Validate: *validate, Logger: log}
	if *verbose {
		cfg.Verbose = stdout
	}
	hp := net.JoinHostPort(*addr, strconv.Itoa(*port))
	start := time.Now()
	var res rping.Result
	var err error
	if *client {
		res, err = rping.Client(ctx, dev, hp, cfg)
	} else {
		l, lerr := dev.Listen(ctx, hp)
		if lerr != nil {
			fmt.Fprintln(stderr, "gorping:", lerr)
			return 1
		}
		log.Debug("gorping: listening", "addr", l.Addr())
		res, err = rping.Server(ctx, dev, l, cfg)
		l.Close()
	}
	log.Debug("gorping: done", "pings", res.Pings, "elapsed", time.Since(start), "err", err)
	if err != nil {
		fmt.Fprintf(stderr, "gorping: %v (after %d pings)\n", err, res.Pings)
		return 1
	}
	return 0
}
