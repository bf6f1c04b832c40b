package bench

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// Series is one named line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// LineChart is an SVG line chart, the small generator the report's charts
// come from (Report.Charts). The x axis is categorical: every distinct x
// is a tick, evenly spaced (the key counts and connection counts grow
// roughly tenfold), named by XFormat; the y axis runs from zero or, with
// LogY, over whole decades, its ticks at round values named by YFormat.
type LineChart struct {
	Title, XLabel, YLabel string
	LogY                  bool
	Series                []Series
	XFormat, YFormat      func(float64) string
}

const (
	svgW, svgH             = 720.0, 400.0
	padL, padR, padT, padB = 80.0, 170.0, 40.0, 55.0
	palette                = "#1f77b4#d62728#2ca02c#ff7f0e#9467bd#8c564b#17becf#7f7f7f"
)

// yTicks are the y axis's ticks, the first and the last its range: 1, 2
// and 5 times the powers of ten over whole decades on a log axis (decades
// alone beyond two), multiples of a round step from zero on a linear one.
func yTicks(ys []float64, log bool) []float64 {
	if log {
		ys = slices.DeleteFunc(slices.Clone(ys), func(v float64) bool { return v <= 0 })
	}
	if len(ys) == 0 {
		return []float64{1, 10}
	}
	var out []float64
	if lo, hi := slices.Min(ys), slices.Max(ys); log {
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)+1e-9))
		for v := lo; v <= hi*1.001; v *= 10 {
			if out = append(out, v); hi/lo <= 100 && v < hi {
				out = append(out, 2*v, 5*v)
			}
		}
	} else {
		step := niceStep(max(hi, 1) / 5)
		for i := 0.0; len(out) < 2 || out[len(out)-1] < hi; i++ {
			out = append(out, i*step)
		}
	}
	return out
}

// niceStep is the smallest of 1, 2 and 5 times a power of ten that is at
// least raw.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func defaultFormat(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// SVG renders the chart.
func (c LineChart) SVG() string {
	var xs, ys []float64
	for _, s := range c.Series {
		xs, ys = append(xs, s.X...), append(ys, s.Y...)
	}
	xs, yt := slices.Compact(slices.Sorted(slices.Values(xs))), yTicks(ys, c.LogY)
	xf, yf := defaultFormat, defaultFormat
	if c.XFormat != nil {
		xf = c.XFormat
	}
	if c.YFormat != nil {
		yf = c.YFormat
	}
	xpos := func(v float64) float64 {
		i, _ := slices.BinarySearch(xs, v)
		return padL + (float64(i)+0.5)*(svgW-padL-padR)/float64(len(xs))
	}
	ypos := func(v float64) float64 {
		lo, hi := yt[0], yt[len(yt)-1]
		if c.LogY {
			v, lo, hi = math.Log10(v), math.Log10(lo), math.Log10(hi)
		}
		return svgH - padB - (v-lo)/(hi-lo)*(svgH-padB-padT)
	}
	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	esc := html.EscapeString
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`, svgW, svgH, svgW, svgH)
	f(`<rect width="100%%" height="100%%" fill="white"/>`)
	f(`<text x="%g" y="22" font-size="15" text-anchor="middle">%s</text>`, (svgW-padR+padL)/2, esc(c.Title))
	for _, v := range yt {
		p := ypos(v)
		f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`, padL, p, svgW-padR, p)
		f(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`, padL-6, p+4, esc(yf(v)))
	}
	for _, v := range xs {
		p := xpos(v)
		f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`, p, padT, p, svgH-padB)
		f(`<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, p, svgH-padB+16, esc(xf(v)))
	}
	f(`<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`, padL, padT, svgW-padL-padR, svgH-padT-padB)
	f(`<text x="%g" y="%g" text-anchor="middle">%s</text>`, (padL+svgW-padR)/2, svgH-12, esc(c.XLabel))
	f(`<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`, (padT+svgH-padB)/2, (padT+svgH-padB)/2, esc(c.YLabel))
	for i, s := range c.Series {
		col := palette[i%8*7 : i%8*7+7]
		var pts []string
		for j := range min(len(s.X), len(s.Y)) {
			if !c.LogY || s.Y[j] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(s.X[j]), ypos(s.Y[j])))
			}
		}
		if len(pts) > 1 {
			f(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, col, strings.Join(pts, " "))
		}
		for _, p := range pts {
			cx, cy, _ := strings.Cut(p, ",")
			f(`<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, cx, cy, col)
		}
		ly := padT + 10 + float64(i)*20
		f(`<rect x="%g" y="%g" width="14" height="10" fill="%s"/>`, svgW-padR+12, ly-9, col)
		f(`<text x="%g" y="%g">%s</text>`, svgW-padR+32, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
