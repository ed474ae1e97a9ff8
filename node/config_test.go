package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/syncbuf"
	"github.com/latticelab/lattice/node"
)

// TestStartConfigErrors: a Config missing what it needs, or naming a
// relay transport that does not exist, is refused before anything
// starts, with the field it names.
func TestStartConfigErrors(t *testing.T) {
	w := newLabWorld(t)
	h := w.site(t, "full-cone")
	ok := node.Config{Network: h, Control: "nats://" + natsAddr + "?insecure=1", Token: labToken, Provisioner: &stockNetstack{}}
	for _, tc := range []struct {
		name    string
		edit    func(*node.Config)
		wantErr string
	}{
		{"no network", func(c *node.Config) { c.Network = nil }, "node: no Network"},
		{"no control", func(c *node.Config) { c.Control = "" }, "node: no control URL"},
		{"no token", func(c *node.Config) { c.Token = "" }, "node: no join token"},
		{"no provisioner", func(c *node.Config) { c.Provisioner = nil }, "node: no Provisioner"},
		{"unknown relay transport", func(c *node.Config) { c.RelayTransport = "udp" }, `node: RelayTransport "udp": want one of tcp, quic, race`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			n, err := node.Start(t.Context(), cfg)
			if n != nil {
				n.Close()
			}
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

// TestRelayByDefault: with Config.Relay nil a node dials the relay
// control names over its own Network (LRP over TCP), so two relay-only
// nodes reach each other.
func TestRelayByDefault(t *testing.T) {
	w := newLabWorld(t)
	defaults := func(c *node.Config) {
		c.Relay, c.RelayTransport = nil, ""
		c.ICE.RelayOnly = true
	}
	pa, pb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "symmetric"), "alpha", pa, defaults)
	b := startNode(t, w.site(t, "symmetric"), "beta", pb, defaults)

	l, err := pb.net.ListenTCP(&net.TCPAddr{Port: 80})
	require.NoError(t, err)
	defer l.Close()
	echoOnce(l)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	c, err := pa.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.Address().Addr(), 80))
	require.NoError(t, err, "alpha status %+v", a.Status())
	defer c.Close()
	_, err = c.Write([]byte("through the relay"))
	require.NoError(t, err)
	buf := make([]byte, len("through the relay"))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "through the relay", string(buf))
	st := a.Status()[0]
	assert.Equal(t, node.PathRelay, st.Path)
	assert.Positive(t, st.TxRelay)
	assert.Zero(t, st.TxDirect)
}

// syncBuffer is safe to read while a command or logger writes it.
type syncBuffer = syncbuf.Buffer

// TestPionTraceInInjectedLogger: pion's ICE logs go to the node's logger
// as component=ice, its trace at Debug-4 (no environment knob): a logger
// at Debug-4 gets the trace, one at Debug does not.
func TestPionTraceInInjectedLogger(t *testing.T) {
	// The knob pion's logs once hung on sends them nowhere else.
	t.Setenv("LATTICE_ICE_TRACE", "1")
	w := newLabWorld(t)
	var trace, debug syncBuffer
	logTo := func(buf *syncBuffer, level slog.Level) func(*node.Config) {
		return func(c *node.Config) {
			c.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
		}
	}
	a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, logTo(&trace, slog.LevelDebug-4))
	startNode(t, w.site(t, "full-cone"), "beta", &stockNetstack{}, logTo(&debug, slog.LevelDebug))
	waitPath(t, a, node.PathDirect, 10*time.Second)

	var traced int
	for line := range strings.Lines(trace.String()) {
		if strings.Contains(line, "level=DEBUG-4") {
			traced++
			assert.Contains(t, line, "component=ice", "only pion logs below Debug")
			assert.Contains(t, line, "node=alpha")
		}
	}
	assert.Positive(t, traced, "pion's trace reached the Debug-4 logger")
	assert.NotContains(t, debug.String(), "level=DEBUG-4")
}
