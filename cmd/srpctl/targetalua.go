package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gosrp/gosrp/internal/adminapi"
)

// newTargetALUACmd: `srpctl target alua` lists the target port groups and
// their asymmetric access states; `alua set GROUP STATE` changes one at run
// time (initiators get ASYMMETRIC ACCESS STATE CHANGED).
func newTargetALUACmd(a *adminClient) *cobra.Command {
	c := &cobra.Command{
		Use:   "alua",
		Short: "list the target port groups (ALUA) and their states",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []adminapi.PortGroup
			raw, err := a.call(cmd.Context(), "GET", adminapi.PathALUA, nil, &rows)
			if err != nil {
				return err
			}
			return a.show(cmd.OutOrStdout(), raw, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "GROUP\tSTATE\tPREF\tPORTS\t")
				for _, g := range rows {
					ports := make([]string, len(g.Ports))
					for i, p := range g.Ports {
						ports[i] = strconv.Itoa(int(p))
					}
					here := ""
					if g.Local {
						here = "(this srptd)"
					}
					fmt.Fprintf(w, "%d\t%s\t%v\t%s\t%s\n", g.Group, g.State, g.Preferred, strings.Join(ports, ","), here)
				}
			})
		},
	}
	set := &cobra.Command{
		Use:   "set GROUP STATE",
		Short: "set a group's state: active/optimized, active/non-optimized, standby, unavailable or transitioning",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := strconv.ParseUint(args[0], 10, 16); err != nil {
				return fmt.Errorf("%q is not a target port group ID (0..65535)", args[0])
			}
			_, err := a.call(cmd.Context(), "PUT", adminapi.PathALUA+"/"+args[0], adminapi.ALUAState{State: args[1]}, nil)
			return err
		},
	}
	c.AddCommand(set)
	return c
}
