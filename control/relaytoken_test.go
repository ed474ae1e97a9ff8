package control

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// TestRelayTokenRenewal: a registered node asks for a fresh relay token
// on its own subject and gets one for its own key, issued at control's
// current time; a control without relay tokens says so.
func TestRelayTokenRenewal(t *testing.T) {
	var skew atomic.Int64
	env := startServer(t, "", func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		c.RelayToken = func(k key.Public, now time.Time) (string, error) {
			return k.String() + "@" + now.UTC().Format(time.RFC3339), nil
		}
	})
	ctx := ctxT(t)
	k := newPriv(t)
	r, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "renew", Key: k})
	require.NoError(t, err)
	s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s.Close()

	skew.Store(int64(25 * time.Hour))
	tok, err := s.RelayToken(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, r.RelayToken, tok, "a fresh token")
	pub, at, ok := strings.Cut(tok, "@")
	require.True(t, ok, "token %q", tok)
	assert.Equal(t, k.Public().String(), pub, "for the node's own key")
	issued, err := time.Parse(time.RFC3339, at)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(25*time.Hour), issued, time.Minute, "issued at control's time now")

	none := startServer(t, "", func(c *Config) { c.RelayToken = nil })
	r2, err := controlapi.RegisterNATS(ctx, netx.OS, none.url, controlapi.Join{Token: testToken, Name: "norelay", Key: newPriv(t)})
	require.NoError(t, err)
	s2, err := controlapi.Connect(ctx, netx.OS, r2.NodeID, r2.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s2.Close()
	_, err = s2.RelayToken(ctx)
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeNotFound, e.Code)
	assert.Contains(t, e.Message, "issues no relay tokens")
}
