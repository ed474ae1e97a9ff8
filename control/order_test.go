package control

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// Stress tests of what happens to one node from two goroutines (or two
// control instances) at once, where the order matters: what peers are
// left with must be the newest.

// eventLog keeps the last peer event an observer got for each node.
type eventLog struct {
	mu      sync.Mutex // guards the following fields
	offline map[string]bool
	events  int
}

func newEventLog() *eventLog { return &eventLog{offline: map[string]bool{}} }

func (l *eventLog) add(ev controlapi.PeerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offline[ev.Peer.NodeID] = ev.Peer.Offline
	l.events++
}

// shownOffline lists those of ids whose last event showed them offline.
func (l *eventLog) shownOffline(ids []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, id := range ids {
		if l.offline[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestPresenceExpiryRacingHeartbeats: nodes whose heartbeats were late
// expire while their next heartbeats arrive. Whichever comes first, once
// the heartbeats are answered the nodes are online, and the last event
// every peer got for each says so: an expiry announced after the
// heartbeat that followed it would leave peers showing a running node
// offline for good (no further event comes while its heartbeats do).
func TestPresenceExpiryRacingHeartbeats(t *testing.T) {
	const ttl = time.Minute // the ticker's sweeps stay out of the way; the test sweeps
	clock := newTestClock(time.Now())
	env := startServer(t, "", func(c *Config) { c.PresenceTTL = ttl; c.Now = clock.Now })
	ctx := ctxT(t)
	log := newEventLog()
	obs := mustRegister(ctx, t, env.url, "observer")
	so, err := controlapi.Connect(ctx, netx.OS, obs.NodeID, obs.NATS, controlapi.Handlers{Peer: log.add})
	require.NoError(t, err)
	defer so.Close()

	const nodes = 24
	type node struct {
		id    string
		epoch uint64
		s     *controlapi.Session
	}
	var all []node
	var ids []string
	for i := range nodes {
		r := mustRegister(ctx, t, env.url, fmt.Sprintf("node-%02d", i))
		s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
		require.NoError(t, err)
		defer s.Close()
		all = append(all, node{r.NodeID, r.Epoch, s})
		ids = append(ids, r.NodeID)
	}

	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		clock.set(clock.Now().Add(2 * ttl)) // every node's heartbeat is late
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			env.srv.expire(ctx, clock.Now())
		})
		errs := make(chan error, nodes)
		for _, n := range all {
			wg.Go(func() {
				<-start
				if err := n.s.Presence(ctx, true, n.epoch); err != nil {
					errs <- fmt.Errorf("heartbeat of %s: %w", n.id, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		peers, err := so.Peers(ctx)
		require.NoError(t, err)
		for _, p := range peers {
			if slices.Contains(ids, p.NodeID) {
				require.False(t, p.Offline, "round %d: %s sent its heartbeat, yet its peer list entry is offline", round, p.NodeID)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(log.shownOffline(ids)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.Empty(t, log.shownOffline(ids), "round %d: the last event peers got for these running nodes says offline", round)
	}
}

// TestDeregisterRacingRegistration: a node deregisters while the same key
// registers again (its next life, on the same control). Both succeed, in
// either order, and what every peer's list says afterwards is what the
// registry holds: the node, at its new epoch, or nothing. A
// deregistration slipped between a re-registration's read and its write
// failed the registration ("not found"), or left a node the registry no
// longer held in every peer list.
func TestDeregisterRacingRegistration(t *testing.T) {
	env := startServer(t, "")
	ctx := ctxT(t)
	obs := mustRegister(ctx, t, env.url, "observer")
	so, err := controlapi.Connect(ctx, netx.OS, obs.NodeID, obs.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer so.Close()
	const keys = 8 // at once, each on its own
	var joins []controlapi.Join
	for i := range keys {
		joins = append(joins, controlapi.Join{Token: testToken, Name: fmt.Sprintf("twice-%d", i), Key: newPriv(t), ControlKey: env.srv.RegisterKey()})
	}
	// race deregisters join's node while it registers again, and returns
	// the second registration's answer.
	race := func(join controlapi.Join) (*controlapi.RegisterResponse, error) {
		first, err := controlapi.RegisterNATS(ctx, netx.OS, env.url, join)
		if err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
		s, err := controlapi.Connect(ctx, netx.OS, first.NodeID, first.NATS, controlapi.Handlers{})
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		defer s.Close()
		start := make(chan struct{})
		var wg sync.WaitGroup
		var derr, rerr error
		var again *controlapi.RegisterResponse
		wg.Go(func() { <-start; derr = s.Deregister(ctx) })
		wg.Go(func() { <-start; again, rerr = controlapi.RegisterNATS(ctx, netx.OS, env.url, join) })
		close(start)
		wg.Wait()
		if derr != nil {
			return nil, fmt.Errorf("deregister: %w", derr)
		}
		if rerr != nil {
			return nil, fmt.Errorf("register again: %w", rerr)
		}
		return again, nil
	}

	rounds := 25
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		answers := make([]*controlapi.RegisterResponse, keys)
		errs := make([]error, keys)
		var wg sync.WaitGroup
		for i, j := range joins {
			wg.Go(func() { answers[i], errs[i] = race(j) })
		}
		wg.Wait()
		peers, err := so.Peers(ctx)
		require.NoError(t, err)
		for i, again := range answers {
			require.NoError(t, errs[i], "round %d, %s", round, joins[i].Name)
			stored, err := env.srv.Store().Get(ctx, again.NodeID)
			if err != nil {
				require.ErrorIs(t, err, ErrNotFound)
				stored = nil
			}
			var listed *controlapi.Peer
			for _, p := range peers {
				if p.NodeID == again.NodeID {
					listed = &p
				}
			}
			switch {
			case stored == nil && listed != nil:
				t.Fatalf("round %d: the registry no longer holds %s, yet peer lists carry it", round, again.NodeID)
			case stored != nil && listed == nil:
				t.Fatalf("round %d: the registry holds %s, yet peer lists do not", round, again.NodeID)
			case stored != nil:
				require.Equal(t, again.Epoch, stored.Epoch, "round %d: the registry holds the last registration", round)
				require.Equal(t, stored.Epoch, listed.Epoch, "round %d: peer lists carry the registry's epoch", round)
			}
		}
	}
}

// TestSameKeyOnTwoInstancesAtOnce: two control instances sharing a KV
// registry each register the same key at once (a node that retried on
// another instance, or restarted, while its earlier attempt was in
// flight). Each registration gets its own epoch, and the registry holds
// the newest: its epoch and the credentials it answered. Writing over a
// record read before the other instance's write lost that write, and
// could leave the registry with the older registration's secret (the
// newest's NATS password refused) or two registrations with one epoch.
func TestSameKeyOnTwoInstancesAtOnce(t *testing.T) {
	ctx := ctxT(t)
	a, b := sharedPair(t, Config{}, Config{})
	k := newPriv(t)
	_, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), controlapi.Join{Token: testToken, Name: "both", Key: k})
	require.NoError(t, err)
	// prepare takes a challenge from the instance at url and answers it,
	// so that the two answers can be sent at once.
	prepare := func(url string) func() (*controlapi.RegisterResponse, error) {
		nc := joinConn(t, url)
		req := controlapi.RegisterRequest{Token: testToken, Name: "both", PublicKey: k.Public()}
		first, err := ask(t, nc, req)
		require.NoError(t, err)
		require.NotNil(t, first.Challenge)
		req.Challenge = first.Challenge
		req.Proof, err = controlapi.ProveKey(k, first.Challenge, "both")
		require.NoError(t, err)
		body, err := json.Marshal(req)
		require.NoError(t, err)
		return func() (*controlapi.RegisterResponse, error) {
			defer nc.Close()
			m, err := nc.RequestWithContext(ctx, controlapi.SubjectRegister, body)
			if err != nil {
				return nil, err
			}
			var resp controlapi.RegisterResponse
			return &resp, controlapi.DecodeReply(m.Data, &resp)
		}
	}

	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	for round := range rounds {
		onA, onB := prepare(a.NATS().URL()), prepare(b.NATS().URL())
		var wg sync.WaitGroup
		var ra, rb *controlapi.RegisterResponse
		var ea, eb error
		start := make(chan struct{})
		wg.Go(func() { <-start; ra, ea = onA() })
		wg.Go(func() { <-start; rb, eb = onB() })
		close(start)
		wg.Wait()
		require.NoError(t, ea, "round %d: on a", round)
		require.NoError(t, eb, "round %d: on b", round)
		require.NotEqual(t, ra.Epoch, rb.Epoch, "round %d: two registrations answered with one epoch", round)
		newest := ra
		if rb.Epoch > ra.Epoch {
			newest = rb
		}
		stored, err := b.Store().Get(ctx, newest.NodeID)
		require.NoError(t, err)
		require.Equal(t, newest.Epoch, stored.Epoch, "round %d: the registry holds an older registration than the newest answered", round)
		hash := sha256.Sum256([]byte(newest.NATS.Password))
		require.Equal(t, hash[:], stored.SecretHash, "round %d: the newest registration's NATS password would be refused", round)
	}
}

// TestKVDeleteRacingCreate: a node is deleted from a KV registry (its
// deregistration, on one instance) while the same key is created again
// (its next registration, on another). Whichever wins, the registry stays
// whole: a node it holds holds the claims of its address and name, so no
// other node is given them, and a node it no longer holds leaves no claim
// behind.
func TestKVDeleteRacingCreate(t *testing.T) {
	ctx := ctxT(t)
	srv, err := New(t.Context(), Config{
		Tokens: []JoinToken{{Value: testToken}}, KVBucket: "delete-race",
		EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	kv, err := OpenKVStore(ctx, srv.Conn(), KVOptions{Bucket: "delete-race"})
	require.NoError(t, err)
	pub := newKey(t)
	node := func() *Node {
		return &Node{ID: nodeID(pub), Name: "again", PublicKey: pub, Address: netip.MustParsePrefix("100.64.7.7/10"),
			SecretHash: []byte(randomSecret()), Epoch: uint64(time.Now().UnixNano())}
	}
	claimOf := func(key string) string {
		e, err := kv.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ""
		}
		require.NoError(t, err)
		return string(e.Value())
	}

	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	for round := range rounds {
		first := node()
		require.NoError(t, kv.Create(ctx, first), "round %d", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var derr, cerr error
		wg.Go(func() {
			<-start
			for range 5 { // as a deregistration does
				if derr = kv.Delete(ctx, first.ID); !errors.Is(derr, ErrConflict) {
					return
				}
			}
		})
		wg.Go(func() { <-start; cerr = kv.Create(ctx, node()) })
		close(start)
		wg.Wait()
		require.NoError(t, derr, "round %d: delete", round)
		if cerr != nil && !errors.Is(cerr, ErrConflict) { // a registration tries again on either
			require.ErrorIs(t, cerr, ErrExists, "round %d: create", round)
		}
		held, err := kv.Get(ctx, first.ID)
		if errors.Is(err, ErrNotFound) {
			require.Empty(t, claimOf(addrKey(first)), "round %d: a deleted node's address is still claimed", round)
			require.Empty(t, claimOf(nameKey(first)), "round %d: a deleted node's name is still claimed", round)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, held.ID, claimOf(addrKey(held)), "round %d: the registry holds the node, but its address is free for another", round)
		require.Equal(t, held.ID, claimOf(nameKey(held)), "round %d: the registry holds the node, but its name is free for another", round)
		require.NoError(t, kv.Delete(ctx, held.ID))
	}

	// The same key created twice at once (on two instances): one create
	// wins, and the claims the other took over meanwhile are the record's
	// to free. Deleted, it leaves none behind.
	for round := range rounds / 4 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				<-start
				for range 5 { // as a registration does
					if err := kv.Create(ctx, node()); !errors.Is(err, ErrConflict) {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		held, err := kv.Get(ctx, nodeID(pub))
		require.NoError(t, err, "round %d: one create won", round)
		require.NoError(t, kv.Delete(ctx, held.ID))
		require.Empty(t, claimOf(addrKey(held)), "round %d: a deleted node's address is still claimed", round)
		require.Empty(t, claimOf(nameKey(held)), "round %d: a deleted node's name is still claimed", round)
	}
}

// TestNodeRegisteredOnAnotherInstanceIsOnline: a node registered on one
// control instance is online there at once; another instance sharing the
// registry, which learns of it through its watch, shows it online too in
// the peer lists it serves, before the node's first heartbeat reaches it
// (not offline until then, while the first instance announced it online).
func TestNodeRegisteredOnAnotherInstanceIsOnline(t *testing.T) {
	ctx := ctxT(t)
	a, b := sharedPair(t, Config{PresenceTTL: time.Minute}, Config{PresenceTTL: time.Minute})
	obs := mustRegister(ctx, t, b.NATS().URL(), "observer")
	so, err := controlapi.Connect(ctx, netx.OS, obs.NodeID, obs.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer so.Close()

	for i := range 5 {
		x := mustRegister(ctx, t, a.NATS().URL(), fmt.Sprintf("elsewhere-%d", i))
		var listed *controlapi.Peer
		deadline := time.Now().Add(5 * time.Second)
		for listed == nil && time.Now().Before(deadline) {
			peers, err := so.Peers(ctx)
			require.NoError(t, err)
			for _, p := range peers {
				if p.NodeID == x.NodeID {
					listed = &p
				}
			}
			if listed == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		require.NotNil(t, listed, "b never listed %s, registered on a", x.NodeID)
		require.False(t, listed.Offline, "b lists %s, just registered on a, as offline", x.NodeID)
	}
}

// TestEarlierLifeGoodbyeAtALaggingInstance: a node restarts and registers
// again on one instance while the goodbye of its earlier life reaches
// another, whose watch may not have brought the new registration yet:
// that one then takes the goodbye. Once the new life's heartbeat came,
// the last event peers got from it must say online.
func TestEarlierLifeGoodbyeAtALaggingInstance(t *testing.T) {
	ctx := ctxT(t)
	a, b := sharedPair(t, Config{PresenceTTL: time.Minute}, Config{PresenceTTL: time.Minute})
	log := newEventLog()
	obs := mustRegister(ctx, t, b.NATS().URL(), "observer")
	so, err := controlapi.Connect(ctx, netx.OS, obs.NodeID, obs.NATS, controlapi.Handlers{Peer: log.add})
	require.NoError(t, err)
	defer so.Close()
	onB := func(c controlapi.NATSCreds) controlapi.NATSCreds { c.URL = b.NATS().URL(); return c }

	join := controlapi.Join{Token: testToken, Name: "restarts", Key: newPriv(t)}
	life, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), join)
	require.NoError(t, err)
	s, err := controlapi.Connect(ctx, netx.OS, life.NodeID, onB(life.NATS), controlapi.Handlers{})
	require.NoError(t, err)
	require.NoError(t, s.Presence(ctx, true, life.Epoch))
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		next, err := controlapi.RegisterNATS(ctx, netx.OS, a.NATS().URL(), join)
		require.NoError(t, err, "round %d", round)
		require.NoError(t, s.Presence(ctx, false, life.Epoch), "round %d: the earlier life's goodbye", round)
		s.Close()
		s, err = controlapi.Connect(ctx, netx.OS, next.NodeID, onB(next.NATS), controlapi.Handlers{})
		require.NoError(t, err, "round %d", round)
		require.NoError(t, s.Presence(ctx, true, next.Epoch), "round %d: the new life's heartbeat", round)
		life = next
		ids := []string{life.NodeID}
		deadline := time.Now().Add(3 * time.Second)
		for len(log.shownOffline(ids)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.Empty(t, log.shownOffline(ids), "round %d: the running node's last event from b says offline", round)
	}
	s.Close()
}
