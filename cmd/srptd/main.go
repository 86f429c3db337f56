// Command srptd is gosrp's SRP target daemon: it exports RAM, files and
// block devices as SCSI logical units to SRP initiators (Linux ib_srp,
// srpctl) over pure-Go iWARP (TCP) or RDMA hardware.
//
// With no arguments it serves an embedded default: a sparse 1 GiB RAM LUN on
// iWARP port 5555, every initiator admitted. See docs/srptd.md for the
// configuration file.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/backstore"
	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/scsi"
	"github.com/gosrp/gosrp/srp/target"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: usage printed
		}
		fmt.Fprintln(os.Stderr, "srptd:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	config    string
	listen    string
	transport string
	guid      string
	demo      string
	admin     string
	verbose   bool
	check     bool
	pprof     string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("srptd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.config, "config", "", "TOML configuration `file` (default: the embedded default)")
	fs.StringVar(&o.listen, "listen", "", "comma-separated host:port `addresses` for the first port (overrides port[0].listen)")
	fs.StringVar(&o.transport, "transport", "", "transport of the first port: iwarp or verbs")
	fs.StringVar(&o.guid, "guid", "", "service GUID of the first port, 16 hex digits")
	fs.StringVar(&o.demo, "demo", "", "demo mode (admit every initiator): true or false")
	fs.StringVar(&o.admin, "admin", "", "admin API unix socket `path`")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	fs.BoolVar(&o.check, "check", false, "validate the configuration and exit")
	fs.StringVar(&o.pprof, "pprof", "", "serve Go profiling (net/http/pprof) on this `host:port`, for debugging")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

// applyFlags lets the flags override the configuration's common items.
func applyFlags(c *Config, o *options) error {
	if len(c.Ports) > 0 {
		p := &c.Ports[0]
		if o.listen != "" {
			p.Listen = strings.Split(o.listen, ",")
		}
		if o.transport != "" {
			p.Transport = o.transport
		}
		if o.guid != "" {
			p.ServiceGUID = o.guid
		}
	}
	if o.demo != "" {
		switch o.demo {
		case "true", "1", "on":
			v := true
			c.Target.DemoMode = &v
		case "false", "0", "off":
			v := false
			c.Target.DemoMode = &v
		default:
			return fmt.Errorf("-demo: %q is not true or false", o.demo)
		}
	}
	if o.admin != "" {
		c.Admin.Socket = o.admin
	}
	return nil
}

// ready reports the daemon's listening state to tests.
type ready struct {
	ports []*target.Port
	addrs []net.Addr
}

// run is the daemon: it returns when ctx ends (after a graceful shutdown) or
// on a setup error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, started func(ready)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := readConfig(o.config)
	if err != nil {
		return err
	}
	if err := applyFlags(cfg, o); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if o.check {
		fmt.Fprintln(stdout, "configuration OK")
		return nil
	}

	core := scsi.NewTarget(scsi.TargetConfig{Logger: log.With("layer", "scsi")})
	stores, err := openLUNs(cfg, core, log)
	defer closeStores(stores, log)
	if err != nil {
		return err
	}

	var (
		ports     []*target.Port
		devices   []rdma.Device
		listeners []rdma.Listener
		wg        sync.WaitGroup
		info      ready
	)
	serveCtx, cancelServe := context.WithCancel(context.Background())
	defer func() {
		cancelServe()
		for _, l := range listeners {
			_ = l.Close()
		}
		wg.Wait()
		for _, d := range devices {
			_ = d.Close()
		}
	}()
	for i, pc := range cfg.Ports {
		plog := log.With("port", portName(pc, i))
		dev, nodeGUID, err := openDevice(pc, plog)
		if err != nil {
			return fmt.Errorf("port[%d]: %w", i, err)
		}
		devices = append(devices, dev)
		guid := nodeGUID
		if pc.ServiceGUID != "" {
			guid, _ = parseGUID(pc.ServiceGUID)
		} else if guid == 0 {
			guid = hostGUID(i)
		}
		tc := cfg.targetConfig(guid)
		tc.Name = portName(pc, i)
		tc.RelativePort = uint16(i + 1)
		tc.Logger = plog
		p, err := target.NewPort(tc, dev, coreAdapter{core})
		if err != nil {
			return fmt.Errorf("port[%d]: %w", i, err)
		}
		ports = append(ports, p)
		var bound []net.Addr
		for _, a := range pc.Listen {
			l, err := dev.Listen(ctx, a)
			if err != nil {
				if coveredByDualStack(a, bound) {
					plog.Debug("address already served by a dual-stack listener", "addr", a)
					continue
				}
				return fmt.Errorf("port[%d].listen %s: %w", i, a, err)
			}
			listeners = append(listeners, l)
			bound = append(bound, l.Addr())
			info.addrs = append(info.addrs, l.Addr())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.Serve(serveCtx, l); err != nil && serveCtx.Err() == nil {
					plog.Error("listener failed", "addr", l.Addr(), "err", err)
				}
			}()
			plog.Info("listening", "addr", l.Addr(), "transport", dev.Name())
		}
		for _, line := range loginInfo(guid, bound) {
			fmt.Fprintln(stdout, "login_info:", line)
		}
	}
	info.ports = ports

	var admin *adminServer
	if cfg.Admin.Socket != "" {
		admin, err = startAdmin(cfg.Admin.Socket, ports, log)
		if err != nil {
			return fmt.Errorf("admin.socket: %w", err)
		}
		defer admin.Close()
	}
	if o.pprof != "" {
		stopProf, err := startPprof(o.pprof, log)
		if err != nil {
			return fmt.Errorf("-pprof: %w", err)
		}
		defer stopProf()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if started != nil {
		started(info)
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-hup:
			reload(o, cfg, ports, log)
		}
	}

	// Graceful shutdown: stop accepting, log every channel out
	// (SRP_T_LOGOUT), wait for them to drain, then flush the backstores.
	log.Info("shutting down")
	timeout := time.Duration(cfg.Target.ShutdownTimeout)
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cancelServe()
	for _, p := range ports {
		if err := p.Close(sctx); err != nil {
			log.Warn("channels did not drain in time", "err", err)
		}
	}
	return nil
}

// reload applies the login policy (demo_mode and the ACLs) of the
// configuration file again, on SIGHUP. Everything else needs a restart.
func reload(o *options, old *Config, ports []*target.Port, log *slog.Logger) {
	cfg, err := readConfig(o.config)
	if err == nil {
		err = applyFlags(cfg, o)
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		log.Error("SIGHUP: configuration not reloaded", "err", err)
		return
	}
	nt, ot := cfg.Target, old.Target
	nt.DemoMode, ot.DemoMode = nil, nil
	if !reflect.DeepEqual(cfg.LUNs, old.LUNs) || !reflect.DeepEqual(cfg.Ports, old.Ports) || !reflect.DeepEqual(nt, ot) {
		log.Warn("SIGHUP: changes to ports, LUNs and tunables need a restart; applying demo_mode and ACLs only")
	}
	tc := cfg.targetConfig(0)
	for _, p := range ports {
		p.SetAccess(tc.DemoMode, tc.ACLs)
	}
	log.Info("SIGHUP: access policy reloaded", "demo_mode", tc.DemoMode, "acls", len(tc.ACLs))
}

func portName(p PortSection, i int) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("port%d", i)
}

// coreAdapter opens SCSI core sessions for the SRP target.
type coreAdapter struct{ t *scsi.Target }

func (a coreAdapter) OpenSession(n scsi.Nexus) (scsi.Session, error) {
	return a.t.NewSession(n), nil
}

// openLUNs opens every backstore and attaches its logical unit.
func openLUNs(cfg *Config, core *scsi.Target, log *slog.Logger) ([]backstore.Backstore, error) {
	var stores []backstore.Backstore
	for i, l := range cfg.LUNs {
		f := fmt.Sprintf("lun[%d]", i)
		var bs backstore.Backstore
		switch l.Backstore {
		case "ram":
			bs = backstore.NewRAM(int64(l.Size))
		case "file", "block":
			fb, err := backstore.OpenFile(l.Path, backstore.FileOptions{Size: int64(l.Size), ReadOnly: l.ReadOnly})
			if err != nil {
				return stores, fmt.Errorf("%s.path: %w", f, err)
			}
			if l.Backstore == "block" && !fb.IsBlockDevice() {
				_ = fb.Close()
				return stores, fmt.Errorf("%s.path: %s is not a block device (use backstore = \"file\")", f, l.Path)
			}
			bs = fb
		}
		stores = append(stores, bs)
		lc := scsi.LUConfig{
			Backstore:  bs,
			BlockSize:  uint32(l.BlockSize),
			Serial:     l.Serial,
			ReadOnly:   l.ReadOnly,
			WriteCache: l.WriteCache,
			Logger:     log.With("lun", *l.LUN),
		}
		if l.WWN != "" {
			lc.NAA, _ = parseWWN(l.WWN)
		}
		lu, err := scsi.NewLogicalUnit(lc)
		if err != nil {
			return stores, fmt.Errorf("%s: %w", f, err)
		}
		if err := core.AddLUN(*l.LUN, lu); err != nil {
			return stores, fmt.Errorf("%s.lun: %w", f, err)
		}
		log.Info("LUN ready", "lun", *l.LUN, "name", l.Name, "backstore", l.Backstore, "path", l.Path, "bytes", bs.Size())
	}
	return stores, nil
}

// closeStores flushes (backstore.Syncer) and closes the backstores.
func closeStores(stores []backstore.Backstore, log *slog.Logger) {
	for _, bs := range stores {
		if s, ok := bs.(backstore.Syncer); ok {
			if err := s.Sync(); err != nil {
				log.Error("backstore sync failed", "err", err)
			}
		}
		if err := bs.Close(); err != nil {
			log.Error("backstore close failed", "err", err)
		}
	}
}

// hostGUID derives a stable service GUID for port i from the machine ID
// (or the host name): the first 8 bytes of a SHA-256, with the EUI-64
// locally-administered bit set and the group bit clear.
func hostGUID(i int) uint64 {
	seed, err := os.ReadFile("/etc/machine-id")
	if err != nil || len(strings.TrimSpace(string(seed))) == 0 {
		h, _ := os.Hostname()
		seed = []byte(h)
	}
	sum := sha256.Sum256(append([]byte(fmt.Sprintf("gosrp srptd port %d:", i)), seed...))
	sum[0] = sum[0]&^0x01 | 0x02
	return binary.BigEndian.Uint64(sum[:8])
}

// loginInfo returns the add_target strings for the bound addresses
// (ib_srp: id_ext, ioc_guid and dest=IP:port or [IPv6]:port). A wildcard
// address is expanded into the host's interface addresses.
func loginInfo(guid uint64, bound []net.Addr) []string {
	var out []string
	seen := map[string]bool{}
	add := func(ap netip.AddrPort) {
		s := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", guid, guid, ap)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, a := range bound {
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			continue
		}
		if !ap.Addr().IsUnspecified() {
			add(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			continue
		}
		v4only := ap.Addr().Unmap().Is4()
		ifas, _ := net.InterfaceAddrs()
		for _, ifa := range ifas {
			pfx, err := netip.ParsePrefix(ifa.String())
			if err != nil {
				continue
			}
			ip := pfx.Addr().Unmap()
			if ip.IsLinkLocalUnicast() || v4only && !ip.Is4() {
				continue
			}
			add(netip.AddrPortFrom(ip, ap.Port()))
		}
	}
	return out
}

// coveredByDualStack reports whether addr is a wildcard address whose port
// an already bound wildcard listener serves (Go listens dual-stack on
// 0.0.0.0 and [::], so the second one fails with EADDRINUSE).
func coveredByDualStack(addr string, bound []net.Addr) bool {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsUnspecified() {
		return false
	}
	for _, b := range bound {
		ap, err := netip.ParseAddrPort(b.String())
		if err == nil && ap.Addr().IsUnspecified() && fmt.Sprint(ap.Port()) == port {
			return true
		}
	}
	return false
}

func splitHostPort(a string) (string, string, error) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", "", fmt.Errorf("%q: want host:port or [ipv6]:port", a)
	}
	return h, p, nil
}
