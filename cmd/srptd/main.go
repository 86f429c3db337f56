// Command srptd is gosrp's SRP target daemon: it exports RAM, files and
// block devices as SCSI logical units to SRP initiators (Linux ib_srp,
// srpctl) over pure-Go iWARP (TCP) or RDMA hardware.
//
// With no arguments it serves an embedded default: one sparse 1 GiB
// file-backed LUN in the data directory (./srptd-data), iWARP on
// 127.0.0.1:5555, every initiator admitted (demo mode, on loopback only).
// See docs/srptd.md for the configuration file and the admin API.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/internal/gcpace"
	"github.com/gosrp/gosrp/srp/target"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// RAM LUNs are live heap: without pacing, each collection would
	// wait for as much garbage again (internal/gcpace).
	if v, ok := gcpace.OperatorGOGC(); v != "" && !ok {
		fmt.Fprintf(os.Stderr, "srptd: GOGC=%q is neither off nor a whole number: Go ignores it, and srptd paces its collector itself\n", v)
	}
	go gcpace.Run(ctx, gcpace.DefaultHeadroom, time.Second)
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if errors.Is(err, errHandled) {
			return // --help, --version, completion, man: done
		}
		fmt.Fprintln(os.Stderr, "srptd:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	config    string
	dataDir   string
	listen    string
	transport string
	guid      string
	demo      bool
	demoSet   bool // --demo given (true or false)
	admin     string
	metrics   string
	verbose   bool
	check     bool
	pprof     string
}

// defaultDataDir is the data directory when neither -data-dir nor
// target.data_dir names one.
const defaultDataDir = "srptd-data"

// applyFlags lets the flags override the configuration's common items.
// --listen, --transport and --guid set the first [[port]]; a configuration
// without one gets it from them.
func applyFlags(c *Config, o *options) error {
	c.flagged = map[string]string{}
	if len(c.Ports) == 0 && (o.listen != "" || o.transport != "") {
		c.Ports = []PortSection{{}}
	}
	if len(c.Ports) > 0 {
		p := &c.Ports[0]
		if o.listen != "" {
			p.Listen = strings.Split(o.listen, ",")
			c.flagged["port[0].listen"] = "--listen"
		}
		if o.transport != "" {
			p.Transport = o.transport
			c.flagged["port[0].transport"] = "--transport"
		}
		if o.guid != "" {
			p.ServiceGUID = o.guid
			c.flagged["port[0].service_guid"] = "--guid"
		}
	}
	if o.demoSet {
		v := o.demo
		c.Target.DemoMode = &v
	}
	if o.admin != "" {
		c.Admin.Socket = o.admin
		c.flagged["admin.socket"] = "--admin"
	}
	if o.metrics != "" {
		c.Metrics.Listen = o.metrics
		c.flagged["metrics.listen"] = "--metrics"
	}
	if o.dataDir != "" {
		c.flagged["target.data_dir"] = "--data-dir"
	}
	return nil
}

// loadConfig reads the configuration the flags name: -config FILE, else
// DATA_DIR/srptd.toml when it exists, else the embedded default. It
// returns the configuration with the flags applied and validated, where it
// came from, and the data directory ("" for none).
func loadConfig(o *options) (*Config, origin, string, error) {
	var (
		cfg *Config
		org origin
		err error
	)
	dataDir := o.dataDir
	switch {
	case o.config != "":
		org = origin{path: o.config, savePath: o.config}
		cfg, err = readConfigFile(o.config)
	default:
		dir := dataDir
		if dir == "" {
			dir = defaultDataDir
		}
		p := filepath.Join(dir, "srptd.toml")
		if _, serr := os.Stat(p); serr == nil {
			org = origin{path: p, savePath: p, managed: true}
			cfg, err = readConfigFile(p)
		} else {
			org = origin{savePath: p, managed: true}
			cfg, err = LoadConfig(defaultConfig, "embedded default config")
		}
	}
	if err != nil {
		return nil, org, "", err
	}
	if err := applyFlags(cfg, o); err != nil {
		return nil, org, "", err
	}
	if err := cfg.Validate(); err != nil {
		return nil, org, "", err
	}
	if dataDir == "" {
		dataDir = cfg.Target.DataDir
	}
	if dataDir == "" && org.managed {
		dataDir = defaultDataDir
	}
	return cfg, org, dataDir, nil
}

// ready reports the daemon's listening state to tests.
type ready struct {
	ports       []*target.Port
	addrs       []net.Addr
	adminSocket string
	metricsAddr net.Addr
	d           *daemon
}

// run is the daemon: it returns when ctx ends (after a graceful shutdown) or
// on a setup error, after undoing whatever it had started.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, started func(ready)) error {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, org, dataDir, err := loadConfig(o)
	if err != nil {
		return err
	}
	if o.check {
		if err := checkStart(ctx, cfg, org, dataDir, o.pprof, log); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "configuration OK")
		return nil
	}
	if dataDir != "" {
		if abs, err := filepath.Abs(dataDir); err == nil {
			dataDir = abs
		}
		if org.path == "" {
			org.savePath = filepath.Join(dataDir, "srptd.toml")
		}
		// Before the listeners: a second srptd on this data directory
		// (and so on its addresses) is told so, not that its address
		// is in use.
		if err := dataDirFree(dataDir); err != nil {
			return err
		}
	}
	d := newDaemon(cfg, org, dataDir, nil, stdout, log)
	defer d.close()
	// Every listener binds before srptd creates anything on disk (the
	// data directory, its lock, identity.json, LUN images, the admin
	// socket): an address in use stops srptd with nothing left behind.
	if err := d.listen(ctx); err != nil {
		return err
	}
	var metricsAddr net.Addr
	if a := cfg.Metrics.Listen; a != "" {
		m, err := startMetrics(a, d, log)
		if err != nil {
			return d.cfg.explain(ferr("metrics.listen", "%v", err))
		}
		defer m.Close()
		metricsAddr = m.Addr()
	}
	if o.pprof != "" {
		stopProf, err := startPprof(o.pprof, log)
		if err != nil {
			return fmt.Errorf("--pprof: %w", err)
		}
		defer stopProf()
	}
	// A LUN path or admin socket a start cannot use stops it here, before
	// it creates anything on disk, as an address in use does.
	if err := d.preflight(); err != nil {
		return err
	}
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		unlock, err := lockDataDir(dataDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	ident, err := loadIdentity(dataDir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	d.ident = ident
	if err := d.openLUNs(); err != nil {
		return err
	}
	// The admin socket is made before the SRP ports serve, so an error
	// in it stops srptd before any initiator can log in.
	var adminSocket string
	socket := d.adminSocketPath()
	if socket == "" && cfg.Admin.Socket == "" && dataDir != "" {
		log.Warn("no admin API: the data directory's path is too long for a unix socket; set admin.socket", "socket", filepath.Join(dataDir, "srptd.sock"))
	}
	if socket != "" {
		admin, err := startAdmin(socket, d, log)
		if err != nil {
			return fmt.Errorf("admin socket %s: %w", socket, err)
		}
		defer admin.Close()
		adminSocket = socket
	}
	if err := d.startPorts(); err != nil {
		return err
	}
	d.logDemo()
	info := ready{ports: d.Ports(), addrs: d.addrs, d: d, adminSocket: adminSocket, metricsAddr: metricsAddr}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	notify(log, fmt.Sprintf("READY=1\nSTATUS=serving %d LUN(s) on %d address(es)", len(cfg.LUNs), len(info.addrs)))
	if started != nil {
		started(info)
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-hup:
			notify(log, "RELOADING=1")
			d.reload(o)
			notify(log, "READY=1")
		}
	}

	// Graceful shutdown: stop accepting, log every channel out
	// (SRP_T_LOGOUT), wait for them to drain; the deferred close then
	// flushes and closes the backstores.
	log.Info("shutting down")
	notify(log, "STOPPING=1")
	timeout := time.Duration(cfg.Target.ShutdownTimeout)
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d.stopListening()
	d.drain(sctx)
	return nil
}

// adminSocketPath is the admin socket srptd makes: admin.socket, else
// srptd.sock in the data directory; "" for none (no data directory, or its
// path too long for a unix socket).
func (d *daemon) adminSocketPath() string {
	if s := d.cfg.Admin.Socket; s != "" {
		return s
	}
	if d.dataDir == "" {
		return ""
	}
	if s := filepath.Join(d.dataDir, "srptd.sock"); len(s) <= maxSocketPath {
		return s
	}
	return ""
}

// reload applies the login policy (demo_mode and the ACLs) of the
// configuration file again, on SIGHUP. Everything else needs a restart.
func (d *daemon) reload(o *options) {
	d.mu.Lock()
	path := d.origin.path
	d.mu.Unlock()
	if path == "" {
		d.log.Warn("SIGHUP: running the embedded default; no configuration file to reload")
		return
	}
	cfg, err := readConfigFile(path)
	if err == nil {
		err = applyFlags(cfg, o)
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		d.log.Error("SIGHUP: configuration not reloaded", "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cfg
	nt, ot := cfg.Target, old.Target
	nt.DemoMode, ot.DemoMode = nil, nil
	if !reflect.DeepEqual(cfg.LUNs, old.LUNs) || !reflect.DeepEqual(cfg.Ports, old.Ports) || !reflect.DeepEqual(nt, ot) {
		d.log.Warn("SIGHUP: changes to ports, LUNs and tunables need a restart; applying demo_mode and ACLs only")
	}
	for _, a := range cfg.ACLs {
		for k, v := range a.LUNs {
			if _, ok := d.luns[v]; !ok {
				d.log.Error("SIGHUP: configuration not reloaded: an ACL maps a LUN that is not attached", "initiator", a.Initiator, "lun", k, "target_lun", v)
				return
			}
		}
	}
	d.cfg.ACLs = cfg.ACLs
	d.cfg.Target.DemoMode = cfg.Target.DemoMode
	d.demo = d.logDemo()
	d.applyAccessLocked()
	d.log.Info("SIGHUP: access policy reloaded", "demo_mode", d.demo, "acls", len(d.cfg.ACLs))
}

func portName(p PortSection, i int) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("port%d", i)
}

// hostGUID derives a service GUID for port i of the srptd with data
// directory dataDir ("" for none) from the machine ID (or the host name)
// and the directory's absolute path, so two data directories on one host
// are two targets: the first 8 bytes of a SHA-256, with the EUI-64
// locally-administered bit set and the group bit clear. identity.json
// keeps the first value, so moving the directory keeps the GUID.
func hostGUID(i int, dataDir string) uint64 {
	seed, err := os.ReadFile("/etc/machine-id")
	if err != nil || len(strings.TrimSpace(string(seed))) == 0 {
		h, _ := os.Hostname()
		seed = []byte(h)
	}
	if dataDir != "" {
		if abs, err := filepath.Abs(dataDir); err == nil {
			dataDir = abs
		}
		seed = append(append(seed, 0), dataDir...)
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
