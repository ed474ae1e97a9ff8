//go:build pro

package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// TestNamespaceAgentPeerPolicy: an agent in its namespaces reaches an
// allowed peer by TCP end to end through the overlay (its packets carried
// straight to WireGuard, not through the gateway's stack), a peer the
// policy does not name fails at once with a reset, and both decisions are
// in the audit log, once each.
func TestNamespaceAgentPeerPolicy(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(testPolicy), 0o600))
	cfg := m.config(t, "agent", state)
	cfg.SOCKS5, cfg.HTTPProxy = "", ""
	cfg.EgressPolicy = pol
	d := startPod(t, cfg)

	script := `curl -sS --max-time 20 --retry 10 --retry-all-errors --retry-delay 1 http://web:8080/; echo
t0=$(date +%s%N); curl -sS --max-time 10 http://vault:8080/ 2>&1; echo "vault after $(( ($(date +%s%N) - t0) / 1000000 )) ms"`
	var out, errOut strings.Builder
	code, err := d.Run(t.Context(), []string{"sh", "-c", script}, sandbox.Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	t.Logf("stdout:\n%s\nstderr:\n%s", &out, &errOut)
	assert.Equal(t, 0, code)
	o := out.String()
	assert.Contains(t, o, "hello from web, you are "+d.Node().Address().Addr().String()+":")
	assert.Contains(t, o, "Failed to connect to vault", "refused with a reset")
	var ms int
	if i := strings.Index(o, "vault after "); assert.GreaterOrEqual(t, i, 0) {
		_, err := fmt.Sscanf(o[i:], "vault after %d ms", &ms)
		require.NoError(t, err)
		assert.Less(t, ms, 2000, "a denied peer fails at once")
	}
	assert.Positive(t, d.Stack().TUN().Stats().InDiverted, "web's answer went straight to the agent's link")
	assert.Zero(t, d.Stack().DirectFlows(), "the agent's flows are forgotten when it exits")

	require.NoError(t, d.Close())
	log := strings.Join(readLines(t, filepath.Join(state, "audit.jsonl")), "\n")
	assert.Contains(t, log, `"decision":"deny","proto":"tcp","dst":"`)
	assert.Contains(t, log, `"rule":"overlay peer not named","detail":"peer vault"`)
	allowWeb := `"kind":"egress","decision":"allow","proto":"tcp","dst":"` + m.web.Addr().String() + `:8080"`
	assert.Contains(t, log, allowWeb)
}
