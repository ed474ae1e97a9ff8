package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/proxy"
	"github.com/latticelab/lattice/sandbox"
)

// mesh is control, a relay and two peers serving HTTP on port 8080 of
// their overlay addresses: "web", which takes a direct path, and
// "vault", which only ever uses the relay.
type mesh struct {
	*meshtest.World
	web, vault *meshtest.Peer
}

func newMesh(t testing.TB) *mesh {
	t.Helper()
	w := meshtest.Start(t)
	m := &mesh{World: w}
	m.web = w.Peer(t, "web")
	m.vault = w.Peer(t, "vault", func(c *node.Config) { c.ICE.RelayOnly = true })
	for _, p := range []*meshtest.Peer{m.web, m.vault} {
		name := p.Node.Identity().Name
		p.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s, you are %s", name, r.RemoteAddr)
		}))
	}
	return m
}

// config is a pod sandbox on the mesh with both proxies on loopback.
func (m *mesh) config(t testing.TB, name, stateDir string) sandbox.DriverConfig {
	return sandbox.DriverConfig{
		Name: name, ServerURL: m.NATSURL, Token: meshtest.Token, StateDir: stateDir,
		ListenAddr: meshtest.Loopback, SOCKS5: "127.0.0.1:0", HTTPProxy: "127.0.0.1:0",
		ProxyCredentials: &creds, Logger: meshtest.Logger(),
	}
}

var creds = proxyCreds("agent", "correct-horse-battery-staple")

func startPod(t testing.TB, cfg sandbox.DriverConfig) *sandbox.PodDriver {
	t.Helper()
	d, err := sandbox.NewPod(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Close() })
	return d
}

// startNamespacePod starts a sandbox named "agent" on m in namespace
// isolation, with no proxies and a state dir of its own.
func startNamespacePod(t testing.TB, m *mesh) *sandbox.PodDriver {
	t.Helper()
	cfg := m.config(t, "agent", t.TempDir())
	cfg.SOCKS5, cfg.HTTPProxy = "", ""
	return startPod(t, cfg)
}

// get fetches url with the sandbox's Dial, as an agent's HTTP client
// going through the sandbox would.
func get(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), url string) (string, error) {
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("HTTP %s", resp.Status)
	}
	return string(b), err
}

// eventually retries f until it succeeds or within passes.
func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("still failing after %v: %v", within, err)
}

func overlayURL(a netip.Addr, port int, path string) string {
	return fmt.Sprintf("http://%s%s", netip.AddrPortFrom(a, uint16(port)), path)
}

func proxyCreds(user, pass string) proxy.Credentials {
	return proxy.Credentials{Username: user, Password: pass}
}
