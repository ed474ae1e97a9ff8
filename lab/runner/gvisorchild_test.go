package runner

import (
	"encoding/json"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// idleClientConns counts the HTTP client connections kept alive in this
// process.
func idleClientConns() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "net/http.(*persistConn).readLoop")
}

// statusOnly is a sandbox API that only reports its status.
type statusOnly struct{ st sandbox.Status }

func (s statusOnly) Status() sandbox.Status { return s.st }

// TestGVisorChildCloseDropsConnections: closing the lab's handle on a child
// drops its keep-alive connection to the child's socket, even if the
// socket is still served (the child has exited, but its server need not
// have noticed), so no client goroutine outlives the handle.
func TestGVisorChildCloseDropsConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), sandbox.SocketName)
	stop, err := sandbox.ServeAPI(sock, statusOnly{sandbox.Status{Name: "agent", Mode: sandbox.ModeGVisor}})
	require.NoError(t, err)
	defer stop()

	cmd := exec.Command("cat") // stands in for the child: it exits when its stdin closes
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &gvisorChild{name: "agent", cmd: cmd, stdin: stdin, client: sandbox.NewClient(sock), done: make(chan struct{})}
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

// TestGVisorChildFile: the DriverConfig the lab builds reaches the child
// whole, with the logger the child makes; Go values that cannot travel
// are refused by name rather than lost.
func TestGVisorChildFile(t *testing.T) {
	cfg := sandbox.DriverConfig{Name: "agent", ServerURL: "nats://203.0.113.1:4222", Token: "secret",
		StateDir: "/state/agent", ListenPort: 51820, RelayTransport: "quic", EgressPolicy: "/p.yaml", Runsc: "/bin/runsc",
		ICE: node.ICEConfig{STUN: []string{"203.0.113.1:3478"}, DeadAfter: time.Second, RetryMin: 2 * time.Second,
			RetryMax: 3 * time.Second, AttemptTimeout: 4 * time.Second, RelayOnly: true}}
	f, err := newChildFile(cfg)
	require.NoError(t, err)
	data, err := json.Marshal(f)
	require.NoError(t, err)
	var back childFile
	require.NoError(t, json.Unmarshal(data, &back))
	got := back.config(nil)
	assert.Equal(t, cfg, got)

	cfg.ICE.Candidates = func(netip.Addr) bool { return true }
	_, err = newChildFile(cfg)
	assert.ErrorContains(t, err, "ICE.Candidates")
}
