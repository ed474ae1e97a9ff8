package sandboxcmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// TestSandboxNames: --name completes the sandboxes under the state root
// that have a control socket.
func TestSandboxNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"agent-1", "stopped", "agent-2"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, n), 0o700))
	}
	for _, n := range []string{"agent-1", "agent-2"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n, sandbox.SocketName), nil, 0o600))
	}
	assert.Equal(t, []string{"agent-1", "agent-2"}, sandboxNames(dir), "only sandboxes with a control socket")
	assert.Empty(t, sandboxNames(filepath.Join(dir, "none")))
}
