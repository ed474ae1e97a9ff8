package report

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// HTMLOptions tune WriteHTML.
type HTMLOptions struct {
	// CaptureBase is the directory the report is written to. Links to
	// captures inside it are relative; others are absolute file: URLs. If
	// empty, relative capture paths are linked as they are.
	CaptureBase string
	// Title heads the page. If empty, "lattice-lab report".
	Title string
}

// matrixCell is one NAT pair's outcome, over every scenario that had it.
type matrixCell struct {
	Path         string // direct, relay, mixed, none
	Seen         int
	TimeToDirect time.Duration
	RelayBytes   uint64
	Scenarios    []string
}

// pageData is what the template renders.
type pageData struct {
	Title     string
	Generated string
	Results   []*Result
	Passed    int
	Failed    int
	Skipped   int
	Total     time.Duration // network time, on each scenario's clock
	Wall      time.Duration
	XRealtime float64 // over the results whose wall time was measured
	NATs      []string
	Matrix    map[string]map[string]*matrixCell
	Timelines map[string]template.HTML
	Traffic   map[string]template.HTML // traffic.go
	Base      string
}

// WriteHTML writes a self-contained HTML page (no scripts, no external
// files): a summary, the NAT-pair matrix over every result, and per
// scenario its steps, a path timeline per node pair with the switches'
// reasons, and links to its captures.
func WriteHTML(w io.Writer, results []*Result, opt HTMLOptions) error {
	d := pageData{Title: opt.Title, Generated: time.Now().UTC().Format(time.RFC3339), Results: results,
		Matrix: map[string]map[string]*matrixCell{}, Timelines: map[string]template.HTML{}, Traffic: map[string]template.HTML{}, Base: opt.CaptureBase}
	if d.Title == "" {
		d.Title = "lattice-lab report"
	}
	nats := map[string]bool{}
	var measured time.Duration // network time of the results with a wall time
	for _, r := range results {
		switch r.Status {
		case Passed:
			d.Passed++
		case Failed:
			d.Failed++
		case Skipped:
			d.Skipped++
		}
		d.Total += r.Duration
		if r.Wall > 0 {
			measured += r.Duration
			d.Wall += r.Wall
		}
		for _, p := range r.Pairs {
			nats[p.FromNAT], nats[p.ToNAT] = true, true
			row := d.Matrix[p.FromNAT]
			if row == nil {
				row = map[string]*matrixCell{}
				d.Matrix[p.FromNAT] = row
			}
			c := row[p.ToNAT]
			if c == nil {
				c = &matrixCell{Path: p.Path}
				row[p.ToNAT] = c
			}
			if c.Path != p.Path {
				c.Path = "mixed"
			}
			c.Seen++
			c.RelayBytes += p.RelayBytes
			if p.TimeToDirect > 0 && (c.TimeToDirect == 0 || p.TimeToDirect < c.TimeToDirect) {
				c.TimeToDirect = p.TimeToDirect
			}
			if !slices.Contains(c.Scenarios, r.Scenario) {
				c.Scenarios = append(c.Scenarios, r.Scenario)
			}
		}
		d.Timelines[r.Scenario] = timeline(r)
		d.Traffic[r.Scenario] = trafficCharts(r)
	}
	if d.Wall > 0 {
		d.XRealtime = measured.Seconds() / d.Wall.Seconds()
	}
	for n := range nats {
		d.NATs = append(d.NATs, n)
	}
	sort.Strings(d.NATs)
	return page.Execute(w, d)
}

// timeline draws each node pair's path over the scenario as an SVG bar:
// relay orange, direct green, a tick at every switch.
func timeline(r *Result) template.HTML {
	type seg struct {
		at time.Duration
		to string
	}
	byPair := map[string][]seg{}
	var keys []string
	for _, e := range r.Events {
		k := e.Node + " → " + e.Peer
		if _, ok := byPair[k]; !ok {
			keys = append(keys, k)
		}
		byPair[k] = append(byPair[k], seg{e.At, e.To})
	}
	if len(keys) == 0 || r.Duration <= 0 {
		return ""
	}
	sort.Strings(keys)
	if len(keys) > 40 {
		keys = keys[:40]
	}
	const labelW, barW, rowH = 180, 640, 18
	total := r.Duration
	x := func(t time.Duration) float64 {
		return labelW + float64(barW)*min(max(float64(t)/float64(total), 0), 1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="path timeline">`,
		labelW+barW+10, rowH*len(keys)+24)
	for i, k := range keys {
		y := i*rowH + 4
		fmt.Fprintf(&b, `<text x="0" y="%d" font-size="11">%s</text>`, y+12, template.HTMLEscapeString(k))
		segs := byPair[k]
		for j, s := range segs {
			end := total
			if j+1 < len(segs) {
				end = segs[j+1].at
			}
			color := "#f59e0b"
			if s.to == "direct" {
				color = "#16a34a"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s from %s</title></rect>`,
				x(s.at), y, max(x(end)-x(s.at), 1), rowH-6, color, template.HTMLEscapeString(s.to), fmtDur(s.at))
		}
	}
	y := rowH*len(keys) + 18
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">0s</text><text x="%d" y="%d" font-size="10" text-anchor="end">%s</text></svg>`,
		labelW, y, labelW+barW, y, fmtDur(total))
	return template.HTML(b.String()) //nolint:gosec // every string from the result is escaped above (TestHTMLEscapesResults)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// fmtX shows a ratio to real time, "×50 real time"; "–" if unknown.
func fmtX(x float64) string {
	switch {
	case x <= 0:
		return "–"
	case x < 10:
		return fmt.Sprintf("×%.2f real time", x)
	case x < 100:
		return fmt.Sprintf("×%.1f real time", x)
	}
	return fmt.Sprintf("×%.0f real time", x)
}

func fmtClock(c Clock) string {
	if c == "" {
		return "clock not recorded"
	}
	return string(c) + " clock"
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur":   fmtDur,
	"bytes": fmtBytes,
	"x":     fmtX,
	"clock": fmtClock,
	"cell": func(m map[string]map[string]*matrixCell, a, b string) *matrixCell {
		if row := m[a]; row != nil {
			return row[b]
		}
		return nil
	},
	"link": captureLink,
	"name": captureText,
	"join": strings.Join,
	"relayed": func(ps []Pair) []Pair {
		var out []Pair
		for _, p := range ps {
			if p.Path == "relay" {
				out = append(out, p)
			}
		}
		return out
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#111;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f4f6}.passed{color:#15803d}.failed{color:#b91c1c}.skipped{color:#6b7280}
td.direct{background:#dcfce7}td.relay{background:#fef3c7}td.mixed{background:#e0e7ff}td.none{background:#fee2e2}
.small{font-size:.85em;color:#555}code{font-size:.9em}.traffic{display:flex;flex-wrap:wrap;gap:.5em}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="small">Generated {{.Generated}} · {{len .Results}} scenarios: <span class="passed">{{.Passed}} passed</span>, <span class="failed">{{.Failed}} failed</span>, <span class="skipped">{{.Skipped}} skipped</span> · <span id="totals">{{dur .Total}} of network time{{if .Wall}} in {{dur .Wall}} of wall time, {{x .XRealtime}}{{end}}</span></p>
<table id="summary"><tr><th>scenario</th><th>topology</th><th>status</th><th>clock</th><th>network time</th><th>wall time</th><th>speed</th><th>why</th></tr>
{{range .Results}}<tr><td><a href="#s-{{.Scenario}}">{{.Scenario}}</a></td><td>{{.Topology}}</td><td class="{{.Status}}">{{.Status}}</td><td>{{with .Clock}}{{.}}{{else}}–{{end}}</td><td>{{dur .Duration}}</td><td>{{dur .Wall}}</td><td>{{x .XRealtime}}</td><td>{{.Error}}{{.SkipReason}}</td></tr>
{{end}}</table>
<h2>NAT-pair matrix</h2>
<p class="small">Each cell: the path the row's node ended on towards the column's node, the fastest time to a direct path, and the bytes that went through the relay, over every scenario that had the pair.</p>
{{if .NATs}}<table id="nat-matrix"><tr><th>from \ to</th>{{range .NATs}}<th>{{.}}</th>{{end}}</tr>
{{$m := .Matrix}}{{$nats := .NATs}}{{range $a := $nats}}<tr><th>{{$a}}</th>{{range $b := $nats}}{{with cell $m $a $b}}<td class="{{.Path}}" title="{{join .Scenarios ", "}}"><b>{{.Path}}</b><br><span class="small">{{if .TimeToDirect}}direct in {{dur .TimeToDirect}}<br>{{end}}relay {{bytes .RelayBytes}}</span></td>{{else}}<td></td>{{end}}{{end}}</tr>
{{end}}</table>{{else}}<p>No node pairs in these results.</p>{{end}}
{{$tl := .Timelines}}{{$tr := .Traffic}}{{$base := .Base}}
{{range .Results}}<h2 id="s-{{.Scenario}}">{{.Scenario}} <span class="{{.Status}}">{{.Status}}</span></h2>
{{if .Description}}<p>{{.Description}}</p>{{end}}
<p class="small">topology {{.Topology}} · {{.Edition}} edition · <span class="timing">{{clock .Clock}} · {{dur .Duration}} of network time{{if .Wall}} in {{dur .Wall}} of wall time, {{x .XRealtime}}{{end}}</span>{{if .File}} · <code>{{.File}}</code>{{end}}</p>
{{if .Error}}<p class="failed">{{.Error}}</p>{{end}}{{if .SkipReason}}<p class="skipped">skipped: {{.SkipReason}}</p>{{end}}
{{if .Steps}}<table class="steps"><tr><th>#</th><th>step</th><th>status</th><th>at</th><th>took</th><th>detail</th></tr>
{{range .Steps}}<tr><td>{{.Index}}</td><td>{{.Label}}</td><td class="{{.Status}}">{{.Status}}</td><td>{{dur .Started}}</td><td>{{dur .Duration}}</td><td>{{.Detail}}{{if .Error}}<span class="failed">{{.Error}}</span>{{end}}{{range .Metrics}} <code>{{.Name}}={{printf "%.1f" .Value}} {{.Unit}}</code>{{end}}</td></tr>
{{end}}</table>{{end}}
{{with index $tl .Scenario}}<h3>Paths over time</h3><p class="small">green direct, orange relay; hover for times</p>{{.}}{{end}}
{{with relayed .Pairs}}<h3>Why relayed</h3><table class="why-relayed"><tr><th>node → peer</th><th>why relayed</th></tr>
{{range .}}<tr><td>{{.From}} → {{.To}}</td><td>{{with .Why}}{{.}}{{else}}–{{end}}</td></tr>
{{end}}</table>{{end}}
{{with index $tr .Scenario}}<h3>Bytes per path over time</h3><p class="small">each node's WireGuard bytes (lattice_node_bytes_total, sampled from its metrics): green direct, orange relay; solid sent, dashed received</p>{{.}}{{end}}
{{if .Events}}<details><summary>{{len .Events}} path switches with reasons</summary><table class="events"><tr><th>at</th><th>node → peer</th><th>to</th><th>address</th><th>reason</th></tr>
{{range .Events}}<tr><td>{{dur .At}}</td><td>{{.Node}} → {{.Peer}}</td><td>{{.To}}</td><td>{{.Addr}}</td><td>{{.Reason}}</td></tr>
{{end}}</table></details>{{end}}
{{if .Captures}}<p>Captures: {{range .Captures}}<a href="{{link $base .}}">{{name $base .}}</a> {{end}}</p>{{end}}
{{end}}
</body></html>
`))
