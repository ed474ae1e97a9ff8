//go:build !pro

package egress

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/edition"
)

// TestEBPFIsPro: the community edition refuses the eBPF backend by name.
func TestEBPFIsPro(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(pol, []byte("default: deny\n"), 0o600))
	_, err := Start(Config{Interface: "lo", Policy: pol, Backend: EBPF})
	require.ErrorIs(t, err, edition.ErrProFeature)
	assert.Contains(t, err.Error(), "the eBPF egress backend (--egress-backend ebpf) is a Pro feature")
}
