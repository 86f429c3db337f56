// Command srpctl is gosrp's command-line tool: it decodes SRP information
// units, logs in to SRP targets (srptd, Linux LIO ib_srpt, SCST) as an
// initiator, moves data, attaches LUNs as files and benchmarks; `srpctl
// target` administers a running srptd through its admin socket.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/gosrp/gosrp/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes srpctl with args and returns its exit status. An error is
// printed here, once, to stderr: cobra prints none (SilenceErrors) and the
// commands return theirs rather than print them.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(stderr, "srpctl:", err)
		return 1
	}
	return 0
}

// newRootCmd defines srpctl's command line.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "srpctl",
		Short: "SRP initiator and information unit decoder",
		Long: `SRP initiator and information unit decoder.

Every initiator command takes TARGET, the add_target string srptd prints on
its login_info line, for example:

  srpctl login id_ext=4e761e0b5d443097,ioc_guid=4e761e0b5d443097,dest=127.0.0.1:5555`,
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("srpctl {{.Version}}\n")
	root.AddCommand(
		newDecodeCmd(),
		newLoginCmd(), newLUNsCmd(), newInquiryCmd(), newReadcapCmd(), newSCSICmd(), newReadCmd(), newWriteCmd(), newTMFCmd(), newBenchCmd(), newAttachCmd(), newNBDCmd(),
		newTargetAdminCmd(),
		newManCmd(),
	)
	return root
}

// newManCmd writes the manual pages, generated from the command
// definitions: srpctl(8) and one page per subcommand (srpctl-login(8),
// srpctl-target-lun-add(8), ...).
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "write the srpctl(8) manual pages into DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			return doc.GenManTree(root, &doc.GenManHeader{Title: "SRPCTL", Section: "8", Source: "gosrp " + buildinfo.Read().Version, Manual: "gosrp"}, args[0])
		},
	}
}
