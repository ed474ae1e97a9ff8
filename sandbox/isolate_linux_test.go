package sandbox_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
	"github.com/latticelab/lattice/sandbox/podinit"
)

// TestNamespaceAgentOverTUN: run as root, the agent's interface is a TUN
// device (cmd/lattice's tests run the sandbox unprivileged, where this
// machine's 0600 /dev/net/tun leaves the veth and packet socket): curl
// fetches from a peer by name, ping is answered, the agent sees its own
// namespaces and no proxy variables.
func TestNamespaceAgentOverTUN(t *testing.T) {
	m := newMesh(t)
	d := startNamespacePod(t, m)
	var out, errOut strings.Builder
	script := `ip -o link show lattice0; ip route; env | grep -i '_proxy=' && echo PROXY VARIABLES SET
curl -sS --max-time 20 --retry 10 --retry-all-errors --retry-delay 1 http://web:8080/; echo
ping -c 1 -W 10 vault >/dev/null && echo ping ok
mount -t tmpfs tmpfs /tmp 2>/dev/null && echo MOUNTED
ls /proc | grep -c '^[0-9]'`
	code, err := d.Run(t.Context(), []string{"sh", "-c", script}, sandbox.Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	t.Logf("stdout:\n%s\nstderr:\n%s", &out, &errOut)
	assert.Equal(t, 0, code)
	o := out.String()
	assert.Contains(t, o, "lattice0: <POINTOPOINT", "a TUN device")
	assert.Contains(t, o, "default dev lattice0")
	assert.NotContains(t, o, "PROXY VARIABLES SET")
	assert.Contains(t, o, "hello from web, you are "+d.Node().Address().Addr().String()+":")
	assert.Contains(t, o, "ping ok", "vault, through the relay, answers")
	if podinit.LandlockABI() > 0 {
		// Root of its own user and mount namespaces, the agent could
		// mount; its Landlock domain refuses it.
		assert.NotContains(t, o, "MOUNTED", "the agent mounted a tmpfs")
	}
	// init, sh and ls: the PID namespace holds the agent's processes only.
	assert.True(t, strings.HasSuffix(strings.TrimSpace(o), "\n3") || strings.HasSuffix(strings.TrimSpace(o), "\n4"), "processes in the agent's /proc: %q", o)

	out.Reset()
	code, err = d.Run(t.Context(), []string{"sh", "-c", "cat; exit 9"}, sandbox.Stdio{Stdin: strings.NewReader("piped"), Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 9, code, "the agent's exit code")
	assert.Equal(t, "piped", out.String(), "stdin reaches the agent")
	_, err = d.Run(t.Context(), []string{"/no/such/agent"}, sandbox.Stdio{})
	assert.ErrorContains(t, err, "/no/such/agent")
}
