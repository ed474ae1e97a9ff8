package report

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
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
			Duration: 2 * time.Second, Status: Passed,
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
			Scenario: "pair-symmetric+symmetric", Topology: "nat-matrix", Edition: "community", Started: start, Duration: time.Second, Status: Failed,
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
	} {
		assert.Contains(t, page, want)
	}
	assert.NotContains(t, page, "<script", "self-contained and static")
}

// TestHTMLInChromium opens the report in headless Chromium (Debian's
// chromium package) and checks the matrix made it into the rendered DOM.
func TestHTMLInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	dir := t.TempDir()
	paths, err := WriteDir(dir, sample())
	require.NoError(t, err)
	html := paths[2]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(dir, "profile")}
	out, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", "file://"+html)...).Output()
	require.NoError(t, err)
	dom := string(out)
	assert.Contains(t, dom, `<table id="nat-matrix">`)
	assert.Equal(t, 1, strings.Count(dom, `<td class="relay"`), "the symmetric pair's cell")
	shot := filepath.Join(dir, "report.png")
	_, err = exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, "--window-size=1280,900", "file://"+html)...).CombinedOutput()
	require.NoError(t, err)
	fi, err := os.Stat(shot)
	require.NoError(t, err)
	assert.Greater(t, fi.Size(), int64(10_000), "a rendered page, not a blank one")
}
