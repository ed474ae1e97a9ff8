package runner

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/report"
)

// TestMetricsTransferReport runs metrics-transfer.yaml (its assert_metric
// steps scrape the nodes' collectors) and checks the report: the sampled
// series show the 8 MiB direct transfer on laptop's direct tx and the
// 2 MiB relayed one on its relay tx, the HTML plots them, and the relayed
// pair says why in the node's words.
func TestMetricsTransferReport(t *testing.T) {
	res := runFile(t, "../../scenarios/metrics-transfer.yaml")
	var laptop *report.NodeTraffic
	for i := range res.Traffic {
		if res.Traffic[i].Node == "laptop" {
			laptop = &res.Traffic[i]
		}
	}
	require.NotNil(t, laptop, "laptop is sampled")
	require.GreaterOrEqual(t, len(laptop.Samples), 3)
	first, last := laptop.Samples[0], laptop.Samples[len(laptop.Samples)-1]
	assert.Less(t, first.DirectTx, uint64(1<<20), "sampled before the transfer")
	assert.GreaterOrEqual(t, last.DirectTx, uint64(8<<20))
	assert.GreaterOrEqual(t, last.RelayTx, uint64(2<<20))
	for i := 1; i < len(laptop.Samples); i++ {
		p, s := laptop.Samples[i-1], laptop.Samples[i]
		assert.LessOrEqual(t, p.At, s.At, "in time order")
		assert.LessOrEqual(t, p.DirectTx, s.DirectTx, "a counter never goes down")
	}

	var b bytes.Buffer
	require.NoError(t, report.WriteHTML(&b, []*report.Result{res}, report.HTMLOptions{}))
	html := b.String()
	m := regexp.MustCompile(`<polyline data-series="laptop direct tx"[^>]* points="([^"]*)"><title>laptop direct tx: ([0-9.]+) MiB</title>`).FindStringSubmatch(html)
	require.NotNil(t, m, "the report plots laptop's direct tx")
	assert.Len(t, strings.Fields(m[1]), len(laptop.Samples))
	mib, err := strconv.ParseFloat(m[2], 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, mib, 8.0)
	assert.Contains(t, html, `data-series="desktop relay rx"`)

	var relayed *report.Pair
	for i := range res.Pairs {
		if p := &res.Pairs[i]; p.From == "laptop" && p.To == "desktop" {
			relayed = p
		}
	}
	require.NotNil(t, relayed)
	require.Equal(t, "relay", relayed.Path)
	require.NotEmpty(t, relayed.Why, "the node says why laptop → desktop is relayed")
	assert.NotContains(t, relayed.Why, "canceled by caller")
	assert.Contains(t, html, "<td>laptop → desktop</td><td>"+strings.ReplaceAll(relayed.Why, "'", "&#39;")+"</td>")
	for _, s := range res.Steps {
		assert.NotContains(t, s.Detail, "canceled by caller", "step %d's detail", s.Index)
	}
}
