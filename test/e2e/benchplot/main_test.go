package main

import (
	"encoding/json"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSeries(t *testing.T) {
	runs := []run{
		{Sweep: "qd", QD: 8, Side: "gosrp", IOPS: 100},
		{Sweep: "qd", QD: 8, Side: "nbdkit", IOPS: 50},
		{Sweep: "qd", QD: 1, Side: "gosrp", IOPS: 10},
		{Sweep: "", QD: 1, Side: "gosrp", IOPS: 9999}, // a main job: not part of the sweep
		{Sweep: "bs", QD: 1, Side: "gosrp", IOPS: 9999},
		{Sweep: "qd", QD: 8, Side: "gosrp", IOPS: 300},
	}
	c := chart{sweep: "qd", x: func(r run) int { return r.QD }, y: func(r run) float64 { return r.IOPS }}
	sides, pts := c.series(runs)
	if len(sides) != 2 || sides[0] != "gosrp" || sides[1] != "nbdkit" {
		t.Fatalf("sides %v", sides)
	}
	g := pts["gosrp"]
	if len(g) != 2 || g[0].x != 1 || g[0].sum/float64(g[0].runs) != 10 || g[1].x != 8 || g[1].runs != 2 || g[1].sum/float64(g[1].runs) != 200 {
		t.Errorf("gosrp points %+v", g)
	}
	if n := pts["nbdkit"]; len(n) != 1 || n[0].sum != 50 {
		t.Errorf("nbdkit points %+v", n)
	}
}

func TestDrawAll(t *testing.T) {
	dir := t.TempDir()
	res := map[string]any{"started": "2026-12-04T17:00:00Z", "machine": map[string]any{"cpus": 2, "cpu_model": "test CPU"}}
	var runs []map[string]any
	for _, side := range []string{"gosrp", "nbdkit"} {
		for i, qd := range []int{1, 2, 4, 8, 16, 32, 64} {
			runs = append(runs, map[string]any{"sweep": "qd", "iodepth": qd, "bs": 4096, "side": side, "channels": 1, "iops": 1000 * (i + 1)})
		}
		for i, bs := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
			runs = append(runs, map[string]any{"sweep": "bs", "iodepth": 32, "bs": bs, "side": side, "channels": 1, "mib_per_s": 100 * (i + 1)})
		}
	}
	res["runs"] = runs
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "results.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := drawAll(in, filepath.Join(dir, "charts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// 18 x 11 cm at gonum's default 96 dpi: 680.3 x 415.7, rounded.
		if s := img.Bounds().Size(); s.X != 680 || s.Y != 416 {
			t.Errorf("%s: %v pixels, want 680x416", f, s)
		}
		// Both sides' lines are drawn in their colours.
		seen := map[color.RGBA]bool{}
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				r, g, b, a := img.At(x, y).RGBA()
				seen[color.RGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: uint8(a >> 8)}] = true
			}
		}
		for i := range 2 {
			if c := color.RGBAModel.Convert(palette[i]).(color.RGBA); !seen[c] {
				t.Errorf("%s: no pixel of side %d's colour %v", f, i, c)
			}
		}
	}

	// Results of a run without sweeps: a clear error.
	if err := os.WriteFile(in, []byte(`{"runs":[{"sweep":"","side":"gosrp","iops":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := drawAll(in, filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "--plot") {
		t.Errorf("no sweeps: err %v", err)
	}
}
