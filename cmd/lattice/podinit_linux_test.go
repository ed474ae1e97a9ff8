package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox/podinit"
)

// TestPodInitSkipsHeavyInits: the lattice binary re-executed as the agent's
// init (here with no sandbox on its fd 3, so it exits at once) decides so
// before the package inits that cost most of an exec: every agent start
// pays them otherwise.
func TestPodInitSkipsHeavyInits(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Args = []string{podinit.Arg0, "true"}
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "output:\n%s", out)
	assert.Equal(t, 125, ee.ExitCode(), "the init could not read its config:\n%s", out)
	inits := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "init" {
			continue
		}
		inits++
		for _, heavy := range []string{"github.com/nats-io/nats-server/v2/server", "gvisor.dev/gvisor/pkg/tcpip/stack",
			"github.com/prometheus/client_golang/prometheus", "github.com/latticelab/lattice/runsc", "net/netip"} {
			assert.NotEqual(t, heavy, f[1], "initialised before the pod init's check")
		}
	}
	assert.Positive(t, inits, "no init trace:\n%s", out)
}
