package sandbox_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/sandbox"
)

// TestLoopbackDeniedByDefault: a pod sandbox with no policy cannot reach a
// service on its host's loopback, in either family, nor through 0.0.0.0
// or NAT64; the listener never sees a connection, and the log says why.
func TestLoopbackDeniedByDefault(t *testing.T) {
	m := newMesh(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	state := t.TempDir()
	d := startPod(t, m.config(t, "agent", state))
	for _, tc := range []struct{ host, rule string }{
		{"127.0.0.1", "loopback"}, {"localhost", "loopback"}, {"::1", "loopback"}, {"0.0.0.0", "unspecified"},
		{"64:ff9b::7f00:1", "loopback via nat64"}, {"168.63.129.16", "metadata"}, {"169.254.0.1", "link-local"},
	} {
		start := time.Now()
		_, err := d.Dial(t.Context(), "tcp", net.JoinHostPort(tc.host, port))
		require.ErrorIs(t, err, sandbox.ErrDenied, tc.host)
		assert.Contains(t, err.Error(), "denied by "+tc.rule, tc.host)
		assert.Less(t, time.Since(start), time.Second)
	}
	select {
	case <-accepted:
		t.Fatal("a denied dial reached the loopback listener")
	default:
	}
	require.NoError(t, d.Close())
	b, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"decision":"deny","proto":"tcp","dst":"127.0.0.1:`+port+`","rule":"loopback"`)
}
