package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func report(vals ...float64) *Report {
	r := &Report{Date: time.Unix(0, 0).UTC(), Go: "go1.26", CPUs: 2}
	names := []struct{ name, better string }{{"datapath_direct", "higher"}, {"connect_direct", "lower"}}
	for i, v := range vals {
		r.Metrics = append(r.Metrics, Metric{Name: names[i].name, Value: v, Unit: "x", Better: names[i].better})
	}
	return r
}

func TestCompare(t *testing.T) {
	base := report(300, 100)
	tests := []struct {
		name string
		cur  *Report
		want []bool
	}{
		{"same", report(300, 100), []bool{false, false}},
		{"within tolerance", report(250, 115), []bool{false, false}},
		{"slower data path", report(200, 100), []bool{true, false}},
		{"slower connect", report(300, 130), []bool{false, true}},
		{"faster everything", report(900, 10), []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.cur, base, 0.2)
			require.Len(t, got, 2)
			for i, c := range got {
				assert.Equal(t, tt.want[i], c.Regression, c.Metric.Name)
			}
		})
	}
}

func TestJSONAndSVG(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, report(300, 100)))
	got, err := ReadJSON(&b)
	require.NoError(t, err)
	assert.Equal(t, report(300, 100), got)

	var svg bytes.Buffer
	require.NoError(t, WriteSVG(&svg, report(200, 100), report(300, 100)))
	s := svg.String()
	assert.True(t, strings.HasPrefix(s, `<svg xmlns="http://www.w3.org/2000/svg"`))
	assert.Contains(t, s, `fill="#dc2626"`, "a worse figure is red")
	assert.Contains(t, s, "baseline 300.0")
	assert.Contains(t, s, "200.0 x")
}

func TestPeakRSS(t *testing.T) {
	if rss := peakRSS(); rss != 0 {
		assert.Greater(t, rss, int64(1<<20))
	}
}
