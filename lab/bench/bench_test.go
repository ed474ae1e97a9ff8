package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
	p := filepath.Join(t.TempDir(), "bench.json")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	got, err := LoadJSON(p)
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

func TestParseLoadAverage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.52 0.58 0.59 1/257 3621\n", 0.52, true},
		{"12.64 10.93 9.60 5/900 1\n", 12.64, true},
		{"", 0, false},
		{"NaN 1 1 1/1 1", 0, false},
		{"-1 0 0 1/1 1", 0, false},
		{"Inf 0 0", 0, false},
		{"x 0 0", 0, false},
	} {
		got, err := parseLoadAverage(tc.in)
		if tc.ok {
			require.NoError(t, err, "%q", tc.in)
		} else {
			require.Error(t, err, "%q", tc.in)
		}
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func FuzzParseLoadAverage(f *testing.F) {
	f.Add("0.52 0.58 0.59 1/257 3621\n")
	f.Add("NaN")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLoadAverage(s)
		if err == nil && (l < 0 || l != l || l > 1e9) {
			t.Fatalf("%q: accepted %v", s, l)
		}
	})
}

// TestBusyMachineWarned: a run on a machine whose load average is above
// its core count says so, at the start and at the end, and the report
// keeps both figures.
func TestBusyMachineWarned(t *testing.T) {
	loads := []float64{9.5, 0.4}
	old := readLoadAverage
	readLoadAverage = func() float64 { l := loads[0]; loads = loads[1:]; return l }
	defer func() { readLoadAverage = old }()
	var lines []string
	rep, err := Run(t.Context(), Topologies{}, Options{Only: []string{"none"}, Progress: func(s string) { lines = append(lines, s) }})
	require.NoError(t, err)
	assert.Equal(t, [2]float64{9.5, 0.4}, rep.Load)
	cores := runtime.NumCPU()
	if cores >= 9 {
		assert.Empty(t, lines, "load 9.5 is not busy on %d cores", cores)
		return
	}
	require.Len(t, lines, 1, "only the start was busy: %q", lines)
	assert.Contains(t, lines[0], fmt.Sprintf("warning: load average 9.5 on %d cores at the start", cores))
}

// TestRunRefusesNegativeRuns: a negative run count is an error before any
// lab starts (the connect figures' median of no runs panicked).
func TestRunRefusesNegativeRuns(t *testing.T) {
	_, err := Run(t.Context(), Topologies{}, Options{Runs: -1})
	require.EqualError(t, err, "bench: -1 runs; want at least 1 (0 for the default, 5)")
}
