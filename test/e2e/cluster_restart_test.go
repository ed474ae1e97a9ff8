package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The transfer of TestClusterRollingRestart: at least transferMin bytes,
// paced so that it lasts at least 25 s and outlasts the restarts (some
// 15 s here), at most transferCap.
const (
	transferRate  = 4e6   // bytes per second, until the restarts are over
	transferMin   = 100e6 // bytes
	transferCap   = 360e6 // 90 s
	transferChunk = 64 << 10
	transferTail  = 1e6 // sent after the restarts are over, at least
)

// TestClusterRollingRestart restarts the three NATS servers of deploy/'s
// control plane one at a time, each once the cluster has healed from the
// last (every server ready, the registry's stream with a leader and
// every replica current), while a transfer runs between two pod-mode
// sandboxes on a direct path: agent-0's SOCKS5 proxy, over the overlay,
// to agent-1's forward, to an HTTP server of the test's streaming random
// bytes (100 MB or more, see transferMin). Not one byte is lost: the count and SHA-256 received equal what
// was sent. Then both control replicas are restarted: the registry still
// holds both nodes at the addresses they were given, and agent-0 still
// reaches agent-1 directly.
//
// The servers' JetStream directories are tmpfs here (the harness makes
// every claim volume one), so each restarted server comes back empty and
// catches the registry up from the other two: harsher than a pod that
// keeps its volume.
func TestClusterRollingRestart(t *testing.T) {
	ctx, img := setup(t)
	if host, err := publishedHost(t); err != nil || host != "127.0.0.1" {
		t.Skipf("the test dials the containers' addresses, which a remote engine (%s, %v) does not route here", host, err)
	}
	ctx, p := startControlPlane(ctx, t, img, 6*time.Minute)
	src := newPacedSource(ctx, t, p)
	agent, web := p.startPair(ctx, t, src.addr)

	type got struct {
		n   int64
		sum string
		err error
	}
	res := make(chan got, 1)
	go func() { // the test's: it receives from res below
		h := sha256.New()
		n, err := fetchThrough(ctx, agent, web, "/", h)
		res <- got{n, hex.EncodeToString(h.Sum(nil)), err}
	}()
	src.waitStarted(ctx, t)

	start := time.Now()
	for _, s := range p.servers {
		stop := 10 * time.Second
		require.NoError(t, s.Stop(ctx, &stop), "stop %s", s.name)
		require.NoError(t, s.Start(ctx), "start %s", s.name)
		p.env.waitReady(ctx, t, s, p.natsW, "nats")
		p.waitHealed(ctx, t)
		t.Logf("%s restarted and the cluster healed after %v (%d bytes through)", s.name, time.Since(start).Round(time.Millisecond), src.sent())
	}
	restarts, during := time.Since(start), src.sent()
	src.finish()
	var r got
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatalf("the transfer did not end: %v", ctx.Err())
	}
	sent, sum, err := src.result()
	require.NoError(t, err, "the source's writes")
	require.NoError(t, r.err, "the transfer")
	assert.Equal(t, sent, r.n, "bytes received, of those sent")
	assert.Equal(t, sum, r.sum, "SHA-256 received, of what was sent")
	t.Logf("rolling restart of %d servers in %v; %d bytes transferred (%d during the restarts), SHA-256 %s on both ends", len(p.servers), restarts.Round(time.Millisecond), sent, during, sum)
	waitPath(ctx, t, agent, web.name, "direct", 30*time.Second)

	// Control restarted: the nodes keep their addresses.
	for _, c := range p.controls {
		stop := 10 * time.Second
		require.NoError(t, c.Stop(ctx, &stop), "stop %s", c.name)
		require.NoError(t, c.Start(ctx), "start %s", c.name)
		p.env.waitReady(ctx, t, c, p.controlW, "control")
	}
	nodes := readRegistry(ctx, t, p, p.clientAddr(ctx, t, 0))
	addrs := map[string]string{}
	for _, n := range nodes {
		addrs[n.ID] = n.Address.Addr().String()
	}
	assert.Equal(t, map[string]string{agent.nodeID: agent.addr, web.nodeID: web.addr}, addrs, "the registry after control restarted")
	waitPath(ctx, t, agent, web.name, "direct", 30*time.Second)
	n, err := fetchThrough(ctx, agent, web, "/?short", io.Discard)
	require.NoError(t, err, "a transfer after control restarted")
	assert.Equal(t, src.sent(), n)
}

// fetchThrough GETs the source through from's SOCKS5 proxy, over the
// overlay, via to's forward, writing the body to w.
func fetchThrough(ctx context.Context, from, to *sandbox, path string, w io.Writer) (int64, error) {
	host, err := func() (string, error) {
		in, err := from.Inspect(ctx)
		if err != nil {
			return "", err
		}
		for _, ep := range in.NetworkSettings.Networks {
			return ep.IPAddress.String(), nil
		}
		return "", errors.New("no network")
	}()
	if err != nil {
		return 0, fmt.Errorf("%s's address: %w", from.name, err)
	}
	proxy := &url.URL{Scheme: "socks5", User: url.UserPassword(from.user, from.pass), Host: net.JoinHostPort(host, "1080")}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(to.addr, fmt.Sprint(webPort))+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("via %s to %s: %w", from.name, to.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("via %s to %s: %s", from.name, to.name, resp.Status)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("via %s to %s, after %d bytes: %w", from.name, to.name, n, err)
	}
	return n, nil
}

// pacedSource is an HTTP server on the test's end of the Docker network
// streaming random bytes at up to transferRate until finish, then
// unpaced until it has sent transferTail bytes more and transferMin in
// all (none with ?short), failing at transferCap; it keeps the count and
// SHA-256 of what it wrote.
type pacedSource struct {
	addr      string
	started   chan struct{}
	startOnce sync.Once
	once      sync.Once
	finished  chan struct{}
	mu        sync.Mutex
	n         int64
	h         hash.Hash
	err       error
}

func newPacedSource(ctx context.Context, t *testing.T, p *controlPlane) *pacedSource {
	t.Helper()
	nw, err := dockerClient(t).NetworkInspect(ctx, p.nw.ID, client.NetworkInspectOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, nw.Network.IPAM.Config, "network %s has no subnet", p.nw.Name)
	gw := nw.Network.IPAM.Config[0].Gateway
	ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0")) // the host's address on the test's network only
	require.NoError(t, err)
	s := &pacedSource{addr: ln.Addr().String(), started: make(chan struct{}), finished: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { // stopped by the cleanup
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		s.finish()
		_ = srv.Close()
		<-done
	})
	return s
}

func (s *pacedSource) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n, s.h, s.err = 0, sha256.New(), nil
	s.mu.Unlock()
	s.startOnce.Do(func() { close(s.started) })
	least := int64(transferMin)
	if r.URL.Query().Has("short") {
		least = 0
	}
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, transferChunk)
	begin := time.Now()
	var tail int64 = -1 // bytes since finish
	for {
		n := s.sent()
		if n >= transferCap {
			s.mu.Lock()
			s.err = fmt.Errorf("stopped at the cap, %d bytes, before the restarts were over", n)
			s.mu.Unlock()
			return
		}
		select {
		case <-s.finished:
			tail = max(tail, 0)
		default:
		}
		if tail >= transferTail && n >= least {
			return
		}
		if ahead := time.Duration(float64(n)/transferRate*float64(time.Second)) - time.Since(begin); ahead > 0 && tail < 0 {
			select {
			case <-time.After(ahead):
			case <-s.finished:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = rng.Read(buf)
		_, err := w.Write(buf)
		s.mu.Lock()
		if err != nil {
			s.err = fmt.Errorf("write after %d bytes: %w", s.n, err)
			s.mu.Unlock()
			return
		}
		s.n += int64(len(buf))
		s.h.Write(buf)
		s.mu.Unlock()
		if tail >= 0 {
			tail += int64(len(buf))
		}
	}
}

func (s *pacedSource) waitStarted(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-s.started:
	case <-ctx.Done():
		t.Fatalf("the transfer did not start: %v", ctx.Err())
	}
}

// finish makes the stream end transferTail bytes later, unpaced.
func (s *pacedSource) finish() { s.once.Do(func() { close(s.finished) }) }

func (s *pacedSource) sent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *pacedSource) result() (int64, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, hex.EncodeToString(s.h.Sum(nil)), s.err
}

// waitHealed waits until every NATS server passes its readiness probe
// (JetStream current with the meta leader and every stream it holds) and
// the registry's stream has a leader reporting every follower current.
func (p *controlPlane) waitHealed(ctx context.Context, t *testing.T) {
	t.Helper()
	c, err := p.natsW.Container("nats")
	require.NoError(t, err)
	poll(ctx, t, "the NATS cluster heals", 60*time.Second, func(ctx context.Context) error {
		for _, s := range p.servers {
			if err := s.probe(ctx, t, c, c.ReadinessProbe); err != nil {
				return fmt.Errorf("%s not ready: %w", s.name, err)
			}
		}
		var errs []error
		for _, s := range p.servers {
			in, err := s.Inspect(ctx)
			if err != nil {
				return err
			}
			ep, ok := in.NetworkSettings.Networks[p.nw.Name]
			if !ok {
				return fmt.Errorf("%s is not on %s", s.name, p.nw.Name)
			}
			err = registryCurrent(ctx, net.JoinHostPort(ep.IPAddress.String(), "8222"), len(p.servers))
			if err == nil {
				return nil // the leader's view
			}
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
		return errors.Join(errs...)
	})
}

// registryCurrent checks, on a server's monitoring page, that the
// registry's stream has a leader and want-1 current followers.
func registryCurrent(ctx context.Context, monitor string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+monitor+"/jsz?streams=true", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var jsz struct {
		AccountDetails []struct {
			StreamDetail []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Name    string `json:"name"`
						Current bool   `json:"current"`
					} `json:"replicas"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return err
	}
	for _, a := range jsz.AccountDetails {
		for _, st := range a.StreamDetail {
			if st.Name != "KV_lattice" {
				continue
			}
			if st.Cluster.Leader == "" || len(st.Cluster.Replicas) != want-1 {
				return fmt.Errorf("KV_lattice: leader %q, replicas %+v", st.Cluster.Leader, st.Cluster.Replicas)
			}
			for _, r := range st.Cluster.Replicas {
				if !r.Current {
					return fmt.Errorf("KV_lattice: %s not current", r.Name)
				}
			}
			return nil
		}
	}
	return errors.New("no stream KV_lattice")
}
