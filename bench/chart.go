package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// WriteSVG draws one horizontal bar per ratio of a result to an anchor
// (above 1: faster than the anchor), labelled with the result's name, and
// with the anchor's where the result has several, with a line at 1 and the
// value printed at the end of each bar. The picture is plain SVG so that
// it can be committed beside BENCHMARKS.md and read in a browser.
func WriteSVG(w io.Writer, title string, results []Result) error {
	type bar struct {
		Name  string
		Ratio float64
	}
	var rows []bar
	top := 1.0
	for _, r := range results {
		ratios := r.Ratios()
		for _, rel := range ratios {
			name := r.Name
			if len(ratios) > 1 {
				name += " vs " + rel.Anchor
			}
			rows = append(rows, bar{name, rel.Ratio})
			top = math.Max(top, rel.Ratio)
		}
	}
	const (
		labelWidth, barWidth, rowHeight, margin = 300, 420, 22, 40
	)
	top = math.Ceil(top*4) / 4
	height := margin*2 + rowHeight*len(rows)
	width := labelWidth + barWidth + 80
	x := func(ratio float64) float64 { return labelWidth + ratio/top*barWidth }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14">%s</text>`+"\n", html.EscapeString(title))
	for i, r := range rows {
		y := margin + i*rowHeight
		color := "#d9822b"
		if r.Ratio >= 1 {
			color = "#2b8a3e"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+15, html.EscapeString(r.Name))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, y+3, x(r.Ratio)-labelWidth, rowHeight-6, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.2f</text>`+"\n", x(r.Ratio)+4, y+15, r.Ratio)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-dasharray="4 3"/>`+"\n", x(1), margin-6, x(1), height-margin+6)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">1 = anchor</text>`+"\n", x(1), height-margin+20)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
