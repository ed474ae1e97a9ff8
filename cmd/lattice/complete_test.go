package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/meshtest"
)

// complete runs cobra's hidden completion command as a shell would and
// returns the candidates and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	var out, errOut strings.Builder
	require.Equal(t, exitOK, execute(t.Context(), append([]string{"__complete"}, args...), &out, &errOut), errOut.String())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.NotEmpty(t, lines)
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestCompletion(t *testing.T) {
	const noFile = ":4" // cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"up relay transport", []string{"up", "--relay-transport", ""}, []string{"tcp", "quic", "race"}},
		{"sandbox start mode", []string{"sandbox", "start", "--mode", ""}, []string{"pod", "gvisor"}},
		{"sandbox run relay transport", []string{"sandbox", "run", "--relay-transport", ""}, []string{"tcp", "quic", "race"}},
		{"sandbox platform", []string{"sandbox", "start", "--platform", ""}, []string{"systrap", "ptrace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, directive := complete(t, tc.args...)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, noFile, directive)
		})
	}
	got, _ := complete(t, "")
	assert.Subset(t, got, []string{"version\tPrint the version, commit, edition and Go version", "up\tRun a Lattice node: register, reach every peer, upgrade to direct paths"})
	got, _ = complete(t, "sandbox", "start", "--")
	assert.Contains(t, got, "--control\tcontrol's NATS URL, tls://HOST:PORT (nats:// on loopback or with --insecure) (required; sandboxes register over NATS only)")
	for _, g := range got {
		assert.NotContains(t, g, "--server-url", "the hidden alias is not offered")
	}

	for _, shell := range []string{"bash", "zsh", "fish"} {
		var out, errOut strings.Builder
		require.Equal(t, exitOK, execute(t.Context(), []string{"completion", shell}, &out, &errOut), errOut.String())
		assert.Contains(t, out.String(), "lattice", shell)
	}
}

// TestCompletePeerNames: `sandbox agent resolve` and `dial` complete the
// peers a running sandbox knows.
func TestCompletePeerNames(t *testing.T) {
	if !edition.Pro() {
		t.Skip("sandbox agent is a Pro feature: run with -tags pro (make test runs both editions)")
	}
	w := meshtest.Start(t)
	w.Peer(t, "web")
	state := t.TempDir()
	out, errOut, stop := start(t, "sandbox", "start", "--name", "agent", "--control", w.NATSURL, "--token", meshtest.Token,
		"--state-dir", state, "--listen-addr", "127.0.0.1")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "control socket") }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)
	require.Eventually(t, func() bool {
		got, _ := complete(t, "sandbox", "agent", "--state-dir", state, "resolve", "")
		return len(got) == 1 && got[0] == "web"
	}, 20*time.Second, 50*time.Millisecond)
	got, directive := complete(t, "sandbox", "agent", "--state-dir", state, "dial", "")
	assert.Equal(t, []string{"web:"}, got)
	assert.Equal(t, ":6", directive, "NoSpace|NoFileComp: the port follows")
	assert.Equal(t, exitOK, stop(), "%s", errOut)
}
