// Command srpctl is gosrp's command-line tool: it decodes SRP information
// units, logs in to SRP targets (srptd, Linux LIO ib_srpt, SCST) as an
// initiator, moves data, attaches LUNs as files and benchmarks; `srpctl
// target` administers a running srptd through its admin socket.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:   "srpctl",
		Short: "SRP initiator and information unit decoder",
		Long: `SRP initiator and information unit decoder.

Every initiator command takes TARGET, the add_target string srptd prints on
its login_info line, for example:

  srpctl login id_ext=4e761e0b5d443097,ioc_guid=4e761e0b5d443097,dest=127.0.0.1:5555`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newDecodeCmd(),
		newLoginCmd(), newLUNsCmd(), newInquiryCmd(), newReadcapCmd(), newSCSICmd(), newReadCmd(), newWriteCmd(), newTMFCmd(), newBenchCmd(), newAttachCmd(),
		newTargetAdminCmd(),
	)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "srpctl:", err)
		os.Exit(1)
	}
}
