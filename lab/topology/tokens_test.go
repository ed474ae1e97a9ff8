package topology

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTokenTTLs: control's token_ttl and relay_token_ttl reach the plan;
// without them, the plan says none (never, and the lab's 24h).
func TestTokenTTLs(t *testing.T) {
	const base = "networks: {internet: {cidr: 203.0.113.0/24}}\nnodes: {a: {network: internet}}\n"
	_, p, err := Parse("t.yaml", []byte(base+"control: {network: internet, token_ttl: 30m, relay_token_ttl: 5s}\n"))
	require.NoError(t, err)
	assert.Equal(t, 30*time.Minute, p.TokenTTL)
	assert.Equal(t, 5*time.Second, p.RelayTokenTTL)

	_, p, err = Parse("t.yaml", []byte(base+"control: {network: internet}\n"))
	require.NoError(t, err)
	assert.Zero(t, p.TokenTTL)
	assert.Zero(t, p.RelayTokenTTL)

	_, _, err = Parse("t.yaml", []byte(base+"control: {network: internet, token_ttl: 10ms, relay_token_ttl: forever}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "control.token_ttl")
	assert.Contains(t, err.Error(), "control.relay_token_ttl")
}
