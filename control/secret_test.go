package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFileStoreSecret: a file registry keeps control's secret beside it
// (0600), so a control restarted on it keeps its register key; a secret
// file of the wrong size is an error naming it, left as it was.
func TestFileStoreSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStore(path)
	require.NoError(t, err)
	a, err := s.ControlSecret(context.Background())
	require.NoError(t, err)
	require.Len(t, a, controlSecretBytes)
	fi, err := os.Stat(SecretPath(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NoError(t, s.Close())

	s2, err := OpenFileStore(path)
	require.NoError(t, err)
	defer s2.Close()
	b, err := s2.ControlSecret(context.Background())
	require.NoError(t, err)
	assert.Equal(t, a, b, "a reopened registry has another secret")

	st1, err := newStamper(a)
	require.NoError(t, err)
	st2, err := newStamper(b)
	require.NoError(t, err)
	assert.Equal(t, st1.pub, st2.pub, "the register key changed")

	bad := filepath.Join(t.TempDir(), "registry.json")
	require.NoError(t, os.WriteFile(SecretPath(bad), []byte("short"), 0o600))
	s3, err := OpenFileStore(bad)
	require.NoError(t, err)
	defer s3.Close()
	_, err = s3.ControlSecret(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), SecretPath(bad))
	got, _ := os.ReadFile(SecretPath(bad))
	assert.Equal(t, "short", string(got), "the file was changed")
}
