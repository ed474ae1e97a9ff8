package control

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// sameAddrs makes every key try the same few addresses in the same order,
// so concurrent registrations contend for each one.
func sameAddrs(key.Public) func(yield func(netip.Addr) bool) {
	return func(yield func(netip.Addr) bool) {
		base := Overlay.Addr().As4()
		for i := range 250 {
			a := base
			a[3] = byte(i + 1)
			if !yield(netip.AddrFrom4(a)) {
				return
			}
		}
	}
}

// TestReplicasNeverShareAnAddress: two control replicas on a 3-server
// NATS cluster share one 3-replica KV registry; registrations arrive on
// every server at once, each replica takes some (one queue group), and
// every key contends for the same addresses. Every registration succeeds,
// and the registry (read afresh) holds each address once, claimed by the
// node that has it.
func TestReplicasNeverShareAnAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startNATSCluster(t, 3)
	replica := func(urls string) *Server {
		s, err := New(ctx, Config{Tokens: []JoinToken{{Value: testToken}}, NATSURL: urls, KVBucket: "registry", addrsFor: sameAddrs})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := replica(c.url(0) + "," + c.url(1))
	b := replica(c.url(2) + "," + c.url(0))
	const nodes = 60
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Go(func() {
			j := controlapi.Join{Token: testToken, Name: fmt.Sprintf("node-%02d", i), Key: key.NewPrivate()}
			var err error
			for range 3 { // a client may retry (a timeout on a loaded machine)
				if _, err = controlapi.RegisterNATS(ctx, netx.OS, c.url(i%3), j); err == nil {
					return
				}
			}
			errs <- fmt.Errorf("node %d: %w", i, err)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Positive(t, a.Stats().Registered, "replica a registered some")
	assert.Positive(t, b.Stats().Registered, "replica b registered some")

	fresh, err := OpenKVStore(ctx, a.Conn(), KVOptions{Bucket: "registry"})
	require.NoError(t, err)
	all, err := fresh.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, nodes)
	byAddr := map[netip.Prefix]string{}
	for _, n := range all {
		if o, dup := byAddr[n.Address]; dup {
			t.Errorf("address %v given to %s and %s", n.Address, o, n.ID)
		}
		byAddr[n.Address] = n.ID
		e, err := fresh.kv.Get(ctx, addrKey(n))
		require.NoError(t, err)
		assert.Equal(t, n.ID, string(e.Value()), "the claim of %v is its holder's", n.Address)
	}
	keys, err := fresh.kv.ListKeys(ctx)
	require.NoError(t, err)
	claims := 0
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "addr.") {
			claims++
		}
	}
	assert.Equal(t, nodes, claims, "no address claimed without a node")
	info, err := fresh.kv.Status(ctx)
	require.NoError(t, err)
	st, ok := info.(*jetstream.KeyValueBucketStatus)
	require.True(t, ok)
	assert.Equal(t, 3, st.StreamInfo().Config.Replicas, "3 replicas on a cluster by default")
	assert.False(t, st.StreamInfo().Config.AllowDirect, "reads go to the leader")
}

// TestEmbeddedNATSCluster: three control instances whose embedded NATS
// servers form one cluster (no NATS of their own) share a 3-replica KV
// registry. A node registered on one is told every server's URL, and
// its session is accepted on another server after the first is gone.
func TestEmbeddedNATSCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3
	var srvs []*Server
	var advertise []string
	startOver(t, "control cluster", func() (err error) {
		srvs, advertise, err = startEmbeddedCluster(ctx, t, n)
		return err
	})
	for _, s := range srvs {
		t.Cleanup(func() { s.Close() })
	}
	r, err := controlapi.RegisterNATS(ctx, netx.OS, advertise[0], controlapi.Join{Token: testToken, Name: "roamer", Key: key.NewPrivate()})
	require.NoError(t, err)
	assert.Equal(t, advertise, stripQuery(r.NATS.URLs), "every server's URL")
	require.NoError(t, srvs[0].Close())
	// The closed server may have led the registry's stream: until the
	// others elect a leader, a login's read of the node's record fails
	// and the login is refused. A node tries again (node.retryControl),
	// and so does this, for a bounded time.
	s, err := controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	for try := 1; err != nil && try < 20; try++ {
		t.Logf("session try %d: %v", try, err)
		time.Sleep(500 * time.Millisecond)
		s, err = controlapi.Connect(ctx, netx.OS, r.NodeID, r.NATS, controlapi.Handlers{})
	}
	require.NoError(t, err, "the session connects to a server still up, which knows the node")
	defer s.Close()
	require.NoError(t, s.Presence(ctx, true, r.Epoch))
	kv, err := OpenKVStore(ctx, srvs[1].Conn(), KVOptions{Bucket: "registry"})
	require.NoError(t, err)
	info, err := kv.kv.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, info.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)
}

// TestEmbeddedNATSClusterPortTaken: a cluster listen address another
// process holds is refused at once, with the system's reason, not after
// a wait for a server that never gets ready.
func TestEmbeddedNATSClusterPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	start := time.Now()
	_, err = New(t.Context(), Config{
		Tokens: []JoinToken{{Value: testToken}}, KVBucket: "registry",
		EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0", ServerName: "c", StoreDir: t.TempDir(),
			Cluster: &NATSCluster{Listen: ln.Addr().String(), Secret: "route-secret-0123456789"}},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster listen")
	assert.Contains(t, err.Error(), "address already in use")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// startEmbeddedCluster starts n control instances whose embedded NATS
// servers form one cluster, on ports freePort found free. If one fails
// (a port taken again meanwhile), it closes the others and says why.
func startEmbeddedCluster(ctx context.Context, t *testing.T, n int) (srvs []*Server, advertise []string, err error) {
	// The others wait for peers to make the 3-replica bucket: cut their
	// wait short when one fails, so that the next try has the time.
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	t.Cleanup(cancel)
	var clientAddrs, routes []string
	for range n {
		clientAddrs = append(clientAddrs, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(t)))
	}
	for _, a := range clientAddrs {
		advertise = append(advertise, "nats://"+a)
	}
	srvs = make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer func() {
				if errs[i] != nil {
					cancel()
				}
			}()
			srvs[i], errs[i] = New(ctx, Config{
				Tokens: []JoinToken{{Value: testToken}}, KVBucket: "registry", AdvertiseNATS: strings.Join(advertise, ","),
				EmbeddedNATS: &EmbeddedNATSConfig{
					Listen: clientAddrs[i], StoreDir: t.TempDir(), ServerName: fmt.Sprintf("control-%d", i),
					Cluster: &NATSCluster{Listen: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes, Secret: "route-secret-0123456789"},
				},
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, s := range srvs {
				if s != nil {
					s.Close()
				}
			}
			return nil, nil, fmt.Errorf("control %d: %w", i, err)
		}
	}
	return srvs, advertise, nil
}

func stripQuery(urls []string) []string {
	var out []string
	for _, u := range urls {
		out = append(out, strings.SplitN(u, "?", 2)[0])
	}
	return out
}
