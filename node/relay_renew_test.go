package node_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/relay"
)

// TestRelayTokenRenewedAcrossRelayRestart is issue 15's finding 5 end to
// end: control issues 5 s relay tokens, two nodes that only the relay
// connects (both behind symmetric NATs) outlive their first tokens, the
// relay restarts, and relayed echo is back within 5 s while neither relay
// ever saw an expired token: the nodes renewed theirs over their control
// sessions (control.Session.RelayToken).
func TestRelayTokenRenewedAcrossRelayRestart(t *testing.T) {
	const life = 5 * time.Second
	var issued time.Time
	w := newLabWorld(t, func(c *control.Config) {
		c.RelayToken = func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken([]byte("lab-relay-secret-0123456789abcdef"), k, now.Add(life))), nil
		}
	})
	issued = time.Now()
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "symmetric"), "alpha", na)
	b := startNode(t, w.site(t, "symmetric"), "beta", nb)
	serveEcho(t, nb, 7)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before the restart")

	// Outlive the tokens the nodes registered with.
	time.Sleep(time.Until(issued.Add(life + time.Second)))
	before := w.relay.Stats().AuthFailures["expired"]
	require.NoError(t, w.relay.Close())
	w.startRelay(t)
	start := time.Now()
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(5*time.Second), "after the relay restart")
	t.Logf("relayed echo back %v after the restart", time.Since(start).Round(time.Millisecond))
	assert.Zero(t, before, "the first relay saw an expired token")
	assert.Zero(t, w.relay.Stats().AuthFailures["expired"], "the restarted relay saw an expired token")
	// What `lattice up`'s metrics export of it: the first connection and
	// the reconnect, and at least one renewal (tokens lived 5 s, the
	// nodes more than 6 s before the restart).
	rs, ok := a.RelayStats()
	require.True(t, ok, "an LRP relay client")
	assert.Equal(t, uint64(2), rs.Connects, "connects: the first and the reconnect")
	assert.GreaterOrEqual(t, rs.TokenRenewals, uint64(1), "renewals")
	assert.Zero(t, rs.TokenRenewalFailures)
	assert.NotEmpty(t, rs.Transport, "connected")
}
