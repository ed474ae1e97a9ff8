package runner

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/unixhttp"
	"github.com/latticelab/lattice/sandbox"
)

// idleClientConns counts the HTTP client connections kept alive in this
// process.
func idleClientConns() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "net/http.(*persistConn).readLoop")
}

// TestGVisorChildCloseDropsConnections: closing the lab's handle on a child
// drops its keep-alive connection to the child's socket, even if the
// socket is still served (the child has exited, but its server need not
// have noticed), so no client goroutine outlives the handle.
func TestGVisorChildCloseDropsConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lab.sock")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeChildJSON(w, sandbox.Status{Name: "agent"})
	})
	stop, err := unixhttp.Serve(sock, mux)
	require.NoError(t, err)
	defer stop()

	cmd := exec.Command("cat") // stands in for the child: it exits when its stdin closes
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &gvisorChild{name: "agent", cmd: cmd, stdin: stdin, client: unixhttp.Client(sock), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	before := idleClientConns()
	st, err := c.refresh(t.Context())
	require.NoError(t, err)
	require.Equal(t, "agent", st.Name)
	require.Equal(t, before+1, idleClientConns(), "the status request leaves a keep-alive connection")

	require.NoError(t, c.close())
	assert.Eventually(t, func() bool { return idleClientConns() == before }, 2*time.Second, 10*time.Millisecond,
		"close leaves the client's connection open")
}
