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

// LineChart is an SVG line chart with optional logarithmic axes: the
// small generator the report's charts come from (Report.Charts), fed by
// the run's results. XFormat names the ticks of a categorical axis.
type LineChart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
	XFormat, YFormat      func(float64) string
}

// color is the i-th series' color.
func color(i int) string {
	const palette = "#1f77b4#d62728#2ca02c#ff7f0e#9467bd#8c564b#17becf#7f7f7f"
	j := i % (len(palette) / 7)
	return palette[j*7 : j*7+7]
}

const (
	svgW, svgH                     = 720, 400
	padL, padR, padT, padB float64 = 80, 170, 40, 55
)

// axis maps data values to pixels.
type axis struct {
	lo, hi   float64
	log      bool
	from, to float64 // pixels
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

// ticks are round values between lo and hi.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := math.Floor(math.Log10(a.lo)); e <= math.Ceil(math.Log10(a.hi)); e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v >= a.lo*0.999 && v <= a.hi*1.001 {
					out = append(out, v)
				}
			}
		}
		if len(out) > 8 { // decades only
			var d []float64
			for _, v := range out {
				if m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9)); math.Abs(m-1) < 1e-6 {
					d = append(d, v)
				}
			}
			out = d
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// bounds returns the range of vals, widened to round values.
func bounds(vals []float64, log, zero bool) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if log && v <= 0 {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		return 1, 10
	}
	if log {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)+1e-9))
		return lo, hi
	}
	if zero {
		lo = math.Min(lo, 0)
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step
}

func header(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", (svgW-int(padR)+int(padL))/2, html.EscapeString(title))
}

func frame(b *strings.Builder, x, y axis, xlabel, ylabel string, xt []float64, xf func(float64) string, yf func(float64) string) {
	for _, v := range y.ticks() {
		p := y.pos(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", padL, p, float64(svgW)-padR, p)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, p+4, html.EscapeString(yf(v)))
	}
	for _, v := range xt {
		p := x.pos(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", p, padT, p, float64(svgH)-padB)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p, float64(svgH)-padB+16, html.EscapeString(xf(v)))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", padL, padT, float64(svgW)-padL-padR, float64(svgH)-padT-padB)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (padL+float64(svgW)-padR)/2, float64(svgH)-12, html.EscapeString(xlabel))
	fmt.Fprintf(b, `<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", (padT+float64(svgH)-padB)/2, (padT+float64(svgH)-padB)/2, html.EscapeString(ylabel))
}

func legend(b *strings.Builder, names []string) {
	for i, n := range names {
		y := padT + 10 + float64(i)*20
		x := float64(svgW) - padR + 12
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s"/>`+"\n", x, y-9, color(i))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+20, y, html.EscapeString(n))
	}
}

func defaultFormat(v float64) string {
	switch {
	case v != 0 && math.Abs(v) < 1:
		return fmt.Sprintf("%g", v)
	case math.Abs(v) >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case math.Abs(v) >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// SVG renders the chart.
func (c LineChart) SVG() string {
	var xs, ys []float64
	for _, s := range c.Series {
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	xf, yf := c.XFormat, c.YFormat
	if xf == nil {
		xf = defaultFormat
	}
	if yf == nil {
		yf = defaultFormat
	}
	xlo, xhi := 1.0, 10.0
	if len(xs) > 0 {
		xlo, xhi = minOf(xs), maxOf(xs)
	}
	if c.LogX && xlo <= 0 {
		xlo, xhi = bounds(xs, true, false)
	}
	ylo, yhi := bounds(ys, c.LogY, true)
	x := axis{lo: xlo, hi: xhi, log: c.LogX, from: padL + 10, to: float64(svgW) - padR - 10}
	y := axis{lo: ylo, hi: yhi, log: c.LogY, from: float64(svgH) - padB, to: padT}
	var b strings.Builder
	header(&b, c.Title)
	// x ticks at the data points when few, else round values
	xt := uniqueSorted(xs)
	if len(xt) > 10 {
		xt = x.ticks()
	}
	frame(&b, x, y, c.XLabel, c.YLabel, xt, xf, yf)
	var names []string
	for i, s := range c.Series {
		col := color(i)
		var pts []string
		for j := range s.X {
			if j >= len(s.Y) || (c.LogY && s.Y[j] <= 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.pos(s.X[j]), y.pos(s.Y[j])))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		}
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", xy[0], xy[1], col)
		}
		names = append(names, s.Name)
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return b.String()
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func uniqueSorted(v []float64) []float64 {
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}
