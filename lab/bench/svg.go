package bench

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// WriteSVG draws each metric as a horizontal bar scaled to its own
// maximum (the run's value and, when given, the baseline's beneath it in
// grey), so figures of different units share one picture.
func WriteSVG(w io.Writer, cur, base *Report) error {
	const labelW, barW, rowH, pad = 220, 420, 34, 10
	rows := len(cur.Metrics)
	height := rows*rowH + 2*pad + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="Helvetica,Arial,sans-serif" font-size="12">`,
		labelW+barW+160, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="%d" font-weight="bold">lattice-lab bench, %s, %d CPUs</text>`,
		pad, pad+10, html.EscapeString(cur.Go), cur.CPUs)
	for i, m := range cur.Metrics {
		y := pad + 20 + i*rowH
		baseVal, hasBase := 0.0, false
		if base != nil {
			for _, bm := range base.Metrics {
				if bm.Name == m.Name {
					baseVal, hasBase = bm.Value, true
				}
			}
		}
		scale := max(m.Value, baseVal)
		if scale <= 0 {
			scale = 1
		}
		color := "#2563eb"
		if hasBase && baseVal > 0 {
			worse := (m.Better == "higher" && m.Value < baseVal) || (m.Better == "lower" && m.Value > baseVal)
			if worse {
				color = "#dc2626"
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" font-size="10" fill="#555">%s is better</text>`,
			pad, y+12, html.EscapeString(m.Name), pad, y+24, m.Better)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="12" fill="%s"/><text x="%.1f" y="%d">%.1f %s</text>`,
			labelW, y+2, float64(barW)*m.Value/scale, color, float64(labelW)+float64(barW)*m.Value/scale+6, y+12, m.Value, html.EscapeString(m.Unit))
		if hasBase {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="8" fill="#9ca3af"/><text x="%.1f" y="%d" font-size="10" fill="#555">baseline %.1f</text>`,
				labelW, y+16, float64(barW)*baseVal/scale, float64(labelW)+float64(barW)*baseVal/scale+6, y+24, baseVal)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
