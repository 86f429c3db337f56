package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gosrp/gosrp/internal/adminapi"
)

// topSample is one reading of srptd's counters.
type topSample struct {
	at       time.Time
	luns     []adminapi.LUN
	sessions []adminapi.Session
}

func (a *adminClient) sample(ctx context.Context) (topSample, error) {
	s := topSample{at: time.Now()}
	if _, err := a.call(ctx, "GET", adminapi.PathLUNs, nil, &s.luns); err != nil {
		return s, err
	}
	_, err := a.call(ctx, "GET", adminapi.PathSessions, nil, &s.sessions)
	return s, err
}

func newTargetTopCmd(a *adminClient) *cobra.Command {
	var interval time.Duration
	var count int
	c := &cobra.Command{
		Use:   "top",
		Short: "live view of srptd: per-LUN and per-channel IOPS, MiB/s, latency and queue depth, refreshed every --interval",
		Long: `Live view of srptd, from its admin socket: for each LUN and each
channel, the IOPS, read and write MiB/s and (for LUNs) the mean command
latency over the last interval, and the queue depth now. On a terminal the
screen is redrawn; elsewhere each refresh is printed after the last. Ends on
Ctrl-C, or after --count refreshes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: at least 100ms", interval)
			}
			if count < 0 {
				return fmt.Errorf("--count %d: 0 (until Ctrl-C) or more", count)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			w := cmd.OutOrStdout()
			redraw := false
			if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				redraw = true
			}
			prev, err := a.sample(ctx)
			if err != nil {
				return err
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for n := 0; count == 0 || n < count; n++ {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				cur, err := a.sample(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if redraw {
					fmt.Fprint(w, "\x1b[H\x1b[2J")
				} else if n > 0 {
					fmt.Fprintln(w)
				}
				writeTop(w, prev, cur)
				prev = cur
			}
			return nil
		},
	}
	c.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	c.Flags().IntVar(&count, "count", 0, "refreshes before exiting (0: until Ctrl-C)")
	return c
}

// rate is the per-second rate of a counter that went from a to b in d.
func rate(a, b uint64, d time.Duration) float64 {
	if b < a || d <= 0 {
		return 0 // reset (LUN re-added, channel re-logged in)
	}
	return float64(b-a) / d.Seconds()
}

// writeTop writes one refresh: the rates between prev and cur.
func writeTop(w io.Writer, prev, cur topSample) {
	d := cur.at.Sub(prev.at)
	fmt.Fprintf(w, "srptd  %s  interval %v  %d LUN(s)  %d channel(s)\n\n", cur.at.Format("15:04:05"), d.Round(time.Millisecond), len(cur.luns), len(cur.sessions))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LUN\tNAME\tIOPS\tREAD MiB/s\tWRITE MiB/s\tLATENCY µs\tQUEUE\tERRORS\t")
	before := map[uint64]adminapi.LUNCounters{}
	for _, l := range prev.luns {
		before[l.LUN] = l.Counters
	}
	for _, l := range cur.luns {
		p, c := before[l.LUN], l.Counters
		lat := "-"
		if c.Commands > p.Commands {
			// The interval's mean: the growth of the latency sum over the
			// growth of the command count.
			sum := c.AvgLatencyUs*float64(c.Commands) - p.AvgLatencyUs*float64(p.Commands)
			lat = fmt.Sprintf("%.0f", max(sum, 0)/float64(c.Commands-p.Commands))
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.1f\t%.1f\t%s\t%d\t%d\t\n", l.LUN, l.Name, rate(p.Commands, c.Commands, d),
			rate(p.ReadBytes, c.ReadBytes, d)/(1<<20), rate(p.WriteBytes, c.WriteBytes, d)/(1<<20), lat, c.InFlight, c.Errors)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PORT\tCHANNEL\tINITIATOR PORT ID\tIOPS\tREAD MiB/s\tWRITE MiB/s\tQUEUE\tREQ_LIM\t")
	type chKey struct {
		port string
		ch   uint64
	}
	chBefore := map[chKey]adminapi.Session{}
	for _, s := range prev.sessions {
		chBefore[chKey{s.Port, s.Channel}] = s
	}
	for _, s := range cur.sessions {
		p := chBefore[chKey{s.Port, s.Channel}]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.1f\t%.1f\t%d\t%d\t\n", s.Port, s.Channel, s.InitiatorPort, rate(p.Commands, s.Commands, d),
			rate(p.ReadBytes, s.ReadBytes, d)/(1<<20), rate(p.WriteBytes, s.WriteBytes, d)/(1<<20), s.Outstanding, s.ReqLim)
	}
	tw.Flush()
}
