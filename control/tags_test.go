package control

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

const routerToken = "router-token-0123456789"

// peerTags is what control tells a node about name's tags: its entry in
// a registration answer's peer list.
func peerTags(t *testing.T, peers []controlapi.Peer, name string) []string {
	t.Helper()
	for _, p := range peers {
		if p.Name == name {
			return p.Tags
		}
	}
	t.Fatalf("no peer %q in %+v", name, peers)
	return nil
}

// TestTokenTags: a node gets the tags of the join token it registers
// with, its peers see them, a live token without tags takes them away
// (tags are the operator's, per token), and a re-registration on proof of
// key alone (the token expired) keeps what the node had.
func TestTokenTags(t *testing.T) {
	for _, r := range registrars {
		t.Run(r.name, func(t *testing.T) {
			clock := newTestClock(tokenEpoch)
			env := expiringServer(t, "", clock,
				JoinToken{Value: routerToken, Tags: []string{"router", "exit-eu"}, Expires: tokenEpoch.Add(30 * time.Minute)},
				JoinToken{Value: testToken})
			ctx := ctxT(t)
			gw := controlapi.Join{Token: routerToken, Name: "gw", Key: newPriv(t)}
			_, err := r.reg(ctx, netx.OS, r.url(env), gw)
			require.NoError(t, err)
			laptop := controlapi.Join{Token: testToken, Name: "laptop", Key: newPriv(t)}
			resp, err := r.reg(ctx, netx.OS, r.url(env), laptop)
			require.NoError(t, err)
			assert.Equal(t, []string{"router", "exit-eu"}, peerTags(t, resp.Peers, "gw"))

			resp, err = r.reg(ctx, netx.OS, r.url(env), gw)
			require.NoError(t, err)
			assert.Nil(t, peerTags(t, resp.Peers, "laptop"), "a token without tags gives none")

			clock.set(tokenEpoch.Add(time.Hour)) // the router token expired
			_, err = r.reg(ctx, netx.OS, r.url(env), gw)
			require.NoError(t, err, "a known identity re-registers on its proof of key")
			resp, err = r.reg(ctx, netx.OS, r.url(env), laptop)
			require.NoError(t, err)
			assert.Equal(t, []string{"router", "exit-eu"}, peerTags(t, resp.Peers, "gw"), "kept without a live token")

			gw.Token = testToken
			_, err = r.reg(ctx, netx.OS, r.url(env), gw)
			require.NoError(t, err)
			resp, err = r.reg(ctx, netx.OS, r.url(env), laptop)
			require.NoError(t, err)
			assert.Nil(t, peerTags(t, resp.Peers, "gw"), "a live token without tags takes them away")
		})
	}
}

func TestTokenTagsValidated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tags    []string
		wantErr string
	}{
		{"ok", []string{"router", "db-1"}, ""},
		{"upper case", []string{"Router"}, `control: join token 1: tag "Router": use 1-63 lowercase letters, digits and inner hyphens`},
		{"empty", []string{""}, `control: join token 1: tag "": use 1-63 lowercase letters, digits and inner hyphens`},
		{"too many", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, "control: join token 1 has 9 tags, at most 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tokenSet{{Value: testToken, Tags: tc.tags}}.validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

// TestTokenCheckGivesLiveTokensTags: the tags come from the token that
// matched and is live, whichever its place in the list.
func TestTokenCheckGivesLiveTokensTags(t *testing.T) {
	ts := tokenSet{
		{Value: "expired-token-0123456789", Tags: []string{"old"}, Expires: tokenEpoch},
		{Value: testToken},
		{Value: routerToken, Tags: []string{"router"}},
	}
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{routerToken, []string{"router"}},
		{testToken, nil},
	} {
		tags, err := ts.check(tc.token, tokenEpoch.Add(time.Hour))
		require.NoError(t, err)
		assert.Equal(t, tc.want, tags, tc.token)
	}
	tags, err := ts.check("expired-token-0123456789", tokenEpoch.Add(time.Hour))
	require.Error(t, err)
	assert.Nil(t, tags)
}
