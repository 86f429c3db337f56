// Command srpctl is gosrp's command-line tool: it decodes SRP information
// units, logs in to SRP targets (srptd, Linux LIO ib_srpt, SCST) as an
// initiator, moves data, attaches LUNs as files, benchmarks, and administers a
// running srptd.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "srpctl",
		Short:         "SRP initiator, decoder and srptd admin tool",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newDecodeCmd(),
		newLoginCmd(), newLUNsCmd(), newInquiryCmd(), newReadcapCmd(), newSCSICmd(), newReadCmd(), newWriteCmd(), newTMFCmd(), newBenchCmd(), newAttachCmd(),
	)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "srpctl:", err)
		os.Exit(1)
	}
}
