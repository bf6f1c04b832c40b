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
// come from (Report.Charts): x ticks at the data points, y ticks at round
// values, either axis logarithmic. XFormat names a categorical axis's ticks.
type LineChart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
	XFormat, YFormat      func(float64) string
}

const (
	svgW, svgH             = 720.0, 400.0
	padL, padR, padT, padB = 80.0, 170.0, 40.0, 55.0
	palette                = "#1f77b4#d62728#2ca02c#ff7f0e#9467bd#8c564b#17becf#7f7f7f"
)

// axis maps data values in [lo, hi] to pixels in [from, to].
type axis struct {
	lo, hi   float64
	log      bool
	from, to float64
}

func (a axis) pos(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(math.Max(v, 1e-300)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return (a.from + a.to) / 2
	}
	return a.from + (v-lo)/(hi-lo)*(a.to-a.from)
}

// ticks are round values in [lo, hi]: 1, 2 and 5 times the powers of ten
// on a log axis, multiples of a round step on a linear one.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for v := a.lo; v <= a.hi*1.001; v *= 10 {
			out = append(out, v)
			if a.hi/a.lo <= 100 { // more decades: decades only
				out = append(out, 2*v, 5*v)
			}
		}
		return slices.DeleteFunc(out, func(v float64) bool { return v > a.hi*1.001 })
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := a.lo; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(math.Max(raw, 1e-300))))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// yRange is the y axis's range: whole decades on a log axis, from zero to
// a round value on a linear one.
func yRange(vals []float64, log bool) (float64, float64) {
	if log {
		vals = slices.DeleteFunc(slices.Clone(vals), func(v float64) bool { return v <= 0 })
	}
	if len(vals) == 0 {
		return 1, 10
	}
	lo, hi := slices.Min(vals), slices.Max(vals)
	if log {
		return math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)+1e-9))
	}
	lo = math.Min(lo, 0)
	step := niceStep(math.Max(hi-lo, 1) / 5)
	return math.Floor(lo/step) * step, math.Max(math.Ceil(hi/step)*step, lo+step)
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
	xf, yf := cmpOr(c.XFormat, defaultFormat), cmpOr(c.YFormat, defaultFormat)
	xt := slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(xs), func(v float64) bool { return c.LogX && v <= 0 }))))
	x := axis{lo: 1, hi: 10, log: c.LogX, from: padL + 10, to: svgW - padR - 10}
	if len(xt) > 0 {
		x.lo, x.hi = xt[0], xt[len(xt)-1]
	}
	ylo, yhi := yRange(ys, c.LogY)
	y := axis{lo: ylo, hi: yhi, log: c.LogY, from: svgH - padB, to: padT}
	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	esc := html.EscapeString
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`, svgW, svgH, svgW, svgH)
	f(`<rect width="100%%" height="100%%" fill="white"/>`)
	f(`<text x="%g" y="22" font-size="15" text-anchor="middle">%s</text>`, (svgW-padR+padL)/2, esc(c.Title))
	for _, v := range y.ticks() {
		p := y.pos(v)
		f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`, padL, p, svgW-padR, p)
		f(`<text x="%g" y="%.1f" text-anchor="end">%s</text>`, padL-6, p+4, esc(yf(v)))
	}
	for _, v := range xt {
		p := x.pos(v)
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
			if !(c.LogY && s.Y[j] <= 0) && !(c.LogX && s.X[j] <= 0) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.pos(s.X[j]), y.pos(s.Y[j])))
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

// cmpOr is f, or def when f is nil.
func cmpOr(f, def func(float64) string) func(float64) string {
	if f == nil {
		return def
	}
	return f
}
