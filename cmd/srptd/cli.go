package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/gosrp/gosrp/internal/buildinfo"
)

// errHandled reports a command line that was answered without starting
// the daemon (--help, --version, completion, man): exit status 0.
var errHandled = errors.New("handled")

// newRootCmd defines srptd's command line, binding the flags to o. run
// is called when the daemon is to start.
func newRootCmd(o *options, run func()) *cobra.Command {
	c := &cobra.Command{
		Use:   "srptd",
		Short: "SRP target daemon: SCSI logical units over iWARP or RDMA",
		Long: `srptd exports files, block devices and RAM as SCSI logical units to SRP
initiators (Linux ib_srp, srpctl) over pure-Go iWARP on TCP, or over RDMA
hardware through libibverbs/librdmacm (binaries built with -tags verbs).

With no flags it serves an embedded default: one sparse 1 GiB file-backed
LUN in the data directory (./srptd-data), iWARP on 127.0.0.1:5555, every
initiator admitted (demo mode, on loopback only). It prints one login_info
line per address: the add_target string initiators log in with.

Signals: SIGINT and SIGTERM shut down gracefully; SIGHUP reloads the
access policy (demo_mode and the ACLs) from the configuration file.
Under systemd (Type=notify) srptd reports READY=1 once every port listens.

The configuration file is described in srptd.toml(5); srpctl(8)
administers a running srptd through its admin socket.`,
		Args:          cobra.NoArgs,
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			run()
			return nil
		},
	}
	c.SetVersionTemplate("srptd {{.Version}}\n")
	f := c.Flags()
	f.SortFlags = false
	f.StringVar(&o.config, "config", "", "TOML configuration `file` (default: DATA_DIR/srptd.toml if it exists, else the embedded default)")
	f.StringVar(&o.dataDir, "data-dir", "", "data `directory`: identity, the default LUN, the admin socket (default ./"+defaultDataDir+"; with --config only if given or set as target.data_dir)")
	f.StringVar(&o.listen, "listen", "", "comma-separated host:port `addresses` for the first port (default 127.0.0.1:5555; overrides port[0].listen, or makes that port when the configuration has no [[port]])")
	f.StringVar(&o.transport, "transport", "", "`transport` of the first port: iwarp or verbs")
	f.StringVar(&o.guid, "guid", "", "service `GUID` of the first port, 16 hex digits")
	f.BoolVar(&o.demo, "demo", false, "demo mode: admit every initiator (--demo=false turns it off where it is the default)")
	f.StringVar(&o.admin, "admin", "", "admin API unix socket `path` (default DATA_DIR/srptd.sock)")
	f.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics on this `host:port` (/metrics)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "debug logging")
	f.BoolVar(&o.check, "check", false, "validate the configuration, open what a start opens, and exit")
	f.StringVar(&o.pprof, "pprof", "", "serve Go profiling (net/http/pprof) on this `host:port`, for debugging")
	c.AddCommand(&cobra.Command{
		Use:    "man DIR",
		Short:  "write the srptd(8) manual page (and its subcommands') into DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return genMan(cmd.Root(), args[0])
		},
	})
	return c
}

// genMan writes the manual pages of root and its subcommands (section 8)
// into dir, generated from the command definitions.
func genMan(root *cobra.Command, dir string) error {
	root.DisableAutoGenTag = true
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return doc.GenManTree(root, &doc.GenManHeader{Title: strings.ToUpper(root.Name()), Section: "8", Source: "gosrp " + buildinfo.Read().Version, Manual: "gosrp"}, dir)
}

// parseFlags parses srptd's command line. It returns errHandled when the
// command line was answered (help, version, completion, man pages)
// without a daemon to start.
func parseFlags(args []string, stdout, stderr io.Writer) (*options, error) {
	o := &options{}
	start := false
	c := newRootCmd(o, func() { start = true })
	c.SetArgs(compatArgs(args, c))
	c.SetOut(stdout)
	c.SetErr(stderr)
	if err := c.Execute(); err != nil {
		return nil, err
	}
	if !start {
		return nil, errHandled
	}
	// An empty value ("--listen $ADDR" with ADDR unset) is a mistake, not
	// a request for the default.
	for _, name := range []string{"config", "data-dir", "listen", "transport", "guid", "admin", "metrics", "pprof"} {
		if f := c.Flags().Lookup(name); f.Changed && f.Value.String() == "" {
			return nil, fmt.Errorf("--%s: empty value (leave the flag out for its default)", name)
		}
	}
	o.demoSet = c.Flags().Changed("demo")
	return o, nil
}

// compatArgs rewrites the spellings srptd's earlier command line took:
// long flags with one dash (-config, -data-dir) get two, and --demo
// followed by a separate value (true, false, on, off, 1, 0) becomes
// --demo=VALUE.
func compatArgs(args []string, c *cobra.Command) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && c.Flags().Lookup(name) != nil {
				a = "-" + a
			}
		}
		// srptd takes no arguments: a word after --demo is its value.
		if a == "--demo" && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			a = "--demo=" + args[i]
		}
		if v, ok := strings.CutPrefix(a, "--demo="); ok {
			switch v {
			case "on":
				a = "--demo=true"
			case "off":
				a = "--demo=false"
			}
		}
		out = append(out, a)
	}
	return out
}
