package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// A series is one implementation's points in a panel: medians with their
// confidence intervals.
type series struct {
	name      string
	x, y      []float64
	lo, hi    []float64 // confidence interval of y; nil for none
	steps     bool      // a CDF: draw as a staircase, no glyphs
	sampleLen int       // for a CDF, the number of samples, shown in the legend
}

// A panel is one plot of a figure.
type panel struct {
	title, xlabel, ylabel string
	logX, logY            bool
	xticks                []float64 // numeric x ticks to label exactly; nil for automatic
	nominal               []string  // category names, for a categorical x at 0, 1, ...
	series                []series
}

// A figure is panels drawn side by side into one SVG file.
type figure struct {
	file   string // base name, e.g. "latency-n.svg"
	title  string
	source string // the run the data came from, printed under the title
	panels []panel
	cols   int
}

// Colours, fixed per implementation so that every figure reads alike.
var palette = map[string]color.Color{
	"redlock":   color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff},
	"redsync":   color.RGBA{R: 0xd9, G: 0x5f, B: 0x02, A: 0xff},
	"floor":     color.RGBA{R: 0x70, G: 0x70, B: 0x70, A: 0xff},
	"redislock": color.RGBA{R: 0x1b, G: 0x9e, B: 0x77, A: 0xff},
	"fenced":    color.RGBA{R: 0x75, G: 0x70, B: 0xb3, A: 0xff},
}

var spare = []color.Color{
	color.RGBA{R: 0xe7, G: 0x29, B: 0x8a, A: 0xff},
	color.RGBA{R: 0x66, G: 0xa6, B: 0x1e, A: 0xff},
	color.RGBA{R: 0xa6, G: 0x76, B: 0x1d, A: 0xff},
}

func colour(name string, i int) color.Color {
	if c, ok := palette[name]; ok {
		return c
	}
	return spare[i%len(spare)]
}

// order puts the implementations in a fixed order: this library first.
func order(names []string) []string {
	rank := map[string]int{"redlock": 0, "fenced": 1, "redsync": 2, "redislock": 3, "floor": 4}
	sort.Slice(names, func(i, j int) bool {
		ri, oki := rank[names[i]]
		rj, okj := rank[names[j]]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return names[i] < names[j]
	})
	return names
}

type errPoints struct {
	s *series
	// dx shifts the points sideways, so that series at the same category
	// do not hide each other.
	dx float64
}

func (e errPoints) Len() int                    { return len(e.s.x) }
func (e errPoints) XY(i int) (float64, float64) { return e.s.x[i] + e.dx, e.s.y[i] }
func (e errPoints) YError(i int) (float64, float64) {
	return e.s.y[i] - e.s.lo[i], e.s.hi[i] - e.s.y[i]
}

// plotPanel makes one gonum plot of p.
func plotPanel(p panel) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.title
	pl.X.Label.Text = p.xlabel
	pl.Y.Label.Text = p.ylabel
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Add(plotter.NewGrid())
	if p.logY {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = decades{}
	}
	if p.logX {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = decades{}
	}
	if p.xticks != nil {
		var ts plot.ConstantTicks
		for _, x := range p.xticks {
			ts = append(ts, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)})
		}
		pl.X.Tick.Marker = ts
	}
	if p.nominal != nil {
		pl.NominalX(p.nominal...)
		pl.X.Min, pl.X.Max = -0.5, float64(len(p.nominal))-0.5
	}
	n := len(p.series)
	for i := range p.series {
		s := &p.series[i]
		c := colour(s.name, i)
		if s.steps {
			xy := make(plotter.XYs, len(s.x))
			for j := range s.x {
				xy[j] = plotter.XY{X: s.x[j], Y: s.y[j]}
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", p.title, s.name, err)
			}
			l.StepStyle = plotter.PostStep
			l.Color, l.Width = c, vg.Points(1.5)
			pl.Add(l)
			pl.Legend.Add(fmt.Sprintf("%s (n=%d, p50 %s ms, p99 %s ms)", s.name, s.sampleLen,
				short(quantile(s.x, 0.5)), short(quantile(s.x, 0.99))), l)
			continue
		}
		pts := errPoints{s: s}
		if p.nominal != nil && n > 1 {
			pts.dx = (float64(i) - float64(n-1)/2) * 0.12
		}
		var line *plotter.Line
		var scatter *plotter.Scatter
		var err error
		if p.nominal == nil {
			line, scatter, err = plotter.NewLinePoints(pts)
		} else {
			scatter, err = plotter.NewScatter(pts)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", p.title, s.name, err)
		}
		scatter.Color = c
		scatter.Shape = draw.CircleGlyph{}
		scatter.Radius = vg.Points(2.5)
		if line != nil {
			line.Color, line.Width = c, vg.Points(1.2)
			pl.Add(line)
		}
		pl.Add(scatter)
		if s.lo != nil {
			eb, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", p.title, s.name, err)
			}
			eb.Color = c
			eb.CapWidth = vg.Points(4)
			pl.Add(eb)
		}
		pl.Legend.Add(s.name, scatter)
	}
	// Headroom above the data for the legend, which sits top left.
	switch {
	case len(p.series) > 0 && p.series[0].steps: // a CDF
		pl.Y.Min, pl.Y.Max = 0, 1.35
		pl.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"},
			{Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}}
	case p.logY:
		pl.Y.Max *= 12
	default:
		pl.Y.Min = math.Min(pl.Y.Min, 0)
		pl.Y.Max += 0.35 * (pl.Y.Max - pl.Y.Min)
	}
	return pl, nil
}

// decades marks the powers of ten, labelled as plain numbers (100, not
// 1e+02), with minor marks between them.
type decades struct{}

func (decades) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 || hi <= lo {
		return nil
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		d := math.Pow(10, e)
		for m := 1.0; m < 10; m++ {
			v := m * d
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// Panel size and the space the figure's title takes.
const (
	panelW = 4 * vg.Inch
	panelH = 3 * vg.Inch
	headH  = 0.7 * vg.Inch
)

// render draws f as an SVG document.
func render(f figure, w io.Writer) error {
	cols := f.cols
	if cols <= 0 || cols > len(f.panels) {
		cols = len(f.panels)
	}
	rows := (len(f.panels) + cols - 1) / cols
	width := vg.Length(cols) * panelW
	if cols == 1 {
		width = 1.5 * panelW // room for the title
	}
	height := vg.Length(rows)*panelH + headH
	img := vgsvg.NewWith(vgsvg.UseWH(width, height))
	dc := draw.New(img)

	// A white page, then the title and the run above the panels.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	ts := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 13),
		XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(ts, vg.Point{X: width / 2, Y: height - vg.Points(6)}, f.title)
	ts.Font, ts.Color = font.From(plot.DefaultFont, 9), color.Gray{Y: 0x50}
	dc.FillText(ts, vg.Point{X: width / 2, Y: height - vg.Points(24)}, f.source)

	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Max: vg.Point{X: width, Y: height - headH}}}
	plots := make([][]*plot.Plot, rows)
	for r := range rows {
		plots[r] = make([]*plot.Plot, cols)
	}
	for i, p := range f.panels {
		pl, err := plotPanel(p)
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = pl
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12),
		PadLeft: vg.Points(6), PadRight: vg.Points(10), PadBottom: vg.Points(6)}
	canvases := plot.Align(plots, tiles, body)
	for r := range rows {
		for c := range cols {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	_, err := img.WriteTo(w)
	return err
}

// cdf turns samples into the points of their empirical distribution
// function, the x values clamped to at least floor so that a log scale
// can show them.
func cdf(name string, xs []float64, floor float64) series {
	v := append([]float64(nil), xs...)
	sort.Float64s(v)
	s := series{name: name, steps: true, sampleLen: len(v)}
	for i, x := range v {
		s.x = append(s.x, math.Max(x, floor))
		s.y = append(s.y, float64(i+1)/float64(len(v)))
	}
	return s
}

// quantile is the q-quantile of sorted xs, the smallest x with at least a
// fraction q of the samples at or below it.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// short prints x with three significant figures.
func short(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) }
