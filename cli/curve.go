package cli

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/vkern/vkern/gpt"
)

// runCurve is a run's loss curve as its checkpoint keeps it: history (the
// resumed checkpoint's curve), then steps (this process's), a non-finite
// loss as nil.
func runCurve(history []gpt.CurvePoint, steps []stepRecord) []gpt.CurvePoint {
	curve := make([]gpt.CurvePoint, 0, len(history)+len(steps))
	curve = append(curve, history...)
	for _, s := range steps {
		p := gpt.CurvePoint{Step: s.Step, Loss: finite(s.Loss)}
		if s.ValLoss != nil {
			p.Val = finite(*s.ValLoss)
		}
		curve = append(curve, p)
	}
	return curve
}

// finite is v, or nil where v is NaN or infinite (JSON carries neither).
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// writeLossSVG draws a run's loss curve: the training loss of every step
// (a thin line), the validation loss where evaluated (dots joined), and
// gridlines every 0.5; plain SVG, to open in a browser or commit. Points
// without a loss are left out of the line.
func writeLossSVG(w io.Writer, title string, steps []gpt.CurvePoint) error {
	const width, height, left, right, top, bottom = 720, 400, 60, 20, 40, 40
	if len(steps) == 0 {
		return fmt.Errorf("no steps to draw")
	}
	first, last := float64(steps[0].Step), float64(steps[len(steps)-1].Step+1)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range steps {
		for _, v := range []*float64{s.Loss, s.Val} {
			if v != nil {
				lo, hi = min(lo, *v), max(hi, *v)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	lo, hi = math.Floor(lo*2)/2, math.Ceil(hi*2)/2
	if hi <= lo {
		hi = lo + 0.5
	}
	if last <= first {
		last = first + 1
	}
	x := func(step float64) float64 { return left + (step-first)/(last-first)*(width-left-right) }
	y := func(v float64) float64 { return top + (hi-v)/(hi-lo)*(height-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s: loss per step</text>`+"\n", left, html.EscapeString(title))
	for v := lo; v <= hi+1e-9; v += 0.5 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n",
			left, width-right, y(v), y(v), left-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="start">step %d</text><text x="%d" y="%d" text-anchor="end">step %d</text>`+"\n",
		left, height-12, steps[0].Step, width-right, height-12, steps[len(steps)-1].Step+1)
	var train, val []string
	var dots [][2]float64
	for _, s := range steps {
		if s.Loss != nil {
			train = append(train, fmt.Sprintf("%.1f,%.1f", x(float64(s.Step)+1), y(*s.Loss)))
		}
		if s.Val != nil {
			dots = append(dots, [2]float64{x(float64(s.Step) + 1), y(*s.Val)})
			val = append(val, fmt.Sprintf("%.1f,%.1f", dots[len(dots)-1][0], dots[len(dots)-1][1]))
		}
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#4a7bd0" stroke-width="1" points="%s"/>`+"\n", strings.Join(train, " "))
	if len(val) > 0 {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#d9822b" stroke-width="2" points="%s"/>`+"\n", strings.Join(val, " "))
		for _, d := range dots {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#d9822b"/>`+"\n", d[0], d[1])
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#4a7bd0">training</text><text x="%d" y="%d" fill="#d9822b">validation</text>`+"\n",
		width-right-160, top+14, width-right-80, top+14)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
