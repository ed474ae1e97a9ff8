package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// tokenSource is a fake control: it issues tokens of a fixed life for one
// key with testSecret and counts the requests.
type tokenSource struct {
	key       key.Public
	life      time.Duration
	fail      error // returned instead of a token when set
	failFirst int64 // calls that fail before the source works
	other     bool  // issue for another key
	calls     atomic.Int64
}

func (ts *tokenSource) renew(ctx context.Context) (Token, error) {
	n := ts.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if n <= ts.failFirst {
		return "", errors.New("control not reachable yet")
	}
	if ts.fail != nil {
		return "", ts.fail
	}
	k := ts.key
	if ts.other {
		k = key.Public{9}
	}
	return IssueToken(testSecret, k, time.Now().Add(ts.life)), nil
}

// renewingClient is a client of s whose tokens come from ts (the first
// one too).
func renewingClient(t *testing.T, s *Server, tr string, ts *tokenSource, tweak func(*ClientConfig)) *Client {
	t.Helper()
	return clientFor(t, s, func(c *ClientConfig) {
		c.Transport = tr
		ts.key = c.Key
		c.Token = IssueToken(testSecret, c.Key, time.Now().Add(ts.life))
		c.RenewToken = ts.renew
		if tweak != nil {
			tweak(c)
		}
	})
}

// TestTokenRenewedAcrossRestart is finding 5 of issue 15: with 5 s
// tokens, the clients outlive their first tokens, the relay restarts, and
// relayed packets flow again within 5 s without the relay ever seeing an
// expired token.
func TestTokenRenewedAcrossRestart(t *testing.T) {
	const life = 5 * time.Second
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			cert, err := SelfSigned(time.Now())
			require.NoError(t, err)
			cfg := ServerConfig{Secret: testSecret, TLS: tlsWith(cert)}
			s1, err := NewServer(cfg)
			require.NoError(t, err)
			ta, tb := &tokenSource{life: life}, &tokenSource{life: life}
			a := renewingClient(t, s1, tr, ta, nil)
			b := renewingClient(t, s1, tr, tb, nil)
			require.NoError(t, a.WaitConnected(ctxT(t, 5*time.Second)))
			require.NoError(t, b.WaitConnected(ctxT(t, 5*time.Second)))
			exchange(t, a, b, []byte("before"))
			_, firstExpiry, err := InspectToken(a.currentToken())
			require.NoError(t, err)

			// Outlive the first tokens on the established connections.
			time.Sleep(time.Until(firstExpiry) + 500*time.Millisecond)
			assert.GreaterOrEqual(t, a.Stats().TokenRenewals, uint64(1))
			assert.GreaterOrEqual(t, b.Stats().TokenRenewals, uint64(1))
			expired1 := s1.Stats().AuthFailures["expired"]
			require.NoError(t, s1.Close())

			cfg.Addr = s1.Addr().String()
			s2 := startServer(t, cfg)
			start := time.Now()
			eventually(t, 5*time.Second, func() bool {
				return a.Stats().Connects == 2 && b.Stats().Connects == 2 && a.Transport() != "" && b.Transport() != ""
			},
				"clients did not reconnect (relay auth failures %v)", s2.Stats().AuthFailures)
			exchange(t, a, b, []byte("after"))
			exchange(t, b, a, []byte("after"))
			took := time.Since(start)
			t.Logf("relayed echo back %v after the restart; renewals a=%d b=%d", took.Round(time.Millisecond), a.Stats().TokenRenewals, b.Stats().TokenRenewals)
			assert.Less(t, took, 5*time.Second)
			assert.Zero(t, expired1, "the first relay saw an expired token")
			assert.Zero(t, s2.Stats().AuthFailures["expired"], "the restarted relay saw an expired token")
			assert.Zero(t, a.Stats().TokenRenewalFailures+b.Stats().TokenRenewalFailures)
		})
	}
}

// TestExpiredAnswerRenewsAtOnce: the relay's clock runs 2 h ahead, so the
// client's token (1 h left) is expired there. The refusal makes the client
// renew at once and reconnect without waiting out its backoff (10 s here).
func TestExpiredAnswerRenewsAtOnce(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
			ts := &tokenSource{life: 24 * time.Hour}
			c := renewingClient(t, s, tr, ts, func(c *ClientConfig) {
				c.Token = IssueToken(testSecret, c.Key, time.Now().Add(time.Hour))
				c.MinBackoff, c.MaxBackoff = 10*time.Second, 20*time.Second
			})
			start := time.Now()
			require.NoError(t, c.WaitConnected(ctxT(t, 3*time.Second)))
			t.Logf("connected %v after the start", time.Since(start).Round(time.Millisecond))
			assert.Equal(t, int64(1), ts.calls.Load(), "renewals asked for")
			assert.Equal(t, uint64(1), c.Stats().TokenRenewals)
			assert.Equal(t, uint64(1), s.Stats().AuthFailures["expired"], "one refusal, then the fresh token")
			peer := connectedClient(t, s, func(c *ClientConfig) {
				c.Token = IssueToken(testSecret, c.Key, time.Now().Add(3*time.Hour))
			})
			exchange(t, c, peer, []byte("recovered"))
		})
	}
}

// TestRefusedAgainAfterFailedRenewal: the first renewal fails (a node
// whose control session is not up yet); the next refusal's renewal works
// and the client reconnects at once, not after a second backoff.
func TestRefusedAgainAfterFailedRenewal(t *testing.T) {
	s := startServer(t, ServerConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	ts := &tokenSource{life: 24 * time.Hour, failFirst: 1}
	c := renewingClient(t, s, transportTCP, ts, func(c *ClientConfig) {
		c.Token = IssueToken(testSecret, c.Key, time.Now().Add(time.Hour))
		// One backoff is 1-2 s, two are at least 3 s.
		c.MinBackoff, c.MaxBackoff = 2*time.Second, 8*time.Second
	})
	start := time.Now()
	eventually(t, 10*time.Second, func() bool { return c.Transport() != "" }, "never connected")
	took := time.Since(start)
	t.Logf("connected after %v", took.Round(time.Millisecond))
	assert.Less(t, took, 2800*time.Millisecond, "waited a second backoff")
	assert.Equal(t, int64(2), ts.calls.Load())
	assert.Equal(t, uint64(2), s.Stats().AuthFailures["expired"])
}

func TestRenewalFailures(t *testing.T) {
	tests := []struct {
		name    string
		ts      *tokenSource
		wantErr string
	}{
		{"control refuses", &tokenSource{life: time.Hour, fail: errors.New("control says no")}, "control says no"},
		{"token for another key", &tokenSource{life: time.Hour, other: true}, "renewed token is for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{})
			c := renewingClient(t, s, transportTCP, tt.ts, func(c *ClientConfig) {
				c.Token = IssueToken(testSecret, c.Key, time.Now().Add(-time.Minute))
			})
			// The refusal is final for WaitConnected only because the
			// renewal failed too.
			err := c.WaitConnected(ctxT(t, 5*time.Second))
			var ce *CloseError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, CloseAuthExpired, ce.Code)
			require.ErrorIs(t, err, ErrTokenRenewal)
			assert.ErrorContains(t, err, tt.wantErr)
			assert.GreaterOrEqual(t, c.Stats().TokenRenewalFailures, uint64(1))
			assert.Zero(t, c.Stats().TokenRenewals)
		})
	}
}

// TestRenewalDue: the renewal comes at two thirds of the token's life as
// the client saw it, never sooner than minRenewRetry after it was set.
func TestRenewalDue(t *testing.T) {
	k := key.Public{1}
	tests := []struct {
		name   string
		expiry time.Duration // from now
		want   time.Duration
	}{
		{"an hour", time.Hour, 40 * time.Minute},
		{"six seconds", 6 * time.Second, 4 * time.Second},
		{"already expired", -time.Minute, minRenewRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{log: slog.New(slog.DiscardHandler)}
			now := time.Now().Truncate(time.Second)
			c.token, c.tokenAt = IssueToken(testSecret, k, now.Add(tt.expiry)), now
			wait, ok := c.renewalDue()
			require.True(t, ok)
			assert.InDelta(t, tt.want.Seconds(), (wait + time.Since(now)).Seconds(), 0.2)
		})
	}
	c := &Client{log: slog.New(slog.DiscardHandler), token: "garbage", tokenAt: time.Now()}
	_, ok := c.renewalDue()
	assert.False(t, ok, "an unreadable token is renewed on refusal only")
}
