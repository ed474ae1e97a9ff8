package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHTMLTraffic: a result with sampled traffic gets, per node, a chart
// with a line for each path and direction whose points rise with the
// counters; relayed pairs are listed with the node's why.
func TestHTMLTraffic(t *testing.T) {
	r := &Result{Scenario: "metrics", Topology: "quickstart", Status: Passed, Duration: 4 * time.Second,
		Pairs: []Pair{
			{From: "laptop", To: "desktop", Path: "relay", ICE: "connecting canceled by caller",
				Why: "no direct path: laptop's NAT filters by address and port and desktop's maps per destination (symmetric)"},
			{From: "laptop", To: "tablet", Path: "direct"},
		},
		Traffic: []NodeTraffic{
			{Node: "laptop", Samples: []TrafficSample{{At: 0}, {At: time.Second, DirectTx: 4 << 20, RelayTx: 1 << 10}, {At: 3 * time.Second, DirectTx: 8 << 20, DirectRx: 1 << 20, RelayTx: 2 << 20}}},
			{Node: "tablet", Samples: []TrafficSample{{At: 0}, {At: 3 * time.Second, DirectRx: 8 << 20}}},
		}}
	var b bytes.Buffer
	require.NoError(t, WriteHTML(&b, []*Result{r}, HTMLOptions{}))
	html := b.String()
	assert.Contains(t, html, "<h3>Bytes per path over time</h3>")
	for _, node := range []string{"laptop", "tablet"} {
		for _, s := range []string{"direct tx", "direct rx", "relay tx", "relay rx"} {
			assert.Contains(t, html, `data-series="`+node+` `+s+`"`)
		}
	}
	m := regexp.MustCompile(`<polyline data-series="laptop direct tx"[^>]* points="([^"]*)"><title>laptop direct tx: 8.0 MiB</title>`).FindStringSubmatch(html)
	require.NotNil(t, m, "laptop's direct tx line with its final count")
	pts := strings.Fields(m[1])
	require.Len(t, pts, 3, "one point per sample")
	assert.Equal(t, "48.0,120.0", pts[0], "starts at zero, at the left")
	assert.Equal(t, "235.5,14.0", pts[2], "ends at the peak, three quarters of the run across")
	assert.NotRegexp(t, `(src|href)="?https?:`, html, "no external assets")
	assert.Contains(t, html, `<td>laptop → desktop</td><td>no direct path: laptop&#39;s NAT filters by address and port and desktop&#39;s maps per destination (symmetric)</td>`)
	assert.NotContains(t, html, "canceled by caller", "the why, never the library's error")
	assert.NotContains(t, html, "<td>laptop → tablet</td><td>–</td>", "direct pairs are not in the why-relayed table")

	r.Traffic = nil
	b.Reset()
	require.NoError(t, WriteHTML(&b, []*Result{r}, HTMLOptions{}))
	assert.NotContains(t, b.String(), "Bytes per path over time", "no samples, no chart")
}
