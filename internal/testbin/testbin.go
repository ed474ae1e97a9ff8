// Package testbin lets a test run its own binary as another user: a
// copy where that user may reach and run it.
package testbin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// ForAnyone copies the running test binary, as name, into a fresh
// temporary directory that every user may enter, mode 0755, and returns
// the copy's path. (t.TempDir's directories are 0700, and the go tool's build
// directory is its user's.)
func ForAnyone(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		require.NoError(t, os.Chmod(d, 0o755)) //nolint:gosec // the point: another user enters it
	}
	self, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	bin := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(bin, b, 0o755)) //nolint:gosec // the point: another user runs it
	return bin
}
