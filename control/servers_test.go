package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// TestServers: a join-token holder learns the relays and STUN servers
// control announces, over NATS and HTTP, without registering; a missing,
// wrong, expired or oversized token gets a refusal that says so and no
// list; no request changes the registry.
func TestServers(t *testing.T) {
	expired := "expired-token-0123456789abcdef"
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	env := startServer(t, "", func(c *Config) {
		c.Tokens = append(c.Tokens, JoinToken{Value: expired, Expires: now.Add(-time.Hour)})
		c.Now = func() time.Time { return now }
		c.Relays = []controlapi.Relay{{Addr: "127.0.0.1:4443", Fingerprint: "ab12"}, {Addr: "relay.example.net:443"}}
	})
	ctx := ctxT(t)
	_, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	snapshot := func() (string, []byte) {
		nodes, err := env.srv.Store().List(ctx)
		require.NoError(t, err)
		js, _ := json.Marshal(nodes)
		j, _ := os.ReadFile(JournalPath(env.store))
		return string(js), j
	}
	nodesBefore, journalBefore := snapshot()
	statsBefore := env.srv.Stats()

	for _, url := range []string{env.url, env.http} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			got, err := controlapi.Servers(ctx, netx.OS, url, testToken)
			require.NoError(t, err)
			assert.Equal(t, &controlapi.ServersResponse{
				Relays: []controlapi.Relay{{Addr: "127.0.0.1:4443", Fingerprint: "ab12"}, {Addr: "relay.example.net:443"}},
				STUN:   []string{"127.0.0.1:3478"},
			}, got)

			for _, tc := range []struct {
				name, token, wantErr string
			}{
				{"wrong", "not-the-token-0123456789abcdef", "bad_token: join token not accepted"},
				{"expired", expired, "bad_token: join token expired at 2026-12-02T11:00:00Z"},
				{"missing", "", "bad_token: no join token"},
				{"oversized", strings.Repeat("x", controlapi.MaxTokenBytes+1), "bad_request: token is 513 bytes, at most 512"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, err := controlapi.Servers(ctx, netx.OS, url, tc.token)
					assert.Nil(t, got)
					var e *controlapi.Error
					require.ErrorAs(t, err, &e)
					assert.Equal(t, tc.wantErr, e.Error())
				})
			}
		})
	}
	nodesAfter, journalAfter := snapshot()
	assert.Equal(t, nodesBefore, nodesAfter, "the registry is unchanged")
	assert.Equal(t, journalBefore, journalAfter, "nothing was journaled")
	stats := env.srv.Stats()
	assert.Equal(t, statsBefore.Registered, stats.Registered)
	assert.Equal(t, statsBefore.Refused, stats.Refused, "a servers request is not a registration")
}

// TestServersRequestBounds: a request over the bound, or that is not JSON,
// is refused before its token is looked at, over NATS and HTTP; a reply
// subject outside the requester's inbox is refused unanswered.
func TestServersRequestBounds(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	jc := joinConn(t, env.url)
	big := []byte(`{"token":"` + testToken + `","pad":"` + strings.Repeat("x", maxServersRequestBytes) + `"}`)
	for _, tc := range []struct {
		name    string
		body    []byte
		wantErr string
	}{
		{"oversized", big, "bad_request: servers request is 624 bytes, at most 576"},
		{"not json", []byte("token=" + testToken), "bad_request: malformed servers request: invalid character 'o' in literal true (expecting 'r')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := jc.RequestWithContext(ctx, controlapi.SubjectServers, tc.body)
			require.NoError(t, err)
			var resp controlapi.ServersResponse
			assert.EqualError(t, controlapi.DecodeReply(m.Data, &resp), tc.wantErr)
			assert.Nil(t, resp.Relays)
		})
	}
	hr, err := http.Post(env.http+"/v1/servers", "application/json", bytes.NewReader(big))
	require.NoError(t, err)
	hresp, err := io.ReadAll(hr.Body)
	hr.Body.Close()
	require.NoError(t, err)
	var resp controlapi.ServersResponse
	assert.EqualError(t, controlapi.DecodeReply(hresp, &resp), "bad_request: servers request over 576 bytes")

	body, _ := json.Marshal(controlapi.ServersRequest{Token: testToken})
	require.NoError(t, jc.PublishRequest(controlapi.SubjectServers, controlapi.NodeSubject("nsomeoneelse", controlapi.LeafSignalIn), body))
	require.NoError(t, jc.Flush())
	require.Eventually(t, func() bool { return env.srv.Stats().BadReplies == 1 }, 5*time.Second, 10*time.Millisecond)
}

// FuzzServersRequest: any body either decodes to a request whose token
// is present and within MaxTokenBytes, or is refused with an *Error;
// nothing panics.
func FuzzServersRequest(f *testing.F) {
	f.Add([]byte(`{"token":"` + testToken + `"}`))
	f.Add([]byte(`{"token":""}`))
	f.Add([]byte(`{"token":1}`))
	f.Add([]byte(`null`))
	f.Add(bytes.Repeat([]byte("a"), maxServersRequestBytes+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeServersRequest(b)
		if err != nil {
			var e *controlapi.Error
			if r != nil || !errors.As(err, &e) {
				t.Fatalf("refusal %v (%T) with request %v", err, err, r)
			}
			return
		}
		if r.Token == "" || len(r.Token) > controlapi.MaxTokenBytes || len(b) > maxServersRequestBytes {
			t.Fatalf("accepted token of %d bytes from %d bytes", len(r.Token), len(b))
		}
	})
}
