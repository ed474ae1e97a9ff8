//go:build pro

package scenariotest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

// TestPingDeniedByPolicy: a ping from a pod sandbox whose egress policy
// refuses it fails at once, naming the rule, instead of retrying until the
// scenario's timeout (on the wall clock) or spinning at one instant with
// the clock held still (in virtual time, until the watchdog ends the
// binary).
func TestPingDeniedByPolicy(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("version: 1\ndefault: deny\nrules:\n  - allow: peer:web\n    ports: 80\n    proto: tcp\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ping.yaml"), []byte(`name: ping-denied
requires: [pro]
timeout: 60s
topology:
  networks: {internet: {cidr: 203.0.113.0/24}}
  control: {network: internet}
  nodes:
    agent: {network: internet, sandbox: {mode: pod, egress_policy: policy.yaml}}
    web: {network: internet}
steps:
  - ping: {from: agent, to: web, count: 1}
`), 0o600))
	f, err := scenario.Load(filepath.Join(dir, "ping.yaml"))
	require.NoError(t, err)
	res := Run(t, f, Options{Clock: "virtual", Watchdog: 30 * time.Second, Options: runner.Options{StateDir: t.TempDir()}})
	require.Equal(t, report.Failed, res.Status)
	require.Len(t, res.Steps, 1)
	assert.Contains(t, res.Steps[0].Error, "ping from agent to web")
	assert.Contains(t, res.Steps[0].Error, "/udp denied by")
	assert.Less(t, res.Steps[0].Duration, 5*time.Second, "a refusal is final: no retries until the timeout")
}
