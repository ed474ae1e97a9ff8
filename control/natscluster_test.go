package control

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// natsCluster is n stock nats-servers with JetStream in one cluster on
// loopback, without authentication: control connects as an external
// NATS user, as on a shared cluster.
type natsCluster struct {
	srvs []*server.Server
	opts []*server.Options
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNATSCluster starts n servers on ports freePort found free. A port
// taken again between that check and the server's listen (another test
// process) leaves a server that never gets ready: the cluster starts over
// on fresh ports, up to three times.
func startNATSCluster(t testing.TB, n int) *natsCluster {
	t.Helper()
	var c *natsCluster
	startOver(t, "NATS cluster", func() error {
		c = &natsCluster{}
		if err := c.startAll(t, n); err != nil {
			c.shutdown()
			return err
		}
		return nil
	})
	t.Cleanup(c.shutdown)
	c.waitJetStream(t)
	return c
}

// startOver runs start (servers on ports freePort found free) up to three
// times: a port may be taken again before a server listens on it.
func startOver(t testing.TB, what string, start func() error) {
	t.Helper()
	for try := 1; ; try++ {
		err := start()
		if err == nil {
			return
		}
		if try == 3 {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s, try %d: %v; starting over on fresh ports", what, try, err)
	}
}

func (c *natsCluster) startAll(t testing.TB, n int) error {
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	for i := range n {
		var routes []*url.URL
		for j, p := range ports {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "lattice-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		c.opts = append(c.opts, o)
		if err := c.start(o); err != nil {
			return err
		}
	}
	return nil
}

func (c *natsCluster) start(o *server.Options) error {
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("nats-server %s: %w", o.ServerName, err)
	}
	s.Start()
	c.srvs = append(c.srvs, s)
	// nats-server waits out the whole time when its route listener
	// failed: look between shorter waits for a port someone else holds.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if s.ReadyForConnections(500 * time.Millisecond) {
			return nil
		}
		if err := portTaken(o.Cluster.Port, s); err != nil {
			return fmt.Errorf("nats-server %s: %w", o.ServerName, err)
		}
	}
	return fmt.Errorf("nats-server %s not ready in 30 s", o.ServerName)
}

// portTaken says whether the cluster port s should listen on is held by
// someone else: s has no route listener, and the port cannot be bound.
func portTaken(port int, s *server.Server) error {
	if s.ClusterAddr() != nil {
		return nil
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		ln.Close()
		return nil
	}
	if s.ClusterAddr() != nil { // it bound the port meanwhile
		return nil
	}
	return fmt.Errorf("cluster port %d taken: %w", port, err)
}

// waitJetStream waits for the cluster's JetStream meta leader.
func (c *natsCluster) waitJetStream(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.srvs {
			if s.JetStreamIsLeader() {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no JetStream meta leader within 30s")
}

func (c *natsCluster) url(i int) string { return c.srvs[i].ClientURL() }

// urls lists every server's client URL, comma-separated.
func (c *natsCluster) urls() string {
	var u []string
	for _, s := range c.srvs {
		u = append(u, s.ClientURL())
	}
	return strings.Join(u, ",")
}

func (c *natsCluster) shutdown() {
	for _, s := range c.srvs {
		s.Shutdown()
	}
	for _, s := range c.srvs {
		s.WaitForShutdown()
	}
}

// populate writes n nodes straight into st (not through registration: the
// fast path the benchmarks use to stand for an existing registry), with
// SharedEvents set as current clients register.
func populate(t testing.TB, ctx context.Context, st Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				pub := key.Public(sha256.Sum256(fmt.Appendf(nil, "populate %d", i)))
				nd := &Node{ID: nodeID(pub), Name: fmt.Sprintf("pre-%d", i), PublicKey: pub, SecretHash: make([]byte, 32),
					Registered: time.Unix(0, 0), Epoch: 1, SharedEvents: true}
				var err error
				for a := range preferredAddrs(pub) {
					nd.Address = netip.PrefixFrom(a, Overlay.Bits())
					for range 5 {
						if err = st.Create(ctx, nd); !errors.Is(err, ErrConflict) {
							break
						}
					}
					if !errors.Is(err, ErrAddressTaken) {
						break
					}
				}
				if err != nil {
					errs <- fmt.Errorf("populate %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
