package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/spf13/cobra"
)

// The admin socket srpctl target talks to when --socket is not given:
// $SRPTD_SOCKET, else the first that exists of ./srptd-data/srptd.sock
// (srptd's default data directory) and /run/srptd.sock.
const (
	defaultDataDirSocket = "srptd-data/srptd.sock"
	systemSocket         = "/run/srptd.sock"
)

func defaultAdminSocket() string {
	if s := os.Getenv("SRPTD_SOCKET"); s != "" {
		return s
	}
	for _, p := range []string{defaultDataDirSocket, systemSocket} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return p
		}
	}
	return defaultDataDirSocket
}

// adminClient speaks srptd's admin API (HTTP over a unix socket).
type adminClient struct {
	socket  string
	timeout time.Duration
	jsonOut bool
}

// apiError is an error answer of the admin API.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string { return e.Msg }

// call sends method path with body (JSON-encoded when not nil); a 2xx
// answer is decoded into out (when not nil) and also returned raw.
func (a *adminClient) call(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.socket)
	}}}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://srptd"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("srptd admin socket %s: %w (is srptd running? --socket or SRPTD_SOCKET name another)", a.socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e adminapi.Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, &apiError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("srptd answered %s %s with %q: %w", method, path, b, err)
		}
	}
	return b, nil
}

// show prints raw JSON with --json, else calls table.
func (a *adminClient) show(w io.Writer, raw []byte, table func(*tabwriter.Writer)) error {
	if a.jsonOut {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// helpOnly is the action of a command that only groups subcommands: alone
// it prints its help; with an argument (a mistyped subcommand) it fails,
// so scripts see a nonzero exit status.
func helpOnly(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// newTargetAdminCmd is `srpctl target`: administration of a running srptd
// through its admin socket.
func newTargetAdminCmd() *cobra.Command {
	a := &adminClient{}
	c := &cobra.Command{
		Use:   "target",
		Short: "administer a running srptd through its admin socket",
		Long: `Administer a running srptd through its admin socket (HTTP over a unix
socket, root or srptd's own user only).

The socket is --socket, else $SRPTD_SOCKET, else ./srptd-data/srptd.sock
(srptd's default data directory, relative to the working directory) if it
exists, else /run/srptd.sock. srptd serves DATA_DIR/srptd.sock unless its
configuration names admin.socket.`,
		Args: cobra.NoArgs,
		RunE: helpOnly,
	}
	c.PersistentFlags().StringVar(&a.socket, "socket", "", "srptd admin socket `path` (default: $SRPTD_SOCKET, ./"+defaultDataDirSocket+" or "+systemSocket+")")
	c.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second, "request timeout")
	c.PersistentFlags().BoolVar(&a.jsonOut, "json", false, "print the API's JSON instead of a table")
	c.PersistentPreRunE = func(*cobra.Command, []string) error {
		if a.timeout <= 0 {
			return fmt.Errorf("--timeout %v: must be positive", a.timeout)
		}
		if a.socket == "" {
			a.socket = defaultAdminSocket()
		}
		return nil
	}
	c.AddCommand(
		newTargetLoginInfoCmd(a), newTargetSessionsCmd(a), newTargetLogoutCmd(a),
		newTargetLUNsCmd(a), newTargetLUNCmd(a), newTargetBackstoresCmd(a), newTargetACLCmd(a), newTargetSaveCmd(a), newTargetALUACmd(a), newTargetTopCmd(a),
	)
	return c
}

func newTargetLoginInfoCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "login-info",
		Short: "print the login_info lines (add_target strings) srptd printed at start",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lines []string
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathLoginInfo, nil, &lines)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.show(cmd.OutOrStdout(), raw, nil)
			}
			for _, l := range lines {
				fmt.Fprintln(cmd.OutOrStdout(), "login_info:", l)
			}
			return nil
		},
	}
}

func newTargetSessionsCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "sessions",
		Short: "list the channels logged in, with their credits and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []adminapi.Session
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathSessions, nil, &rows)
			if err != nil {
				return err
			}
			return a.show(cmd.OutOrStdout(), raw, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "PORT\tCHANNEL\tINITIATOR PORT ID\tREMOTE\tSTATE\tREQ_LIM\tQUEUED\tCOMMANDS\tREAD\tWRITTEN\tCHECK COND\tERRORS")
				for _, s := range rows {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\n", s.Port, s.Channel, s.InitiatorPort, s.Remote, s.State,
						s.ReqLim, s.Outstanding, s.Commands, humanBytes(s.ReadBytes), humanBytes(s.WriteBytes), s.CheckConditions, s.Errors)
				}
			})
		},
	}
}

func newTargetLogoutCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "logout NAME",
		Short: "log out (SRP_T_LOGOUT) every channel of an initiator port ID (32 hex digits), or one channel by number",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.call(cmd.Context(), "DELETE", adminapi.PathSessions+"/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged out %s (SRP_T_LOGOUT)\n", args[0])
			return nil
		},
	}
}

func newTargetLUNsCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "luns",
		Short: "list the logical units, their backstores and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []adminapi.LUN
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathLUNs, nil, &rows)
			if err != nil {
				return err
			}
			return a.show(cmd.OutOrStdout(), raw, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "LUN\tNAME\tBACKSTORE\tSIZE\tBLOCK\tMODE\tSERIAL\tCOMMANDS\tREAD\tWRITTEN\tERRORS\tAVG LATENCY\tPATH")
				for _, l := range rows {
					mode := "rw"
					if l.ReadOnly {
						mode = "ro"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%.0fµs\t%s\n", l.LUN, l.Name, l.Backstore, humanBytes(uint64(l.Size)), l.BlockSize, mode,
						l.Serial, l.Counters.Commands, humanBytes(l.Counters.ReadBytes), humanBytes(l.Counters.WriteBytes), l.Counters.Errors, l.Counters.AvgLatencyUs, l.Path)
				}
			})
		},
	}
}

func newTargetBackstoresCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "backstores",
		Short: "list the backstores (one per LUN): type, path, size, space allocated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []adminapi.Backstore
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathBackstores, nil, &rows)
			if err != nil {
				return err
			}
			return a.show(cmd.OutOrStdout(), raw, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "LUN\tNAME\tTYPE\tSIZE\tALLOCATED\tMODE\tPATH")
				for _, b := range rows {
					alloc := "-"
					if b.Allocated != nil {
						alloc = humanBytes(uint64(*b.Allocated))
					}
					mode := "rw"
					if b.ReadOnly {
						mode = "ro"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", b.LUN, b.Name, b.Type, humanBytes(uint64(b.Size)), alloc, mode, b.Path)
				}
			})
		},
	}
}

func newTargetLUNCmd(a *adminClient) *cobra.Command {
	c := &cobra.Command{
		Use:   "lun",
		Short: "add or remove a logical unit at run time",
		Args:  cobra.NoArgs,
		RunE:  helpOnly,
	}
	var (
		lun                   int
		backstore, path, size string
		name, serial, wwn     string
		pool, image, cephConf string
		blockSize             int
		readOnly, writeCache  bool
	)
	add := &cobra.Command{
		Use:   "add",
		Short: "attach a logical unit (initiators get REPORTED LUNS DATA HAS CHANGED)",
		Long: `Attach a logical unit to the running srptd. Initiators logged in get a
REPORTED LUNS DATA HAS CHANGED unit attention. A file backstore is created
(sparse) when --size is given; without --path it is lun<N>.img in srptd's
data directory. A relative --path is made absolute here. ` + "`srpctl target save`" + ` keeps
the change across restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lun < 0 || lun > 16383 {
				return fmt.Errorf("--lun %d: a LUN number is 0..16383", lun)
			}
			p := path
			if p != "" && !filepath.IsAbs(p) {
				abs, err := filepath.Abs(p)
				if err != nil {
					return err
				}
				p = abs
			}
			if backstore == "" {
				backstore = "file"
			}
			if cephConf != "" && !filepath.IsAbs(cephConf) {
				if abs, err := filepath.Abs(cephConf); err == nil {
					cephConf = abs
				}
			}
			var sz adminapi.Size
			if size != "" {
				// Parsed here, so that the flag is named; srptd gets bytes.
				b, err := adminapi.ParseSize(size)
				if err != nil {
					return fmt.Errorf("--size: %w", err)
				}
				sz = adminapi.Size(strconv.FormatInt(b, 10))
			}
			n := uint64(lun)
			body := adminapi.NewLUN{
				LUN: &n, Backstore: backstore, Path: p, Size: sz, Name: name, Serial: serial, WWN: wwn,
				Pool: pool, Image: image, CephConf: cephConf, BlockSize: blockSize, ReadOnly: readOnly, WriteCache: writeCache,
			}
			if _, err := a.call(cmd.Context(), "POST", adminapi.PathLUNs, body, nil); err != nil {
				return err
			}
			var luns []adminapi.LUN
			if _, err := a.call(cmd.Context(), "GET", adminapi.PathLUNs, nil, &luns); err != nil {
				return err
			}
			for _, l := range luns {
				if l.LUN == n {
					where := l.Backstore
					if l.Path != "" {
						where += " " + l.Path
					}
					fmt.Fprintf(cmd.OutOrStdout(), "added LUN %d: %s, %s, %d-byte blocks, serial %s\n", n, where, humanBytes(uint64(l.Size)), l.BlockSize, l.Serial)
				}
			}
			return nil
		},
	}
	f := add.Flags()
	f.IntVarP(&lun, "lun", "l", -1, "LUN number, 0..16383 (required)")
	f.StringVar(&backstore, "backstore", "", "ram, file, block or rbd (default file)")
	f.StringVar(&pool, "pool", "", "rbd: the Ceph pool")
	f.StringVar(&image, "image", "", "rbd: the image (created with --size when missing)")
	f.StringVar(&cephConf, "ceph-conf", "", "rbd: ceph.conf path (default: librados' search)")
	f.StringVar(&path, "path", "", "file or block device (file default: lun<N>.img in the data directory)")
	f.StringVar(&size, "size", "", "capacity (ram: required, at most the machine's memory; file: creates or resizes): "+adminapi.SizeSyntax)
	f.IntVar(&blockSize, "block-size", 0, "logical block size: 512, 1024, 2048 or 4096 (default 512, block devices: theirs)")
	f.BoolVar(&readOnly, "read-only", false, "writes fail with DATA PROTECT")
	f.BoolVar(&writeCache, "write-cache", false, "initial WCE bit")
	f.StringVar(&name, "name", "", "name in logs and metrics")
	f.StringVar(&serial, "serial", "", "unit serial number (default: generated and kept in the data directory)")
	f.StringVar(&wwn, "wwn", "", "NAA 6 designator, 32 hex digits (default: derived from the serial)")
	_ = add.MarkFlagRequired("lun")
	remove := &cobra.Command{
		Use:   "remove LUN",
		Short: "detach a logical unit and close its backstore (a file, device or RBD image keeps its data; a RAM backstore's is freed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || n > 16383 {
				return fmt.Errorf("%q is not a LUN number 0..16383", args[0])
			}
			// The backstore's kind, for the message: a RAM LUN's data
			// goes with it.
			ram := false
			var luns []adminapi.LUN
			if _, err := a.call(cmd.Context(), "GET", adminapi.PathLUNs, nil, &luns); err == nil {
				for _, l := range luns {
					ram = ram || l.LUN == n && l.Backstore == "ram"
				}
			}
			if _, err := a.call(cmd.Context(), "DELETE", adminapi.PathLUNs+"/"+args[0], nil, nil); err != nil {
				return err
			}
			if ram {
				fmt.Fprintf(cmd.OutOrStdout(), "removed LUN %d (RAM backstore freed; its data is gone)\n", n)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "removed LUN %d (backstore flushed and closed; its data stays)\n", n)
			}
			return nil
		},
	}
	c.AddCommand(add, remove)
	return c
}

func newTargetACLCmd(a *adminClient) *cobra.Command {
	c := &cobra.Command{
		Use:   "acl",
		Short: "list, add or remove the initiators admitted",
		Args:  cobra.NoArgs,
		RunE:  helpOnly,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "list the ACLs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []adminapi.ACL
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathACLs, nil, &rows)
			if err != nil {
				return err
			}
			return a.show(cmd.OutOrStdout(), raw, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "INITIATOR\tLUNS (initiator=target)\tREAD-ONLY")
				for _, r := range rows {
					m := "all"
					if len(r.LUNs) > 0 {
						var keys []int
						for k := range r.LUNs {
							n, _ := strconv.Atoi(k)
							keys = append(keys, n)
						}
						slices.Sort(keys)
						var parts []string
						for _, k := range keys {
							parts = append(parts, fmt.Sprintf("%d=%d", k, r.LUNs[strconv.Itoa(k)]))
						}
						m = strings.Join(parts, ",")
					}
					ro := "-"
					if len(r.ReadOnly) > 0 {
						var parts []string
						for _, n := range r.ReadOnly {
							parts = append(parts, strconv.FormatUint(n, 10))
						}
						ro = strings.Join(parts, ",")
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", r.Initiator, m, ro)
				}
			})
		},
	}
	var maps, readOnly string
	add := &cobra.Command{
		Use:   "add INITIATOR",
		Short: "admit an initiator: a port GUID xxxx:xxxx:xxxx:xxxx, an initiator port ID in hex, or an IP address",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := adminapi.ACL{Initiator: args[0]}
			if maps != "" {
				m := map[string]uint64{}
				for _, kv := range strings.Split(maps, ",") {
					k, v, ok := strings.Cut(kv, "=")
					in, err1 := strconv.ParseUint(strings.TrimSpace(k), 10, 64)
					tg, err2 := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					if !ok || err1 != nil || err2 != nil || in > 16383 || tg > 16383 {
						return fmt.Errorf("--map %q: want INITIATOR_LUN=TARGET_LUN pairs, e.g. 0=3,1=4", kv)
					}
					if _, dup := m[strconv.FormatUint(in, 10)]; dup {
						return fmt.Errorf("--map %q: initiator LUN %d is mapped twice", maps, in)
					}
					m[strconv.FormatUint(in, 10)] = tg
				}
				body.LUNs = m
			}
			if readOnly != "" {
				var ro []uint64
				for _, f := range strings.Split(readOnly, ",") {
					n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
					if err != nil || n > 16383 {
						return fmt.Errorf("--read-only %q: want LUN numbers 0..16383, e.g. 0,2", f)
					}
					ro = append(ro, n)
				}
				body.ReadOnly = ro
			}
			var added adminapi.ACLAdded
			if _, err := a.call(cmd.Context(), "POST", adminapi.PathACLs, body, &added); err != nil {
				return err
			}
			what := "every LUN"
			if maps != "" {
				what = "LUNs " + maps
			}
			if readOnly != "" {
				what += ", read-only " + readOnly
			}
			fmt.Fprintf(cmd.OutOrStdout(), "admitted %s: %s\n", args[0], what)
			if added.DemoMode {
				fmt.Fprintln(cmd.OutOrStdout(), demoModeNote)
			}
			return nil
		},
	}
	add.Flags().StringVar(&maps, "map", "", "LUN mapping INITIATOR_LUN=TARGET_LUN,... (default: every LUN under its own number)")
	add.Flags().StringVar(&readOnly, "read-only", "", "write-protect these LUNs (numbers the initiator sees), e.g. 0,2")
	remove := &cobra.Command{
		Use:   "remove INITIATOR",
		Short: "remove an initiator's ACL (its channels get SRP_T_LOGOUT unless another ACL admits them alike)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.call(cmd.Context(), "DELETE", adminapi.PathACLs+"/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed the ACL of %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(list, add, remove)
	return c
}

// demoModeNote follows an ACL added while srptd is in demo mode.
const demoModeNote = `note: srptd is in demo mode, which admits every initiator to every LUN:
this ACL takes effect only once demo mode is off (demo_mode = false in the
configuration's [target], or srptd --demo=false; srpctl target save first
keeps the ACL)`

func newTargetSaveCmd(a *adminClient) *cobra.Command {
	return &cobra.Command{
		Use:   "save",
		Short: "write the running configuration to srptd's configuration file (atomically)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r adminapi.Saved
			if _, err := a.call(cmd.Context(), "POST", adminapi.PathSave, nil, &r); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "saved", r.Path)
			if r.Kept != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was written by hand and is left as it was: compare the two and move %s over it to keep the changes across restarts\n", r.Kept, r.Path)
			}
			return nil
		},
	}
}
