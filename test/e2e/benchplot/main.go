// Command benchplot draws PNG charts from the JSON that
// test/e2e/sidebyside writes (scripts/bench.sh --plot DIR runs it):
//
//   - qd-sweep.png: IOPS of 4 KiB random reads against the queue depth,
//   - bs-sweep.png: MiB/s of QD32 sequential reads against the block size,
//
// one line per side (means over the repetitions of each point).
//
// Usage: benchplot -out DIR RESULTS.json
package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// run is the part of one job run in the results JSON that the charts use.
type run struct {
	Sweep string  `json:"sweep"` // "qd", "bs" or "" (main jobs, not drawn)
	BS    int     `json:"bs"`    // bytes
	QD    int     `json:"iodepth"`
	Side  string  `json:"side"`
	Chans int     `json:"channels"` // RDMA channels or NBD connections
	IOPS  float64 `json:"iops"`
	MiBps float64 `json:"mib_per_s"`
}

type results struct {
	Started string `json:"started"`
	Machine struct {
		CPUs int    `json:"cpus"`
		CPU  string `json:"cpu_model"`
	} `json:"machine"`
	Runs []run `json:"runs"`
}

func main() {
	out := flag.String("out", ".", "directory for the PNG files (created if missing)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchplot -out DIR RESULTS.json\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	files, err := drawAll(flag.Arg(0), *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println("chart:", f)
	}
}

// draw2 reads the results and writes both charts into dir.
func drawAll(in, dir string) ([]string, error) {
	b, err := os.ReadFile(in)
	if err != nil {
		return nil, err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %v", in, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	charts := []chart{
		{
			file: "qd-sweep.png", sweep: "qd", title: "4 KiB random read", xLabel: "queue depth (I/Os in flight)", yLabel: "IOPS",
			x: func(r run) int { return r.QD }, y: func(r run) float64 { return r.IOPS }, xName: strconv.Itoa,
		},
		{
			file: "bs-sweep.png", sweep: "bs", title: "Sequential read, queue depth 32", xLabel: "block size", yLabel: "MiB/s",
			x: func(r run) int { return r.BS }, y: func(r run) float64 { return r.MiBps }, xName: sizeName,
		},
	}
	var files []string
	for _, c := range charts {
		f := filepath.Join(dir, c.file)
		if err := c.draw(&res, f); err != nil {
			return files, fmt.Errorf("%s: %w", c.file, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// chart is one sweep drawn as one line per side over a log2 x axis.
type chart struct {
	file, sweep, title, xLabel, yLabel string
	x                                  func(run) int
	y                                  func(run) float64
	xName                              func(int) string
}

// point is the mean of y over the runs of one side at one x.
type point struct {
	x    int
	sum  float64
	runs int
}

// series groups the sweep's runs by side (in order of first appearance)
// and x (ascending), averaging the repetitions.
func (c chart) series(runs []run) (sides []string, pts map[string][]point) {
	pts = map[string][]point{}
	for _, r := range runs {
		if r.Sweep != c.sweep {
			continue
		}
		if _, ok := pts[r.Side]; !ok {
			sides = append(sides, r.Side)
		}
		ps := pts[r.Side]
		x := c.x(r)
		i := slices.IndexFunc(ps, func(p point) bool { return p.x == x })
		if i < 0 {
			ps = append(ps, point{x: x})
			i = len(ps) - 1
		}
		ps[i].sum += c.y(r)
		ps[i].runs++
		pts[r.Side] = ps
	}
	for _, ps := range pts {
		slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.x, b.x) })
	}
	return sides, pts
}

// palette: gosrp first, the peer second (colour-blind safe pair).
var palette = []color.Color{
	color.RGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff},
	color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff},
	color.RGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff},
}

func (c chart) draw(res *results, file string) error {
	sides, pts := c.series(res.Runs)
	if len(sides) == 0 {
		return fmt.Errorf("no %s sweep in the results: run scripts/bench.sh with --plot", c.sweep)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s against %s\n%s, %d CPUs, %.10s, mean of %d run(s) per point", c.title, c.yLabel, c.xLabel, res.Machine.CPU, res.Machine.CPUs, res.Started, pts[sides[0]][0].runs)
	p.X.Label.Text = c.xLabel
	p.Y.Label.Text = c.yLabel
	p.X.Scale = plot.LogScale{}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	var ticks []plot.Tick
	maxY := 0.0
	for i, side := range sides {
		xys := make(plotter.XYs, len(pts[side]))
		for k, pt := range pts[side] {
			xys[k] = plotter.XY{X: float64(pt.x), Y: pt.sum / float64(pt.runs)}
			maxY = max(maxY, xys[k].Y)
			if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == float64(pt.x) }) {
				ticks = append(ticks, plot.Tick{Value: float64(pt.x), Label: c.xName(pt.x)})
			}
		}
		line, marks, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		col := palette[i%len(palette)]
		line.Color, line.Width = col, vg.Points(2)
		marks.Color, marks.Shape, marks.Radius = col, draw.CircleGlyph{}, vg.Points(3)
		p.Add(line, marks)
		p.Legend.Add(legend(side, res.Runs), line, marks)
	}
	if len(ticks) == 0 {
		return errors.New("no points")
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Max = 1.3 * maxY // room for the legend above the lines
	p.Y.Tick.Marker = plainTicks{}
	return p.Save(18*vg.Centimeter, 11*vg.Centimeter, file)
}

// legend names a side with what it runs and its connection count.
func legend(side string, runs []run) string {
	n := 0
	if i := slices.IndexFunc(runs, func(r run) bool { return r.Side == side }); i >= 0 {
		n = runs[i].Chans
	}
	switch side {
	case "gosrp":
		return fmt.Sprintf("gosrp: srpctl bench → srptd, pure-Go iWARP, %d RDMA channel(s)", n)
	case "nbdkit":
		return fmt.Sprintf("nbdkit memory ← fio nbd engine, TCP, %d connection(s)", n)
	}
	return side
}

// sizeName writes a byte count as 4k, 1m.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "m"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "k"
	}
	return strconv.Itoa(n)
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("25000", not "25000.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
