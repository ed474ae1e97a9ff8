package runner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/relay"
)

// TestTokenLifetimes: the join token expires token_ttl after the lab's
// start and relay tokens last relay_token_ttl (24h if zero).
func TestTokenLifetimes(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &Lab{start: start, plan: &topology.Plan{Token: "lattice-lab-join-token", TokenTTL: 30 * time.Minute, RelayTokenTTL: time.Minute}}
	l.shared.secret = make([]byte, 32)
	jt := l.joinTokens()
	require.Len(t, jt, 1)
	assert.Equal(t, start.Add(30*time.Minute), jt[0].Expires)

	var pub key.Public
	pub[0] = 1
	now := start.Add(time.Hour)
	tok, err := l.issueRelayToken(pub, now)
	require.NoError(t, err)
	_, exp, err := relay.InspectToken(relay.Token(tok))
	require.NoError(t, err)
	assert.Equal(t, now.Add(time.Minute).Unix(), exp.Unix())

	l.plan.TokenTTL, l.plan.RelayTokenTTL = 0, 0
	assert.True(t, l.joinTokens()[0].Expires.IsZero(), "no token_ttl: the join token never expires")
	tok, err = l.issueRelayToken(pub, now)
	require.NoError(t, err)
	_, exp, err = relay.InspectToken(relay.Token(tok))
	require.NoError(t, err)
	assert.Equal(t, now.Add(24*time.Hour).Unix(), exp.Unix())
}
