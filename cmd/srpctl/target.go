package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gosrp/gosrp/rdma"
	"github.com/gosrp/gosrp/rdma/iwarp"
	"github.com/gosrp/gosrp/rdma/verbs"
	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/spf13/cobra"
)

// targetFlags are the flags every initiator command shares. The target is
// always the first argument: an ib_srp add_target string such as
// id_ext=0002c903000e8acc,ioc_guid=0002c903000e8acc,dest=192.0.2.1:5555
// (transport=iwarp|verbs selects the provider; iwarp is the default).
type targetFlags struct {
	lun            int
	timeout        time.Duration
	cmdTimeout     time.Duration
	reconnectDelay time.Duration
	fastIOFail     time.Duration
	devLoss        time.Duration
	verbose        bool
	initiatorGUID  uint64
	single         bool
	// hasLUN: the command has --lun (lun names the LUN it works on).
	hasLUN bool
}

func addTargetFlags(c *cobra.Command, tf *targetFlags, withLUN bool) {
	f := c.Flags()
	if withLUN {
		f.IntVarP(&tf.lun, "lun", "l", 0, "logical unit number")
		tf.hasLUN = true
	}
	f.DurationVar(&tf.timeout, "connect-timeout", 15*time.Second, "login timeout")
	f.DurationVar(&tf.cmdTimeout, "cmd-timeout", 0, "per-command timeout before ABORT TASK (default 30s)")
	f.DurationVar(&tf.reconnectDelay, "reconnect-delay", time.Second, "wait between reconnect attempts after a channel loss (ib_srp reconnect_delay; the library default is 10s; negative disables)")
	f.DurationVar(&tf.fastIOFail, "fast-io-fail-tmo", 0, "fail I/O this long after a channel loss (default 15s)")
	f.DurationVar(&tf.devLoss, "dev-loss-tmo", 0, "give up this long after a channel loss (default 600s)")
	f.BoolVarP(&tf.verbose, "verbose", "v", false, "log channel events to stderr")
	f.Uint64Var(&tf.initiatorGUID, "initiator-guid", 0, "second half of the initiator port ID (default derived from the host name)")
	f.BoolVar(&tf.single, "single", tf.single, "log in with multichannel action SINGLE, as Linux ib_srp does: the target logs out every other channel of this initiator port (another srpctl's too); without it the login joins them (MULTI)")
	if c.Args == nil {
		// Commands with more positional arguments than TARGET set Args themselves.
		c.Args = cobra.ExactArgs(1)
	}
	c.Long = c.Short + "\n\n" + targetHelp
}

const targetHelp = `TARGET is a Linux ib_srp add_target string, as srptd prints it in its
login_info line and srp_daemon writes it:

  id_ext=0002c903000e8acc,ioc_guid=0002c903000e8acc,dest=192.0.2.1:5555

dest is IPv4:port or [IPv6]:port: the RDMA/CM address. The InfiniBand CM
keys (dgid, pkey, service_id) are refused. Optional keys: initiator_ext,
queue_size, max_it_iu_size, ch_count (RDMA channels, 1..255; default
min(4, CPUs), as ib_srp's min(4 x NUMA nodes, completion vectors) with one
node),
cmd_sg_entries, max_sect, io_class, and transport=iwarp (pure-Go iWARP over
TCP, the default) or transport=verbs (RDMA hardware through
libibverbs/librdmacm; needs a build with -tags verbs).`

func (tf *targetFlags) logger() *slog.Logger {
	lvl := slog.LevelWarn
	if tf.verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// check refuses durations that mean nothing: a login timeout that is not
// positive (it fails every login with "i/o timeout"), negative command and
// channel-loss timeouts (0 is the library default).
func (tf *targetFlags) check() error {
	if tf.timeout <= 0 {
		return fmt.Errorf("--connect-timeout %v: must be positive", tf.timeout)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--cmd-timeout", tf.cmdTimeout}, {"--fast-io-fail-tmo", tf.fastIOFail}, {"--dev-loss-tmo", tf.devLoss}} {
		if d.v < 0 {
			return fmt.Errorf("%s %v: must not be negative (0: the default)", d.flag, d.v)
		}
	}
	return nil
}

// options parses the add_target string and applies the flags.
func (tf *targetFlags) options(target string) (initiator.Options, error) {
	o, err := initiator.ParseTarget(target)
	if err != nil {
		return o, fmt.Errorf("target %q: %w", target, err)
	}
	if err := tf.check(); err != nil {
		return o, err
	}
	o.CommandTimeout = tf.cmdTimeout
	o.ReconnectDelay, o.FastIOFailTmo, o.DevLossTmo = tf.reconnectDelay, tf.fastIOFail, tf.devLoss
	o.InitiatorGUID = tf.initiatorGUID
	o.JoinNexus = !tf.single
	o.Logger = tf.logger()
	return o, nil
}

// openDevice wires the RDMA provider transport= names.
func openDevice(o initiator.Options, log *slog.Logger) (rdma.Device, error) {
	switch strings.ToLower(o.Transport) {
	case "", "iwarp":
		// Send completions on transmit, as Linux siw reports them: the
		// initiator learns of delivery from the SRP_RSP anyway.
		return iwarp.NewDevice(iwarp.Config{Logger: log, CompleteOnTransmit: true}), nil
	case "verbs":
		if !verbs.Built {
			return nil, errors.New("transport=verbs: this srpctl was built without RDMA verbs support; rebuild with `go build -tags verbs` (needs cgo, libibverbs-dev and librdmacm-dev)")
		}
		// Open the device RDMA/CM routes dest through (rxe0, siw0, mlx5_0...).
		name, err := verbs.DeviceFor(o.Dest, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("transport=verbs: %w", err)
		}
		d, err := verbs.Open(verbs.Config{DeviceName: name, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("transport=verbs: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("transport=%s: unknown transport (iwarp or verbs)", o.Transport)
}

// conn is an open session plus its device.
type conn struct {
	*initiator.Session
	dev rdma.Device
	lun uint64
	// mp, when set, carries the I/O of runIO over several targets (the
	// Session is then the first path's).
	mp *initiator.Multipath
}

func (c *conn) Close() {
	c.Session.Close()
	c.dev.Close()
}

// connect logs in to the target named by args[0].
func (tf *targetFlags) connect(ctx context.Context, target string) (*conn, error) {
	o, err := tf.options(target)
	if err != nil {
		return nil, err
	}
	return tf.connectOptions(ctx, o)
}

func (tf *targetFlags) connectOptions(ctx context.Context, o initiator.Options) (*conn, error) {
	// initiator.LUN encodes 0..255 with peripheral and up to 16383 with flat
	// space addressing (SAM-5 §4.7.7); anything else would wrap to another LUN.
	if tf.lun < 0 || tf.lun > 16383 {
		return nil, fmt.Errorf("--lun %d: a LUN number is 0..16383", tf.lun)
	}
	dev, err := openDevice(o, o.Logger)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, tf.timeout)
	defer cancel()
	s, err := initiator.Dial(lctx, dev, o)
	if err != nil {
		err = explainLoginReject(ctx, dev, o, tf.timeout, err)
		dev.Close()
		return nil, err
	}
	return &conn{Session: s, dev: dev, lun: initiator.LUN(tf.lun)}, nil
}

// withSession logs in to target with tf's settings, runs fn and logs out.
// fn's context is ctx, also cancelled by SIGINT or SIGTERM (so Ctrl-C ends a
// command in flight with an abort rather than killing the process mid-I/O).
func (tf *targetFlags) withSession(ctx context.Context, target string, fn func(context.Context, *conn) error) error {
	o, err := tf.options(target)
	if err != nil {
		return err
	}
	return tf.withSessionOptions(ctx, o, fn)
}

// withSessionOptions is withSession with options already parsed (and tuned
// by the command).
func (tf *targetFlags) withSessionOptions(ctx context.Context, o initiator.Options, fn func(context.Context, *conn) error) error {
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s, err := tf.connectOptions(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
	return tf.explainLUN(ctx, s.Session, fn(ctx, s))
}

// explainLUN adds to err, when it is a CHECK CONDITION with sense key
// ILLEGAL REQUEST and the command has --lun, the LUN asked for and, when
// the target does not report it to s (REPORT LUNS, given 5 s), the LUNs it
// does. A target answers most commands to a missing LUN with LOGICAL UNIT
// NOT SUPPORTED (ASC/ASCQ 25h/00h; SAM-5, incorrect logical unit
// selection), some others, such as INQUIRY for a VPD page, with INVALID
// FIELD IN CDB. For a LUN the target reports, a failed REPORT LUNS or a
// cancelled ctx, LOGICAL UNIT NOT SUPPORTED gets the LUN named and other
// errors are returned as they are, nil included. The result wraps err
// (errors.Is and As see it).
func (tf *targetFlags) explainLUN(ctx context.Context, s *initiator.Session, err error) error {
	var se *initiator.SenseError
	if !tf.hasLUN || !errors.As(err, &se) || se.Key != sense.KeyIllegalRequest {
		return err
	}
	named := err
	if initiator.IsSense(err, sense.KeyIllegalRequest, 0x25, 0) {
		named = fmt.Errorf("--lun %d: %w", tf.lun, err)
	}
	if ctx.Err() != nil {
		return named
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	luns, rerr := s.ReportLUNs(rctx)
	if rerr != nil || slices.Contains(luns, initiator.LUN(tf.lun)) {
		return named
	}
	return fmt.Errorf("--lun %d: the target reports no such LUN, %s (REPORT LUNS): %w", tf.lun, lunList(luns), err)
}

// lunList names the LUNs of REPORT LUNS fields for a message: "only LUN
// 0", "only LUNs 0, 1, 3", the first 16 of more and how many there are,
// or "and no other".
func lunList(luns []uint64) string {
	const most = 16
	var b strings.Builder
	switch len(luns) {
	case 0:
		return "and no other"
	case 1:
		b.WriteString("only LUN ")
	default:
		b.WriteString("only LUNs ")
	}
	for i, l := range luns[:min(len(luns), most)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(initiator.LUNNumber(l)))
	}
	if len(luns) > most {
		fmt.Fprintf(&b, " ... (%d in all)", len(luns))
	}
	return b.String()
}
