package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// TestMetricsListenRefusesRemote: every daemon refuses a non-loopback
// --metrics-listen before starting anything, unless --metrics-allow-remote.
func TestMetricsListenRefusesRemote(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, bytes.Repeat([]byte("s"), 32), 0o600))
	for _, args := range [][]string{
		{"relay", "--secret-file", secret},
		{"control", "--embedded-nats", "--token-file", secret, "--state-dir", dir},
		{"up", "--control", "nats://127.0.0.1:1", "--token", "t", "--state-dir", "mem:", "--userspace"},
		{"sandbox", "start", "--control", "nats://127.0.0.1:1", "--token", "t", "--state-dir", "mem:", "--name", "a"},
	} {
		for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9090"} {
			t.Run(args[0]+"/"+addr, func(t *testing.T) {
				var out, errb bytes.Buffer
				code := execute(context.Background(), append(args, "--metrics-listen", addr), &out, &errb)
				assert.Equal(t, exitUsage, code, "%s%s", out.String(), errb.String())
				assert.Contains(t, errb.String(), "refusing to listen beyond loopback")
				assert.Contains(t, errb.String(), "--metrics-allow-remote")
			})
		}
	}
}

// TestControlMetrics: lattice control's /metrics counts a registration
// and a refused one, beside the Go runtime's metrics, in JSON logs.
func TestControlMetrics(t *testing.T) {
	tokens := writeFile(t, "tokens", "metrics-test-token-0123456789\n", 0o600)
	cout, cerr, cstop := start(t, "control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
		"--token-file", tokens, "--state-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0", "--log-format", "json")
	httpRE := regexp.MustCompile(`HTTP registration on (http://[0-9.:]+)/v1/register`)
	metricsRE := regexp.MustCompile(`control: metrics on (http://[0-9.:]+/metrics)`)
	require.Eventually(t, func() bool { return metricsRE.MatchString(cout.String()) }, 10*time.Second, 10*time.Millisecond, "%s%s", cout, cerr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := httpRE.FindStringSubmatch(cout.String())[1]
	_, err := controlapi.RegisterHTTP(ctx, netx.OS, base, controlapi.Join{Token: "metrics-test-token-0123456789", Name: "m1", Key: key.NewPrivate()})
	require.NoError(t, err)
	_, err = controlapi.RegisterHTTP(ctx, netx.OS, base, controlapi.Join{Token: "wrong-token-0123456789", Name: "m2", Key: key.NewPrivate()})
	require.Error(t, err)

	resp, err := http.Get(metricsRE.FindStringSubmatch(cout.String())[1])
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lattice_control_registrations_total{result="registered"} 1`, `lattice_control_registrations_total{result="refused"} 1`,
		`lattice_control_peer_events_total{type="add"} 1`, "go_goroutines "} {
		assert.Contains(t, string(body), want)
	}
	assert.Equal(t, exitOK, cstop())
	for _, line := range strings.Split(strings.TrimSpace(cerr.String()), "\n") {
		assert.True(t, json.Valid([]byte(line)), "not a JSON log line: %q", line)
	}
}

// sample is the value of the first series on a /metrics page that the
// regular expression series matches whole, or -1 when there is none.
func sample(page, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + series + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}
