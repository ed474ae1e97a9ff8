package unixhttp

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	require.NoError(t, os.WriteFile(path, nil, 0o600)) // stale
	stop, err := Serve(path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	c := Client(path)
	resp, err := c.Get("http://x/anything")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(b))
	c.CloseIdleConnections()
	stop()
	_, err = os.Stat(path)
	assert.True(t, os.IsNotExist(err), "the socket is removed")
}
