package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProbe: both transports complete their handshake against a relay
// pinned by fingerprint; a wrong pin fails both; a bad address is an
// error naming it.
func TestProbe(t *testing.T) {
	s := startServer(t, ServerConfig{})
	res, err := Probe(ctxT(t, 10*time.Second), ProbeConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint()})
	require.NoError(t, err)
	for i, want := range []string{"quic", "tcp"} {
		assert.Equal(t, want, res[i].Transport)
		require.NoError(t, res[i].Err, want)
		assert.Positive(t, res[i].Latency, want)
		assert.Less(t, res[i].Latency, 5*time.Second, want)
	}

	wrong := strings.Repeat("0", len(s.Fingerprint()))
	res, err = Probe(ctxT(t, 10*time.Second), ProbeConfig{Server: s.Addr().String(), Fingerprint: wrong, Timeout: 2 * time.Second})
	require.NoError(t, err)
	for _, r := range res {
		assert.Error(t, r.Err, r.Transport)
		assert.Zero(t, r.Latency)
	}

	_, err = Probe(ctxT(t, time.Second), ProbeConfig{Server: "no-port"})
	assert.ErrorContains(t, err, `relay: probe: server "no-port"`)
}
