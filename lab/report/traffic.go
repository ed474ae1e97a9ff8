package report

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// NodeTraffic is one node's WireGuard bytes per path over the run, from
// its metrics (lattice_node_bytes_total) as the runner sampled them.
type NodeTraffic struct {
	Node    string          `json:"node"`
	Samples []TrafficSample `json:"samples"`
}

// TrafficSample is a node's byte counters at one moment.
type TrafficSample struct {
	At       time.Duration `json:"at_ns"` // since the scenario started
	DirectTx uint64        `json:"direct_tx"`
	DirectRx uint64        `json:"direct_rx"`
	RelayTx  uint64        `json:"relay_tx"`
	RelayRx  uint64        `json:"relay_rx"`
}

// trafficSeries are the lines a traffic chart draws, in legend order.
var trafficSeries = []struct {
	name, color, dash string
	get               func(TrafficSample) uint64
}{
	{"direct tx", "#16a34a", "", func(s TrafficSample) uint64 { return s.DirectTx }},
	{"direct rx", "#16a34a", "4 3", func(s TrafficSample) uint64 { return s.DirectRx }},
	{"relay tx", "#f59e0b", "", func(s TrafficSample) uint64 { return s.RelayTx }},
	{"relay rx", "#f59e0b", "4 3", func(s TrafficSample) uint64 { return s.RelayRx }},
}

// trafficCharts draws each sampled node's bytes per path and direction
// over the scenario, one small inline SVG per node (no scripts, no
// external files). Each line is a polyline with a data-series attribute
// naming the node and series, and a title with the final count.
func trafficCharts(r *Result) template.HTML {
	if len(r.Traffic) == 0 {
		return ""
	}
	total := r.Duration
	for _, nt := range r.Traffic {
		if n := len(nt.Samples); n > 0 && nt.Samples[n-1].At > total {
			total = nt.Samples[n-1].At
		}
	}
	if total <= 0 {
		return ""
	}
	const w, h, left, bottom = 300, 120, 48, 16
	var b strings.Builder
	b.WriteString(`<div class="traffic">`)
	for _, nt := range r.Traffic {
		var peak uint64
		for _, s := range nt.Samples {
			for _, ser := range trafficSeries {
				peak = max(peak, ser.get(s))
			}
		}
		fmt.Fprintf(&b, `<svg class="traffic-node" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="bytes per path on %s">`,
			w, h+bottom+14, template.HTMLEscapeString(nt.Node))
		fmt.Fprintf(&b, `<text x="%d" y="11" font-size="11" font-weight="bold">%s</text><text x="%d" y="11" font-size="10" text-anchor="end">%s</text>`,
			left, template.HTMLEscapeString(nt.Node), w-2, fmtBytes(peak))
		top := 14
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`, left, top, w-left-2, h-top)
		x := func(t time.Duration) float64 {
			return left + float64(w-left-2)*min(max(float64(t)/float64(total), 0), 1)
		}
		y := func(v uint64) float64 {
			if peak == 0 {
				return float64(h)
			}
			return float64(h) - float64(h-top)*float64(v)/float64(peak)
		}
		for _, ser := range trafficSeries {
			var pts []string
			for _, s := range nt.Samples {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(ser.get(s))))
			}
			last := uint64(0)
			if n := len(nt.Samples); n > 0 {
				last = ser.get(nt.Samples[n-1])
			}
			dash := ""
			if ser.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, ser.dash)
			}
			fmt.Fprintf(&b, `<polyline data-series="%s %s" fill="none" stroke="%s" stroke-width="1.5"%s points="%s"><title>%s %s: %s</title></polyline>`,
				template.HTMLEscapeString(nt.Node), ser.name, ser.color, dash, strings.Join(pts, " "),
				template.HTMLEscapeString(nt.Node), ser.name, fmtBytes(last))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">0s</text><text x="%d" y="%d" font-size="10" text-anchor="end">%s</text></svg>`,
			left, h+12, w-2, h+12, fmtDur(total))
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String()) //nolint:gosec // every string from the result is escaped above
}
