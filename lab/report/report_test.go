package report

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() []*Result {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return []*Result{
		{
			Scenario: "pair-full-cone+symmetric", Topology: "nat-matrix", Edition: "community", Started: start,
			Clock: ClockVirtual, Duration: 2 * time.Second, Wall: 40 * time.Millisecond, Status: Passed,
			Steps: []Step{{Index: 1, Action: "wait_path", Label: "wait until a → b is direct", Status: Passed, Duration: 150 * time.Millisecond,
				Detail: "direct to 203.0.113.13:51820", Metrics: []Metric{{Name: "time_to_direct", Value: 150, Unit: "ms"}}}},
			Nodes: []Node{{Name: "a", Network: "fc", NAT: "full-cone"}, {Name: "b", Network: "sym", NAT: "symmetric"}},
			Pairs: []Pair{
				{From: "a", To: "b", FromNAT: "full-cone", ToNAT: "symmetric", Path: "direct", TimeToDirect: 150 * time.Millisecond, RelayBytes: 2048},
				{From: "b", To: "a", FromNAT: "symmetric", ToNAT: "full-cone", Path: "direct", TimeToDirect: 160 * time.Millisecond},
			},
			Events: []PathEvent{
				{At: 100 * time.Millisecond, Node: "a", Peer: "b", To: "relay", Reason: "peer registered"},
				{At: 250 * time.Millisecond, Node: "a", Peer: "b", To: "direct", Addr: "203.0.113.13:51820", Reason: "ICE nominated a pair"},
			},
			Captures: []string{"/tmp/x/internet.pcapng"},
		},
		{
			Scenario: "pair-symmetric+symmetric", Topology: "nat-matrix", Edition: "community", Started: start, Clock: ClockReal, Duration: time.Second, Wall: time.Second, Status: Failed,
			Error: "step 1 (wait): path is direct, want relay",
			Steps: []Step{{Index: 1, Action: "wait_path", Label: "wait", Status: Failed, Error: "path is direct, want relay"}},
			Pairs: []Pair{{From: "a", To: "b", FromNAT: "symmetric", ToNAT: "symmetric", Path: "relay", RelayBytes: 1 << 20, ICE: "all pairs failed"}},
		},
		{Scenario: "sandbox-gvisor", Topology: "sandbox-gvisor", Status: Skipped, SkipReason: "gvisor sandboxes are not available"},
	}
}

func TestJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, sample()))
	var got []*Result
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	assert.Equal(t, sample(), got)
	v, ok := got[0].Metric("time_to_direct")
	assert.True(t, ok)
	assert.Equal(t, 150.0, v)
}

// TestJSONShape pins the keys of a result, with the timing a CI job or
// a determinism check reads: the clock, network and wall seconds and their
// ratio.
func TestJSONShape(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, sample()[:1]))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Len(t, got, 1)
	var keys []string
	for k := range got[0] {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"scenario", "topology", "edition", "started", "clock", "duration_ns", "status",
		"steps", "nodes", "pairs", "events", "captures", "network_seconds", "wall_seconds", "x_realtime"}, keys)
	assert.Equal(t, "virtual", got[0]["clock"])
	assert.Equal(t, 2.0, got[0]["network_seconds"])
	assert.Equal(t, 0.04, got[0]["wall_seconds"])
	assert.Equal(t, 50.0, got[0]["x_realtime"])
}

func TestJSONBadWall(t *testing.T) {
	var r Result
	assert.EqualError(t, json.Unmarshal([]byte(`{"scenario":"s","wall_seconds":-1}`), &r), `result "s": wall_seconds -1 out of range`)
	// Just below MaxInt64/1e9 seconds, but 2^63 ns once rounded.
	assert.EqualError(t, json.Unmarshal([]byte(`{"scenario":"s","wall_seconds":9223372036.854775807}`), &r),
		`result "s": wall_seconds 9.223372036854776e+09 out of range`)
}

func TestXRealtime(t *testing.T) {
	tests := []struct {
		name          string
		network, wall time.Duration
		want          float64
	}{
		{"virtual", time.Hour, 30 * time.Second, 120},
		{"real", time.Second, time.Second, 1},
		{"wall not measured", time.Second, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{Duration: tt.network, Wall: tt.wall}
			assert.InDelta(t, tt.want, r.XRealtime(), 1e-9)
		})
	}
}

// TestDeterministic: two runs that differ only in wall-clock fields compare
// equal once Deterministic clears them, and any other difference still
// shows; the copy shares nothing with the original.
func TestDeterministic(t *testing.T) {
	a, b := sample()[0], sample()[0]
	b.Started = b.Started.Add(time.Hour)
	b.Wall = 3 * time.Second
	require.NotEqual(t, a, b)
	assert.Equal(t, a.Deterministic(), b.Deterministic())
	assert.Zero(t, a.Deterministic().Started)
	assert.Zero(t, a.Deterministic().Wall)
	assert.Zero(t, a.Deterministic().XRealtime())

	c := sample()[0]
	c.Duration += time.Millisecond
	assert.NotEqual(t, a.Deterministic(), c.Deterministic(), "network time is deterministic, so it is compared")

	d := a.Deterministic()
	d.Steps[0].Metrics[0].Value = 1
	d.Pairs[0].Path = "relay"
	d.Captures[0] = "elsewhere"
	assert.Equal(t, sample()[0], a, "the original is untouched")
	assert.Equal(t, 40*time.Millisecond, a.Wall)
}

func TestJUnit(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJUnit(&b, sample()))
	var doc junitSuites
	require.NoError(t, xml.Unmarshal(b.Bytes(), &doc))
	assert.Equal(t, 5, doc.Tests, "a case per scenario plus one per step")
	assert.Equal(t, 2, doc.Failures)
	assert.Equal(t, 1, doc.Skipped)
	require.Len(t, doc.Suites, 3)
	assert.Equal(t, "01 wait until a → b is direct", doc.Suites[0].Cases[1].Name)
	assert.Equal(t, "path is direct, want relay", doc.Suites[1].Cases[1].Failure.Message)
	assert.Equal(t, "gvisor sandboxes are not available", doc.Suites[2].Cases[0].Skipped.Message)
}

// TestJUnitTiming: each scenario's clock, network and wall seconds and
// x_realtime are properties of its testsuite and its whole-scenario
// testcase, read back from the XML as a CI reporter would (the steps' cases
// carry none).
func TestJUnitTiming(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJUnit(&b, sample()))
	type prop struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	var doc struct {
		Suites []struct {
			Props []prop `xml:"properties>property"`
			Cases []struct {
				Name  string `xml:"name,attr"`
				Props []prop `xml:"properties>property"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(b.Bytes(), &doc))
	require.Len(t, doc.Suites, 3)
	assert.Equal(t, 6, strings.Count(b.String(), "<properties>"), "a suite's and its scenario case's, no empty ones")
	want := [][]prop{
		{{"clock", "virtual"}, {"network_seconds", "2"}, {"wall_seconds", "0.04"}, {"x_realtime", "50"}},
		{{"clock", "real"}, {"network_seconds", "1"}, {"wall_seconds", "1"}, {"x_realtime", "1"}},
		{{"clock", ""}, {"network_seconds", "0"}, {"wall_seconds", "0"}, {"x_realtime", "0"}},
	}
	for i, s := range doc.Suites {
		assert.Equal(t, want[i], s.Props, "suite %d", i)
		require.NotEmpty(t, s.Cases)
		assert.Equal(t, want[i], s.Cases[0].Props, "suite %d: %s", i, s.Cases[0].Name)
		for _, c := range s.Cases[1:] {
			assert.Empty(t, c.Props, "step case %s", c.Name)
		}
	}
}

func TestHTML(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteHTML(&b, sample(), HTMLOptions{CaptureBase: "/tmp/x"}))
	page := b.String()
	for _, want := range []string{
		`<table id="nat-matrix">`,
		`<th>from \ to</th><th>full-cone</th><th>symmetric</th>`,
		`<td class="direct" title="pair-full-cone&#43;symmetric"><b>direct</b><br><span class="small">direct in 150ms<br>relay 2.0 KiB</span></td>`,
		`<td class="relay" title="pair-symmetric&#43;symmetric"><b>relay</b><br><span class="small">relay 1.0 MiB</span></td>`,
		`<a href="internet.pcapng">internet.pcapng</a>`,
		`<td>a → b</td><td>direct</td><td>203.0.113.13:51820</td><td>ICE nominated a pair</td>`,
		`<svg class="timeline"`,
		`skipped: gvisor sandboxes are not available`,
		// each scenario's clock, network and wall time and speed, in the
		// summary table and under its heading
		`<td class="passed">passed</td><td>virtual</td><td>2.00s</td><td>40ms</td><td>×50.0 real time</td>`,
		`<td class="failed">failed</td><td>real</td><td>1.00s</td><td>1.00s</td><td>×1.00 real time</td>`,
		`<td class="skipped">skipped</td><td>–</td><td>–</td><td>–</td><td>–</td>`,
		`<span class="timing">virtual clock · 2.00s of network time in 40ms of wall time, ×50.0 real time</span>`,
		`<span class="timing">real clock · 1.00s of network time in 1.00s of wall time, ×1.00 real time</span>`,
		`<span class="timing">clock not recorded · – of network time</span>`,
		// totals: 3 s of network time in 1.04 s of wall time
		`<span id="totals">3.00s of network time in 1.04s of wall time, ×2.88 real time</span>`,
	} {
		assert.Contains(t, page, want)
	}
	assert.NotContains(t, page, "<script", "self-contained and static")
}

// TestHTMLEscapesResults: a result.json can come from anywhere (a
// baseline, another machine's run); nothing in it becomes markup, in the
// tables or the hand-drawn SVG.
func TestHTMLEscapesResults(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>`
	rs := sample()
	rs[0].Events = append(rs[0].Events, PathEvent{At: 300 * time.Millisecond, Node: "a" + evil, Peer: "b", To: "direct" + evil, Reason: evil})
	var b bytes.Buffer
	require.NoError(t, WriteHTML(&b, rs, HTMLOptions{}))
	assert.NotContains(t, b.String(), "<img")
	assert.Contains(t, b.String(), "direct&lt;img src=x onerror=alert(1)&gt; from")
}

// TestHTMLTotals: the summary's speed is over the scenarios whose wall time
// was measured, so one without it does not inflate the ratio; with none
// measured the summary gives network time only.
func TestHTMLTotals(t *testing.T) {
	tests := []struct {
		name    string
		results []*Result
		want    string
	}{
		{"one unmeasured", []*Result{
			{Scenario: "a", Clock: ClockVirtual, Duration: 10 * time.Second, Wall: time.Second},
			{Scenario: "b", Clock: ClockVirtual, Duration: 5 * time.Second},
		}, `<span id="totals">15.00s of network time in 1.00s of wall time, ×10.0 real time</span>`},
		{"fast", []*Result{
			{Scenario: "a", Clock: ClockVirtual, Duration: time.Hour, Wall: 2 * time.Second},
			{Scenario: "b", Clock: ClockReal, Duration: time.Second, Wall: time.Second},
		}, `<span id="totals">3601.00s of network time in 3.00s of wall time, ×1200 real time</span>`},
		{"none measured", []*Result{{Scenario: "a", Duration: 5 * time.Second}},
			`<span id="totals">5.00s of network time</span>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, WriteHTML(&b, tt.results, HTMLOptions{}))
			assert.Contains(t, b.String(), tt.want)
		})
	}
}

// TestHTMLCaptureLinks: a capture outside the report's directory is linked
// by an escaped file: URL, not html/template's #ZgotmplZ for a rejected URL.
func TestHTMLCaptureLinks(t *testing.T) {
	tests := []struct {
		name, base, capture, want string
	}{
		{"inside", "/tmp/rep", "/tmp/rep/caps/internet.pcapng", `<a href="caps/internet.pcapng">caps/internet.pcapng</a>`},
		{"elsewhere", "/tmp/rep", "/srv/lab caps/a#b.pcapng", `<a href="file:///srv/lab%20caps/a%23b.pcapng">/srv/lab caps/a#b.pcapng</a>`},
		{"sibling with a common prefix", "/tmp/rep", "/tmp/report/x.pcapng", `<a href="file:///tmp/report/x.pcapng">/tmp/report/x.pcapng</a>`},
		{"no base, relative", "", "caps/x.pcapng", `<a href="caps/x.pcapng">caps/x.pcapng</a>`},
		{"colon in a relative name", "/tmp/rep", "/tmp/rep/a:b.pcapng", `<a href="./a:b.pcapng">a:b.pcapng</a>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := sample()[:1]
			res[0].Captures = []string{tt.capture}
			var b bytes.Buffer
			require.NoError(t, WriteHTML(&b, res, HTMLOptions{CaptureBase: tt.base}))
			assert.Contains(t, b.String(), tt.want)
			assert.NotContains(t, b.String(), "ZgotmplZ")
		})
	}
}

// TestHTMLInChromium opens the report in headless Chromium (Debian's
// chromium package) and checks the matrix made it into the rendered DOM.
func TestHTMLInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	dir := t.TempDir()
	results := sample()
	results[0].Captures = []string{writeCapture(t, filepath.Join(t.TempDir(), "internet.pcapng"), "x")}
	paths, err := WriteDir(dir, results)
	require.NoError(t, err)
	html := paths[2]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args := chromiumArgs(filepath.Join(t.TempDir(), "profile"))
	out, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", "file://"+html)...).Output()
	require.NoError(t, err)
	dom := string(out)
	assert.Contains(t, dom, `<table id="nat-matrix">`)
	assert.Equal(t, 1, strings.Count(dom, `<td class="relay"`), "the symmetric pair's cell")
	assert.Contains(t, dom, `<span id="totals">3.00s of network time in 1.04s of wall time, ×2.88 real time</span>`)
	assert.Contains(t, dom, `<span class="timing">virtual clock · 2.00s of network time in 40ms of wall time, ×50.0 real time</span>`)
	shot := filepath.Join(dir, "report.png")
	_, err = exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, "--window-size=1280,900", "file://"+html)...).CombinedOutput()
	require.NoError(t, err)
	fi, err := os.Stat(shot)
	require.NoError(t, err)
	assert.Greater(t, fi.Size(), int64(10_000), "a rendered page, not a blank one")
}

// chromiumArgs are headless Chromium's flags for a test, with its profile in
// dir.
func chromiumArgs(dir string) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + dir}
}

func writeCapture(t *testing.T, path, content string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// probeScript, appended to a copy of the report next to it, fetches every
// link to another file as Chromium resolves it and lists href, status and
// content. An href of #ZgotmplZ resolves to the page itself, so it lists
// nothing.
const probeScript = `<script>
(async () => {
  const out = [];
  for (const a of document.links) {
    if (a.pathname === location.pathname) continue; // the page's own anchors
    try { const r = await fetch(a.href); out.push(a.href + " " + r.status + " " + (await r.text())); }
    catch (e) { out.push(a.href + " error"); }
  }
  const p = document.createElement("pre"); p.id = "probe"; p.textContent = out.join("\n"); document.body.appendChild(p);
})();
</script>`

// TestCaptureLinksInChromium writes a report with captures inside its
// directory and elsewhere, moves the report directory, deletes the captures
// outside it, and has headless Chromium follow every capture link: each
// resolves to a file in the moved report holding that capture.
func TestCaptureLinksInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	tests := []struct {
		name     string
		inside   bool   // the capture directory is under the report's
		wantPath string // where the link leads, under the moved report
	}{
		{"capture inside report", true, "caps/internet.pcapng"},
		{"capture elsewhere", false, "captures/pair-full-cone+symmetric/internet.pcapng"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			rep := filepath.Join(root, "report")
			caps := filepath.Join(root, "lab caps")
			if tt.inside {
				caps = filepath.Join(rep, "caps")
			}
			results := sample()[:1]
			results[0].Captures = []string{writeCapture(t, filepath.Join(caps, "internet.pcapng"), "pcapng of internet")}
			paths, err := WriteDir(rep, results)
			require.NoError(t, err)
			page, err := os.ReadFile(paths[2])
			require.NoError(t, err)
			assert.NotContains(t, string(page), "ZgotmplZ")

			moved := filepath.Join(root, "moved", "report")
			require.NoError(t, os.MkdirAll(filepath.Dir(moved), 0o755))
			require.NoError(t, os.Rename(rep, moved))
			if !tt.inside {
				require.NoError(t, os.RemoveAll(caps))
			}
			probe := filepath.Join(moved, "probe.html")
			require.NoError(t, os.WriteFile(probe, append(page, probeScript...), 0o644))

			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			args := append(chromiumArgs(filepath.Join(root, "profile")), "--allow-file-access-from-files",
				"--virtual-time-budget=10000", "--dump-dom", "file://"+probe)
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			require.NoError(t, err)
			m := regexp.MustCompile(`(?s)<pre id="probe">(.*?)</pre>`).FindStringSubmatch(string(out))
			require.NotNil(t, m, "the probe ran: %s", out)
			want := (&url.URL{Scheme: "file", Path: filepath.Join(moved, tt.wantPath)}).String()
			assert.Equal(t, []string{want + " 200 pcapng of internet"}, strings.Split(m[1], "\n"))
		})
	}
}
