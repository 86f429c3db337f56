package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gosrp/gosrp/scsi/sense"
	"github.com/gosrp/gosrp/srp"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/spf13/cobra"
)

func newLoginCmd() *cobra.Command {
	var tf targetFlags
	c := &cobra.Command{
		Use:   "login TARGET",
		Short: "log in to an SRP target, print the SRP_LOGIN_RSP facts and log out",
		RunE: func(cmd *cobra.Command, args []string) error {
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				o, li := s.Options(), s.Info()
				ipi, tpi := o.PortIDs()
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "target port ID     %x\n", tpi)
				fmt.Fprintf(w, "initiator port ID  %x\n", ipi)
				fmt.Fprintf(w, "channels           %d\n", o.ChCount)
				fmt.Fprintf(w, "req_lim            %d\n", li.ReqLimDelta)
				fmt.Fprintf(w, "can_queue          %d\n", li.CanQueue)
				fmt.Fprintf(w, "req_it_iu_len      %d\n", li.ReqITIULen)
				fmt.Fprintf(w, "max_it_iu_len      %d\n", li.MaxITIULen)
				fmt.Fprintf(w, "max_ti_iu_len      %d\n", li.MaxTIIULen)
				fmt.Fprintf(w, "buf_fmt            %#04x%s\n", li.BufFmt, bufFmtNames(li.BufFmt))
				fmt.Fprintf(w, "rsp_flags          %#02x (%s)\n", li.RspFlags, multichanResult(li.RspFlags))
				fmt.Fprintf(w, "immediate data     %v\n", li.ImmediateData)
				return nil
			})
		},
	}
	addTargetFlags(c, &tf, false)
	return c
}

func bufFmtNames(f uint16) string {
	var n []string
	if f&2 != 0 {
		n = append(n, "DIRECT")
	}
	if f&4 != 0 {
		n = append(n, "INDIRECT")
	}
	if len(n) == 0 {
		return ""
	}
	return " (" + strings.Join(n, "|") + ")"
}

func multichanResult(f uint8) string {
	s := [...]string{"no existing channels", "existing channels terminated", "existing channels maintained", "reserved"}[f&3]
	if f&0x80 != 0 {
		s += ", IMMED_SUPP"
	}
	return s
}

func newLUNsCmd() *cobra.Command {
	var tf targetFlags
	c := &cobra.Command{
		Use:   "luns TARGET",
		Short: "list the target's logical units (REPORT LUNS) with their INQUIRY identity",
		RunE: func(cmd *cobra.Command, args []string) error {
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				luns, err := s.ReportLUNs(ctx)
				if err != nil {
					return err
				}
				for _, l := range luns {
					desc := ""
					if b, err := s.Inquiry(ctx, l, false, 0, 96); err == nil {
						if d, err := initiator.ParseInquiry(b); err == nil {
							desc = fmt.Sprintf("%-8s %-16s %-4s type %d", d.Vendor, d.Product, d.Revision, d.DeviceType)
						}
					}
					if c, err := s.ReadCapacity16(ctx, l); err == nil {
						desc += fmt.Sprintf("  %d x %d bytes (%s)", c.Blocks(), c.BlockSize, humanBytes(c.Bytes()))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "lun %-4d %016x  %s\n", initiator.LUNNumber(l), l, desc)
				}
				return nil
			})
		},
	}
	addTargetFlags(c, &tf, false)
	return c
}

func humanBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

func newInquiryCmd() *cobra.Command {
	var tf targetFlags
	var vpd int
	var raw bool
	c := &cobra.Command{
		Use:   "inquiry TARGET",
		Short: "send INQUIRY (standard data, or a VPD page with --vpd)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if vpd > 0xff || (vpd < 0 && cmd.Flags().Changed("vpd")) {
				return fmt.Errorf("--vpd %d: a page code is 0..255 (0x00..0xff)", vpd)
			}
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				w := cmd.OutOrStdout()
				if vpd >= 0 {
					b, err := s.Inquiry(ctx, s.lun, true, uint8(vpd), 0xff00)
					if err != nil {
						return err
					}
					var bs uint32
					if vpd == 0xb0 {
						if c, err := s.ReadCapacity16(ctx, s.lun); err == nil {
							bs = c.BlockSize
						}
					}
					if err := decodeVPD(w, b, bs); err != nil {
						return err
					}
					if raw {
						fmt.Fprintf(w, "%d bytes:\n%s", len(b), hex.Dump(b))
					}
					return nil
				}
				b, err := s.Inquiry(ctx, s.lun, false, 0, 96)
				if err != nil {
					return err
				}
				d, err := initiator.ParseInquiry(b)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "vendor            %s\nproduct           %s\nrevision          %s\n", d.Vendor, d.Product, d.Revision)
				fmt.Fprintf(w, "peripheral type   %d (qualifier %d)\nversion           %d\nresponse format   %d\n", d.DeviceType, d.PeripheralQualifier, d.Version, d.ResponseFormat)
				fmt.Fprintf(w, "removable         %v\ncommand queueing  %v\nTPGS              %d\n", d.Removable, d.CmdQue, d.TPGS)
				if raw {
					fmt.Fprint(w, hex.Dump(b))
				}
				return nil
			})
		},
	}
	addTargetFlags(c, &tf, true)
	c.Flags().IntVar(&vpd, "vpd", -1, "VPD page code, decoded: 0x00 supported pages, 0x80 serial, 0x83 device identification, 0xb0 block limits, 0xb1 block device characteristics, 0xb2 logical block provisioning (others in hex)")
	c.Flags().BoolVar(&raw, "raw", false, "also dump the INQUIRY data (standard or VPD) in hex")
	return c
}

func newReadcapCmd() *cobra.Command {
	var tf targetFlags
	c := &cobra.Command{
		Use:   "readcap TARGET",
		Short: "send READ CAPACITY(16)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				c, err := s.ReadCapacity16(ctx, s.lun)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "last LBA          %d\nblock size        %d\nblocks            %d\ncapacity          %d bytes (%s)\n",
					c.LastLBA, c.BlockSize, c.Blocks(), c.Bytes(), humanBytes(c.Bytes()))
				fmt.Fprintf(w, "physical block    %d logical blocks\nthin provisioned  %v (LBPRZ %v)\nprotection        %v\n",
					1<<c.LogicalPerPhysicalExp, c.LBPME, c.LBPRZ, c.ProtectionEnabled)
				return nil
			})
		},
	}
	addTargetFlags(c, &tf, true)
	return c
}

// maxRawData bounds the data buffer of srpctl scsi, in bytes: 1 GiB, the
// largest max_data_len srptd can be configured with. The buffer is
// allocated before the command is sent; without a bound a mistyped --in
// ends srpctl with an out-of-memory crash.
const maxRawData = 1 << 30

func newSCSICmd() *cobra.Command {
	var tf targetFlags
	var outFile string
	var inLen int
	var binOut, keepUA bool
	c := &cobra.Command{
		Use:   "scsi TARGET CDB",
		Short: "send a raw CDB (hex, spaces allowed) like sg_raw; --out FILE sends data-out, --in N reads N bytes of data-in",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cdb, err := hex.DecodeString(strings.Join(strings.Fields(strings.ReplaceAll(args[1], ":", " ")), ""))
			if err != nil || len(cdb) < 6 || len(cdb) > 32 {
				return fmt.Errorf("CDB %q: want 6 to 32 bytes of hex", args[1])
			}
			if inLen < 0 || inLen > maxRawData {
				return fmt.Errorf("--in %d: want 0..%d bytes", inLen, maxRawData)
			}
			if outFile != "" && inLen > 0 {
				return errors.New("--out and --in together: bidirectional commands are not supported")
			}
			sc := &initiator.Command{CDB: cdb}
			if outFile != "" {
				if fi, err := os.Stat(outFile); err == nil && fi.Size() > maxRawData {
					return fmt.Errorf("--out %s: %d bytes, more than %d", outFile, fi.Size(), maxRawData)
				}
				data, err := os.ReadFile(outFile)
				if err != nil {
					return err
				}
				sc.DataOut = [][]byte{data}
			}
			var in []byte
			if inLen > 0 {
				in = make([]byte, inLen)
				sc.DataIn = [][]byte{in}
			}
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				sc.LUN = s.lun
				if !keepUA {
					// Consume pending unit attentions (power on, reset) first, as the
					// kernel's scan does before a user's command.
					_ = s.TestUnitReady(ctx, s.lun)
				}
				res, err := s.Execute(ctx, sc)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if binOut && res.Status == sense.StatusGood {
					_, err := w.Write(in[:res.DataInLen])
					return err
				}
				// A failed command's status and decoded sense are the
				// error res.Err returns, which main prints: here only
				// the status of a command that succeeded, and the raw
				// sense bytes.
				failed := res.Err()
				if failed == nil {
					fmt.Fprintf(w, "SCSI Status: %s\n", sense.StatusName(res.Status))
				}
				if len(res.Sense) > 0 {
					fmt.Fprintf(w, "Sense data (%d bytes):\n%s", len(res.Sense), hex.Dump(res.Sense))
				}
				switch {
				case inLen == 0:
				case failed != nil && srp.RspFlags(res.Flags)&(srp.DataInUnder|srp.DataInOver) == 0:
					// A failed command whose SRP_RSP reports no data-in
					// residual (as ib_srpt answers a command refused before
					// it ran) says nothing of the buffer: not a dump of
					// --in bytes the target never wrote.
					fmt.Fprintf(w, "No data-in reported (status %s, no residual)\n", sense.StatusName(res.Status))
				default:
					fmt.Fprintf(w, "Received %d bytes of data:\n%s", res.DataInLen, hex.Dump(in[:res.DataInLen]))
				}
				return failed
			})
		},
	}
	addTargetFlags(c, &tf, true)
	c.Flags().StringVar(&outFile, "out", "", "file whose contents are the data-out buffer")
	c.Flags().IntVar(&inLen, "in", 0, "data-in buffer length in bytes")
	c.Flags().BoolVar(&binOut, "binary", false, "write data-in to stdout as binary")
	c.Flags().BoolVar(&keepUA, "keep-ua", false, "do not consume pending unit attentions with TEST UNIT READY first")
	return c
}

func newTMFCmd() *cobra.Command {
	var tf targetFlags
	c := &cobra.Command{
		Use:   "tmf TARGET lun-reset|abort-task-set|clear-task-set|clear-aca",
		Short: "send a task management function to --lun: lun-reset, abort-task-set, clear-task-set or clear-aca",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var fn srp.TMF
			switch args[1] {
			case "lun-reset", "reset":
				fn = srp.TMFLUNReset
			case "abort-task-set":
				fn = srp.TMFAbortTaskSet
			case "clear-task-set":
				fn = srp.TMFClearTaskSet
			case "clear-aca":
				fn = srp.TMFClearACA
			case "abort", "abort-task":
				// ABORT TASK names a command by the tag its own channel gave
				// it; a one-shot srpctl has no command in flight to name.
				return errors.New("abort: ABORT TASK needs the tag of a command in flight on the same login, which a one-shot srpctl does not have; srpctl sends it itself for a command that outlives --cmd-timeout. To abort every task of this initiator on the LUN: abort-task-set")
			default:
				return fmt.Errorf("unknown task management function %q (lun-reset, abort-task-set, clear-task-set, clear-aca)", args[1])
			}
			return tf.withSession(cmd.Context(), args[0], func(ctx context.Context, s *conn) error {
				err := s.TaskManagement(ctx, fn, s.lun, 0)
				var te *initiator.TMFError
				if errors.As(err, &te) {
					// The target's answer is the error, printed once by main.
					return fmt.Errorf("%s lun %d: %s (%#02x)", fn.Name(), tf.lun, srp.TMFRspName(te.Response), te.Response)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s lun %d: %s\n", fn.Name(), tf.lun, srp.TMFRspName(srp.TMFRspComplete))
				return nil
			})
		},
	}
	addTargetFlags(c, &tf, true)
	return c
}
