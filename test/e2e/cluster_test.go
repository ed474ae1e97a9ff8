package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// Load of TestClusterSurvivesKills.
const (
	clusterNodes   = 500 // registrations
	clusterWorkers = 16  // registering at once
	clusterKillAt  = 150 // registrations done when the kills come
	// registerDeadline bounds one node's registration, retries included.
	registerDeadline = 90 * time.Second
)

// TestClusterSurvivesKills runs deploy/'s control plane (three NATS
// servers, two control replicas, as TestDeployManifests does) and
// registers 500 nodes through it, each with a fresh key, 16 at a time,
// the way a node does (control.RegisterNATS, retrying on error with a
// bounded backoff, passing over a server it could not connect to for a
// few seconds). After 150 one NATS server and one control replica
// are killed (SIGKILL, no goodbye). Every registration succeeds, and the
// registry, read from the KV bucket through a surviving server, holds
// exactly those nodes, each with its key and the address it was given,
// no address twice. Two pod-mode sandboxes started before keep their
// direct path throughout and are in the registry at their addresses.
func TestClusterSurvivesKills(t *testing.T) {
	ctx, img := setup(t)
	if host, err := publishedHost(t); err != nil || host != "127.0.0.1" {
		t.Skipf("the load client dials the containers' addresses, which a remote engine (%s, %v) does not route here", host, err)
	}
	ctx, p := startControlPlane(ctx, t, img, 5*time.Minute)
	addrs, urls := make([]string, len(p.servers)), make([]string, len(p.servers))
	for i := range p.servers {
		addrs[i] = p.clientAddr(ctx, t, i) // not once killed
		urls[i] = "tls://" + addrs[i] + "?fingerprint=" + p.natsFP
	}
	pool := &serverPool{urls: urls, bad: map[string]time.Time{}}
	const deadNATS, deadControl = 1, 0
	// Two sandboxes, agent-0 on a direct path to agent-1 (which forwards
	// to a surviving server's monitoring page).
	agent, web := p.startPair(ctx, t, net.JoinHostPort(p.servers[2].ip(ctx, t, p.nw), "8222"))
	paths := pathEvents(agent, web.name)

	var done atomic.Int64
	killed := make(chan struct{})
	var killWG sync.WaitGroup
	killWG.Add(1)
	start := time.Now()
	go func() { // the test's: it waits for it below
		defer killWG.Done()
		defer close(killed)
		for done.Load() < clusterKillAt && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		for _, b := range []*box{p.servers[deadNATS], p.controls[deadControl]} {
			_, err := dockerClient(t).ContainerKill(ctx, b.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"})
			assert.NoError(t, err, "docker kill %s", b.name)
		}
		t.Logf("killed %s and %s after %d registrations (%v)", p.servers[deadNATS].name, p.controls[deadControl].name, done.Load(), time.Since(start).Round(time.Millisecond))
	}()

	type result struct {
		pub      key.Public
		resp     *controlapi.RegisterResponse
		attempts int
		retried  []error // the failed attempts
		err      error
	}
	results := make([]result, clusterNodes)
	next := make(chan int)
	var wg sync.WaitGroup
	for range clusterWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				k := key.NewPrivate()
				r := &results[i]
				r.pub = k.Public()
				r.resp, r.retried, r.err = registerRetrying(ctx, pool, i, controlapi.Join{Token: p.token, Name: fmt.Sprintf("load-%03d", i), Key: k})
				r.attempts = len(r.retried) + 1
				done.Add(1)
			}
		}()
	}
	for i := range clusterNodes {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	killWG.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("the kills did not happen")
	}

	retried, most := 0, 0
	causes := map[string]int{} // of the failed attempts, by the innermost error's text
	for i, r := range results {
		require.NoError(t, r.err, "registration %d (%d attempts)", i, r.attempts)
		if r.attempts > 1 {
			retried++
		}
		for _, err := range r.retried {
			msg := err.Error()
			causes[msg[strings.LastIndex(msg, ": ")+2:]]++
		}
		most = max(most, r.attempts)
	}
	t.Logf("%d registrations in %v (%.0f reg/s), %d retried, at most %d attempts; the failed attempts' causes: %v", clusterNodes, elapsed.Round(time.Millisecond),
		float64(clusterNodes)/elapsed.Seconds(), retried, most, causes)

	// The sandboxes kept their path: no change since the kills.
	_, err := fetchThrough(ctx, agent, web, "/", io.Discard)
	require.NoError(t, err, "agent-0 to agent-1 after the kills")
	assert.Equal(t, paths, pathEvents(agent, web.name), "agent-0's path changes to agent-1")
	waitPath(ctx, t, agent, web.name, "direct", 10*time.Second)

	// The registry, read through a surviving server.
	alive := (deadNATS + 1) % len(urls)
	nodes := readRegistry(ctx, t, p, addrs[alive])
	byID := map[string]*control.Node{}
	owner := map[netip.Addr]string{}
	for _, n := range nodes {
		byID[n.ID] = n
		if prev, dup := owner[n.Address.Addr()]; dup {
			t.Errorf("address %s held by %s and %s", n.Address.Addr(), prev, n.ID)
		}
		owner[n.Address.Addr()] = n.ID
	}
	assert.Len(t, nodes, clusterNodes+2, "the registry holds the load's nodes and the sandboxes, no more")
	for _, sb := range []*sandbox{agent, web} {
		if assert.Contains(t, byID, sb.nodeID, "%s in the registry", sb.name) {
			assert.Equal(t, sb.addr, byID[sb.nodeID].Address.Addr().String(), "%s's address", sb.name)
		}
	}
	for i, r := range results {
		n, ok := byID[r.resp.NodeID]
		if !assert.True(t, ok, "registration %d (%s) is in the registry", i, r.resp.NodeID) {
			continue
		}
		assert.Equal(t, r.pub, n.PublicKey, "node %s's key", n.ID)
		assert.Equal(t, r.resp.Address, n.Address, "node %s's address is the one it was given", n.ID)
		assert.Equal(t, fmt.Sprintf("load-%03d", i), n.Name)
	}
	// The surviving replica still answers, through the surviving servers.
	_, err = controlapi.RegisterNATS(ctx, netx.OS, urls[alive], controlapi.Join{Token: p.token, Name: "after", Key: key.NewPrivate()})
	assert.NoError(t, err, "a registration after the kills")
}

// pathEvents returns the lines in which b logs a path change to peer.
func pathEvents(b *sandbox, peer string) []string {
	var out []string
	for _, l := range strings.Split(b.output(), "\n") {
		if strings.Contains(l, "msg=path ") && strings.Contains(l, "peer="+peer+" ") {
			out = append(out, l)
		}
	}
	return out
}

// serverPool is the load client's list of NATS URLs. As nats.go's own
// pool does, it passes over a server it could not connect to for a while:
// a killed server's address takes seconds to time out.
type serverPool struct {
	urls []string
	mu   sync.Mutex
	bad  map[string]time.Time // until when
}

// pick returns the first URL from the i-th on that is not marked bad (or
// the i-th, if all are).
func (s *serverPool) pick(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.urls {
		if u := s.urls[(i+k)%len(s.urls)]; time.Now().After(s.bad[u]) {
			return u
		}
	}
	return s.urls[i%len(s.urls)]
}

func (s *serverPool) markBad(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad[url] = time.Now().Add(5 * time.Second)
}

// registerRetrying registers j as a node does, through the pool's URLs
// (starting at the i-th, moving on at each attempt), retrying on any
// error with a backoff from 100 ms doubling to 2 s, for at most
// registerDeadline. It returns the errors of the attempts that failed too.
func registerRetrying(ctx context.Context, pool *serverPool, i int, j controlapi.Join) (*controlapi.RegisterResponse, []error, error) {
	ctx, cancel := context.WithTimeout(ctx, registerDeadline)
	defer cancel()
	backoff := 100 * time.Millisecond
	var errs []error
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		url := pool.pick(i + attempt - 1)
		resp, err := controlapi.RegisterNATS(actx, netx.OS, url, j)
		acancel()
		if err == nil {
			return resp, errs, nil
		}
		if strings.Contains(err.Error(), "register: connect to ") {
			pool.markBad(url)
		}
		errs = append(errs, fmt.Errorf("attempt %d via %s: %w", attempt, url, err))
		select {
		case <-ctx.Done():
			return nil, errs, fmt.Errorf("register %s: %w", j.Name, errors.Join(errs...))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// readRegistry returns the nodes in the registry's KV bucket, read
// through the server at addr as control's NATS user.
func readRegistry(ctx context.Context, t *testing.T, p *controlPlane, addr string) []*control.Node {
	t.Helper()
	nc, err := nats.Connect("tls://"+addr, nats.Secure(pinnedTLS(p.natsFP)), nats.UserInfo(p.controlUser, p.callout.password),
		nats.NoReconnect(), nats.IgnoreDiscoveredServers())
	require.NoError(t, err, "connect to %s as %s", addr, p.controlUser)
	defer nc.Close()
	kv, err := control.OpenKVStore(ctx, nc, control.KVOptions{Bucket: "lattice", Replicas: len(p.servers)})
	require.NoError(t, err)
	nodes, err := kv.List(ctx)
	require.NoError(t, err)
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].ID < nodes[b].ID })
	return nodes
}
