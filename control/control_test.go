package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

const testToken = "join-token-0123456789abcdef"

func newKey(t testing.TB) key.Public {
	t.Helper()
	return key.NewPrivate().Public()
}

func newPriv(t testing.TB) key.Private {
	t.Helper()
	return key.NewPrivate()
}

type testEnv struct {
	srv   *Server
	store string
	url   string
	http  string
}

// startServer runs control on loopback with embedded NATS and HTTP and a
// file store at path (a fresh one if empty).
func startServer(t testing.TB, path string, mutate ...func(*Config)) *testEnv {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "registry.json")
	}
	st, err := OpenFileStore(path)
	require.NoError(t, err)
	cfg := Config{
		Tokens:       []JoinToken{{Value: testToken}},
		Store:        st,
		EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0"},
		HTTPListen:   "127.0.0.1:0",
		Relays:       []controlapi.Relay{{Addr: "127.0.0.1:4443"}},
		STUN:         []string{"127.0.0.1:3478"},
		RelayToken:   func(k key.Public, now time.Time) (string, error) { return "relay-token-for-" + k.String()[:8], nil },
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return &testEnv{srv: srv, store: path, url: srv.NATS().URL(), http: "http://" + srv.HTTPAddr().String()}
}

// mustRegister registers a new key as name over NATS at url.
func mustRegister(ctx context.Context, t testing.TB, url, name string) *controlapi.RegisterResponse {
	t.Helper()
	r, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: testToken, Name: name, Key: newPriv(t)})
	require.NoError(t, err)
	return r
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRegisterNATSAndHTTP(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	ka, kb := newPriv(t), newPriv(t)

	a, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: ka})
	require.NoError(t, err)
	assert.True(t, Overlay.Contains(a.Address.Addr()), "address %v outside %v", a.Address, Overlay)
	assert.Equal(t, 10, a.Address.Bits())
	assert.Empty(t, a.Peers)
	assert.Equal(t, "relay-token-for-"+ka.Public().String()[:8], a.RelayToken)
	assert.Equal(t, []string{"127.0.0.1:3478"}, a.STUN)
	assert.Equal(t, env.url, a.NATS.URL)

	// alpha connects and waits for news of beta.
	events := make(chan controlapi.PeerEvent, 4)
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer sa.Close()

	b, err := controlapi.RegisterHTTP(ctx, netx.OS, env.http, controlapi.Join{Token: testToken, Name: "beta", Key: kb})
	require.NoError(t, err)
	require.Len(t, b.Peers, 1)
	assert.Equal(t, controlapi.Peer{NodeID: a.NodeID, Name: "alpha", PublicKey: ka.Public(), Address: a.Address, Epoch: a.Epoch}, b.Peers[0])
	assert.NotEqual(t, a.Address, b.Address)

	select {
	case ev := <-events:
		assert.Equal(t, controlapi.PeerAdded, ev.Type)
		assert.Equal(t, "beta", ev.Peer.Name)
		assert.Equal(t, kb.Public(), ev.Peer.PublicKey)
	case <-ctx.Done():
		t.Fatal("alpha never heard of beta")
	}
	peers, err := sa.Peers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, 1)
	assert.Equal(t, b.NodeID, peers[0].NodeID)
	assert.Equal(t, uint64(2), env.srv.Stats().Registered)
}

func TestSameKeySameAddressAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	k := newPriv(t)
	env := startServer(t, path)
	first, err := controlapi.RegisterNATS(ctxT(t), netx.OS, env.url, controlapi.Join{Token: testToken, Name: "laptop", Key: k})
	require.NoError(t, err)
	require.NoError(t, env.srv.Close())

	fi, err := os.Stat(JournalPath(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the registry's journal holds secret hashes")
	require.NoError(t, env.srv.Store().(*FileStore).Close())
	fi, err = os.Stat(path)
	require.NoError(t, err, "closing the store writes its snapshot")
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the registry holds secret hashes")

	env = startServer(t, path)
	again, err := controlapi.RegisterHTTP(ctxT(t), netx.OS, env.http, controlapi.Join{Token: testToken, Name: "laptop", Key: k})
	require.NoError(t, err)
	assert.Equal(t, first.NodeID, again.NodeID)
	assert.Equal(t, first.Address, again.Address)
	assert.NotEqual(t, first.NATS.Password, again.NATS.Password, "re-registering issues a new secret")
	assert.Greater(t, again.Epoch, first.Epoch, "and a later epoch")

	// The old secret no longer works; the new one does.
	_, err = controlapi.Connect(ctxT(t), netx.OS, first.NodeID, first.NATS, controlapi.Handlers{})
	require.Error(t, err)
	s, err := controlapi.Connect(ctxT(t), netx.OS, again.NodeID, again.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	s.Close()
}

func TestBadTokens(t *testing.T) {
	now := time.Now()
	env := startServer(t, "", func(c *Config) {
		c.Tokens = append(c.Tokens, JoinToken{Value: "expired-token-0123456789", Expires: now.Add(-time.Minute)})
	})
	ctx := ctxT(t)
	for _, tc := range []struct{ token, want string }{
		{"wrong-token-0123456789abcdef", "not accepted"},
		{"expired-token-0123456789", "expired"},
		{testToken[:len(testToken)-1], "not accepted"},
	} {
		req := controlapi.Join{Token: tc.token, Name: "mallory", Key: newPriv(t)}
		_, err := controlapi.RegisterHTTP(ctx, netx.OS, env.http, req)
		var e *controlapi.Error
		require.ErrorAs(t, err, &e, "HTTP with %q", tc.token)
		assert.Equal(t, controlapi.CodeBadToken, e.Code)
		assert.Contains(t, e.Message, tc.want)

		_, err = controlapi.RegisterNATS(ctx, netx.OS, env.url, req)
		require.ErrorAs(t, err, &e, "NATS with %q", tc.token)
		assert.Equal(t, controlapi.CodeBadToken, e.Code)
	}
	nodes, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, nodes)
}

func TestBadRegistrations(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	k := newPriv(t)
	_, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "taken", Key: k})
	require.NoError(t, err)

	post := func(body string) (int, *controlapi.Error) {
		resp, err := http.Post(env.http+"/v1/register", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var er controlapi.ErrorReply
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&er))
		require.NotNil(t, er.Error, "status %d without an error body", resp.StatusCode)
		return resp.StatusCode, er.Error
	}
	key := `"` + newKey(t).String() + `"`
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"not json", `{"token":`, 400, "malformed request"},
		{"bad key", `{"token":"` + testToken + `","name":"x","public_key":"!!!"}`, 400, "not base64"},
		{"short key", `{"token":"` + testToken + `","name":"x","public_key":"AAAA"}`, 400, "3 bytes, want 32"},
		{"no key", `{"token":"` + testToken + `","name":"x"}`, 400, "public key is missing"},
		{"empty name", `{"token":"` + testToken + `","name":"","public_key":` + key + `}`, 400, "name is empty"},
		{"bad name", `{"token":"` + testToken + `","name":"Bad Name!","public_key":` + key + `}`, 400, `name "Bad Name!"`},
		{"long name", `{"token":"` + testToken + `","name":"` + strings.Repeat("a", 64) + `","public_key":` + key + `}`, 400, "1-63"},
		{"huge token", `{"token":"` + strings.Repeat("t", 600) + `","name":"x","public_key":` + key + `}`, 400, "at most 512"},
		{"oversized", `{"token":"` + strings.Repeat("t", controlapi.MaxRequestBytes) + `"}`, 413, "over 16384 bytes"},
		{"proof without challenge", `{"token":"` + testToken + `","name":"x","public_key":` + key + `,"proof":"AAAA"}`, 400, "challenge and proof come together"},
		{"forged proof", `{"token":"` + testToken + `","name":"x","public_key":` + key + `,"challenge":{"key":` + key + `,"nonce":"AAAAAAAAAAAAAAAAAAAAAA==","expires":` + fmt.Sprint(time.Now().Add(10*time.Second).UnixMilli()) + `},"proof":"` + strings.Repeat("A", 43) + `="}`, 401, "not issued by this control"},
		{"no token", `{"name":"x","public_key":` + key + `}`, 401, "no join token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, e := post(tc.body)
			assert.Equal(t, tc.status, status)
			assert.Contains(t, e.Message, tc.want)
		})
	}
	_, err = controlapi.RegisterHTTP(ctx, netx.OS, env.http, controlapi.Join{Token: testToken, Name: "taken", Key: newPriv(t)})
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeNameTaken, e.Code)
	assert.Contains(t, e.Message, "belongs to another node")
	nodes, err := env.srv.cfg.Store.List(ctx)
	require.NoError(t, err)
	assert.Len(t, nodes, 1, "only the valid node is stored")
	assert.Equal(t, "taken", nodes[0].Name)
}

// permissionErrors connects with creds and collects the server's
// permission violations.
func permissionErrors(t *testing.T, url, user, pass, inbox string) (*nats.Conn, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	nc, err := nats.Connect(url, nats.UserInfo(user, pass), nats.CustomInboxPrefix(inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

func TestNodeConfinedToItsSubjects(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, b := mustRegister(ctx, t, env.url, "alpha"), mustRegister(ctx, t, env.url, "beta")

	nc, errs := permissionErrors(t, env.url, a.NATS.User, a.NATS.Password, a.NATS.Inbox)
	got := make(chan *nats.Msg, 10)
	for _, subj := range []string{controlapi.NodeSubject(b.NodeID, controlapi.LeafPeers), controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalIn), "lattice.v1.>", "_INBOX." + b.NodeID + ".>"} {
		_, err := nc.ChanSubscribe(subj, got)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Publish(controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalIn), []byte("forged")))
	require.NoError(t, nc.Publish(controlapi.SubjectRegister, []byte("{}")))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return len(errs()) >= 6 }, 5*time.Second, 10*time.Millisecond, "violations: %v", errs())
	for _, e := range errs() {
		assert.Contains(t, strings.ToLower(e), "permissions violation")
	}
	// And nothing arrives when beta gets news.
	mustRegister(ctx, t, env.url, "gamma")
	select {
	case m := <-got:
		t.Fatalf("alpha read %s", m.Subject)
	case <-time.After(200 * time.Millisecond):
	}

	// A joining client cannot listen to other joiners' replies either.
	jc, jerrs := permissionErrors(t, env.url, "join.0123456789abcdef0123", testToken, "_INBOX.join.0123456789abcdef0123")
	_, err := jc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, jc.Flush())
	require.Eventually(t, func() bool { return len(jerrs()) >= 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestSignaling(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, b := mustRegister(ctx, t, env.url, "alpha"), mustRegister(ctx, t, env.url, "beta")
	type sig struct {
		from string
		data string
	}
	got := make(chan sig, 1)
	sb, err := controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{Signal: func(from string, p []byte) { got <- sig{from, string(p)} }})
	require.NoError(t, err)
	defer sb.Close()
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sa.Close()

	require.NoError(t, sa.Signal(ctx, b.NodeID, []byte("sealed offer")))
	select {
	case s := <-got:
		assert.Equal(t, sig{a.NodeID, "sealed offer"}, s, "control stamps the sender it authenticated")
	case <-ctx.Done():
		t.Fatal("no signal")
	}
	err = sa.Signal(ctx, "nobody", []byte("x"))
	var e *controlapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeNotFound, e.Code)
	err = sa.Signal(ctx, b.NodeID, make([]byte, controlapi.MaxSignalBytes+1))
	require.ErrorAs(t, err, &e)
	assert.Equal(t, controlapi.CodeBadRequest, e.Code)
	assert.Equal(t, uint64(1), env.srv.Stats().SignalsRelayed)
}

func TestDeregister(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	a, b := mustRegister(ctx, t, env.url, "alpha"), mustRegister(ctx, t, env.url, "beta")
	events := make(chan controlapi.PeerEvent, 1)
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer sa.Close()
	sb, err := controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	require.NoError(t, sb.Deregister(ctx))
	sb.Close()
	ev := <-events
	assert.Equal(t, controlapi.PeerRemoved, ev.Type)
	assert.Equal(t, b.NodeID, ev.Peer.NodeID)
	_, err = env.srv.cfg.Store.Get(ctx, b.NodeID)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{})
	require.Error(t, err, "a deregistered node's credentials are revoked")
}

func TestConfigErrors(t *testing.T) {
	st, err := OpenFileStore(filepath.Join(t.TempDir(), "r.json"))
	require.NoError(t, err)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Store: st}, "no join tokens"},
		{Config{Store: st, Tokens: []JoinToken{{Value: "short"}}}, "at least 16"},
		{Config{Tokens: []JoinToken{{Value: testToken}}}, "no Store and no KVBucket"},
		{Config{Store: st, Tokens: []JoinToken{{Value: testToken}}}, "neither EmbeddedNATS nor NATSURL"},
	} {
		_, err := New(t.Context(), tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestCorruptRegistryRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"nodes":[`), 0o600))
	_, err := OpenFileStore(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "corrupt")
	b, _ := os.ReadFile(path)
	assert.Equal(t, `{"version":1,"nodes":[`, string(b), "left as is")
	_ = errors.New
}

func TestPreferredAddrs(t *testing.T) {
	k := newKey(t)
	var first []string
	n := 0
	for a := range preferredAddrs(k) {
		first = append(first, a.String())
		if n++; n == 3 {
			break
		}
	}
	var again []string
	n = 0
	for a := range preferredAddrs(k) {
		again = append(again, a.String())
		if n++; n == 3 {
			break
		}
	}
	assert.Equal(t, first, again, "deterministic per key")
	assert.Equal(t, nodeID(k), nodeID(k))
	assert.NotEqual(t, nodeID(k), nodeID(newKey(t)))
}

// TestKVStoreSurvivesRestart runs control on JetStream KV: the registry
// outlives the control instance and its NATS server.
func TestKVStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() *Server {
		srv, err := New(t.Context(), Config{
			Tokens:       []JoinToken{{Value: testToken}},
			KVBucket:     "lattice-registry",
			EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0", StoreDir: dir},
		})
		require.NoError(t, err)
		return srv
	}
	srv := start()
	ctx := ctxT(t)
	k := newPriv(t)
	first, err := controlapi.RegisterNATS(ctx, netx.OS, srv.NATS().URL(), controlapi.Join{Token: testToken, Name: "kv-node", Key: k})
	require.NoError(t, err)
	_, err = controlapi.RegisterNATS(ctx, netx.OS, srv.NATS().URL(), controlapi.Join{Token: testToken, Name: "kv-node", Key: newPriv(t)})
	var e *controlapi.Error
	require.ErrorAs(t, err, &e, "the name is claimed in the bucket")
	assert.Equal(t, controlapi.CodeNameTaken, e.Code)
	require.NoError(t, srv.Close())

	srv = start()
	defer srv.Close()
	again, err := controlapi.RegisterNATS(ctx, netx.OS, srv.NATS().URL(), controlapi.Join{Token: testToken, Name: "kv-node", Key: k})
	require.NoError(t, err)
	assert.Equal(t, first.Address, again.Address)
	assert.Equal(t, first.NodeID, again.NodeID)
	nodes, err := srv.Store().List(ctx)
	require.NoError(t, err)
	assert.Len(t, nodes, 1)

	// Deregistration frees address and name in the bucket.
	s, err := controlapi.Connect(ctx, netx.OS, again.NodeID, again.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	require.NoError(t, s.Deregister(ctx))
	s.Close()
	_, err = controlapi.RegisterNATS(ctx, netx.OS, srv.NATS().URL(), controlapi.Join{Token: testToken, Name: "kv-node", Key: newPriv(t)})
	require.NoError(t, err, "the name is free again")
}

// onlyPeer is the one peer s's node has, as its peer list says.
func onlyPeer(t *testing.T, s *controlapi.Session) controlapi.Peer {
	t.Helper()
	peers, err := s.Peers(ctxT(t))
	require.NoError(t, err)
	require.Len(t, peers, 1)
	return peers[0]
}

// TestPresenceFromAnEarlierRegistration: a node that restarts registers
// again while the goodbye of its earlier life may still be on its way
// (it waits for the answer only so long). That goodbye, carrying the
// earlier registration's epoch, must not show the running node offline;
// the current registration's goodbye does.
func TestPresenceFromAnEarlierRegistration(t *testing.T) {
	env := startServer(t, "", func(c *Config) { c.PresenceTTL = time.Minute })
	ctx := ctxT(t)
	a, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	events := make(chan controlapi.PeerEvent, 16)
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer sa.Close()
	bkey := newPriv(t)
	b1, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "beta", Key: bkey})
	require.NoError(t, err)
	s1, err := controlapi.Connect(ctx, netx.OS, b1.NodeID, b1.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s1.Close()
	require.NoError(t, s1.Presence(ctx, true, b1.Epoch))

	// Beta restarts: registered again, a later epoch.
	b2, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "beta", Key: bkey})
	require.NoError(t, err)
	require.Equal(t, b1.NodeID, b2.NodeID)
	require.Greater(t, b2.Epoch, b1.Epoch)
	s2, err := controlapi.Connect(ctx, netx.OS, b2.NodeID, b2.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer s2.Close()
	require.NoError(t, s2.Presence(ctx, true, b2.Epoch))
	drain := func() (offline bool) {
		for {
			select {
			case ev := <-events:
				offline = offline || ev.Type == controlapi.PeerOffline
			case <-time.After(300 * time.Millisecond):
				return offline
			}
		}
	}
	drain()
	peerB := func() controlapi.Peer { t.Helper(); return onlyPeer(t, sa) }

	// The first life's goodbye arrives late: taken, and ignored.
	require.NoError(t, s1.Presence(ctx, false, b1.Epoch))
	assert.False(t, drain(), "the earlier life's goodbye announced beta offline")
	assert.False(t, peerB().Offline, "the earlier life's goodbye put beta offline")

	// The running life's goodbye counts.
	require.NoError(t, s2.Presence(ctx, false, b2.Epoch))
	assert.True(t, drain(), "beta's own goodbye was not announced")
	assert.True(t, peerB().Offline)
}

func TestPresence(t *testing.T) {
	// A TTL long against scheduling delays on a loaded machine (-race, other
	// tests): heartbeats every third of it must not miss it.
	const ttl = time.Second
	env := startServer(t, "", func(c *Config) { c.PresenceTTL = ttl })
	ctx := ctxT(t)
	a, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err)
	assert.Equal(t, ttl.Milliseconds(), a.PresenceTTLMillis)
	events := make(chan controlapi.PeerEvent, 16)
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{Peer: func(ev controlapi.PeerEvent) { events <- ev }})
	require.NoError(t, err)
	defer sa.Close()
	next := func(within time.Duration) controlapi.PeerEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(within):
			t.Fatalf("no peer event within %v", within)
			return controlapi.PeerEvent{}
		}
	}
	// Beta registers once alpha listens: the announcement, which follows
	// beta's answer, is then sure to reach alpha, and is consumed here.
	b, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, controlapi.Join{Token: testToken, Name: "beta", Key: newPriv(t)})
	require.NoError(t, err)
	require.Equal(t, controlapi.PeerAdded, next(time.Second).Type)
	sb, err := controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sb.Close()
	peerB := func() controlapi.Peer { t.Helper(); return onlyPeer(t, sa) }

	// A clean stop: offline at once, still registered. On a slow machine
	// beta may have expired between its registration and this first
	// heartbeat; the online event that follows is not the one looked for.
	require.NoError(t, sb.Presence(ctx, true, b.Epoch))
	assert.False(t, peerB().Offline)
	start := time.Now()
	require.NoError(t, sb.Presence(ctx, false, b.Epoch))
	ev := next(time.Second)
	for ev.Type == controlapi.PeerOnline && time.Since(start) < time.Second {
		ev = next(time.Second)
	}
	assert.Less(t, time.Since(start), ttl, "the goodbye is announced at once, not after the TTL")
	assert.Equal(t, controlapi.PeerOffline, ev.Type)
	assert.Equal(t, b.NodeID, ev.Peer.NodeID)
	assert.Equal(t, b.Address, ev.Peer.Address, "an offline node keeps its address")
	assert.True(t, ev.Peer.Offline)
	assert.True(t, peerB().Offline)
	_, err = env.srv.Store().Get(ctx, b.NodeID)
	require.NoError(t, err, "leaving is not deregistering")

	// Back: online again.
	require.NoError(t, sb.Presence(ctx, true, b.Epoch))
	ev = next(time.Second)
	assert.Equal(t, controlapi.PeerOnline, ev.Type)
	assert.False(t, ev.Peer.Offline)
	assert.False(t, peerB().Offline)

	// Heartbeats keep it online past the TTL.
	for range 4 {
		time.Sleep(ttl / 3)
		require.NoError(t, sb.Presence(ctx, true, b.Epoch))
	}
	select {
	case ev := <-events:
		t.Fatalf("a node sending heartbeats got %v", ev.Type)
	default:
	}

	// An unclean stop: no goodbye, no heartbeats; offline after the TTL.
	last := time.Now()
	ev = next(2 * ttl)
	assert.Equal(t, controlapi.PeerOffline, ev.Type)
	assert.Equal(t, b.NodeID, ev.Peer.NodeID)
	assert.GreaterOrEqual(t, time.Since(last), ttl)

	var e *controlapi.Error
	err = sb.Presence(ctx, true, b.Epoch)
	require.NoError(t, err)
	assert.Equal(t, controlapi.PeerOnline, next(time.Second).Type)
	// Garbage is refused by name.
	r, err := sb.Conn().RequestWithContext(ctx, controlapi.NodeSubject(b.NodeID, controlapi.LeafPresence), []byte("{"))
	require.NoError(t, err)
	require.ErrorAs(t, controlapi.DecodeReply(r.Data, &struct{}{}), &e)
	assert.Equal(t, controlapi.CodeBadRequest, e.Code)
}
