package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
)

// Where things are inside the containers.
const (
	stateDir  = dataDir + "/state"
	socksPort = "1080/tcp"
	// webPort is the overlay port a sandbox forwards to the relay's
	// metrics page: an HTTP server every test has at hand.
	webPort = 8080
)

// world is control (with embedded NATS) and an LRP relay, each on every
// network of a test, reachable there as "control" and "relay".
type world struct {
	img   string
	token string
	relay *box
	// relayIP is the relay's address on each network, by network name.
	relayIP map[string]string
	control *box
	// controlURL is where sandboxes register: NATS over TLS, pinning
	// control's self-signed certificate.
	controlURL string
}

// newWorld starts the relay, reads the fingerprint of its self-signed
// certificate from its output, and starts control pinning it; control
// listens off loopback, so it makes a self-signed certificate of its own,
// whose fingerprint the sandboxes pin.
func newWorld(ctx context.Context, t *testing.T, img string, nets ...*testcontainers.DockerNetwork) *world {
	t.Helper()
	w := &world{img: img, token: "e2e-join-" + randomHex(16), relayIP: map[string]string{}}
	secret := randomHex(32) + "\n"
	w.relay = mustStart(ctx, t, w.img, boxSpec{
		name: "relay", nets: nets, alias: "relay", volume: newVolume(ctx, t, "relay"),
		files: map[string]string{"relay.secret": secret},
		args: []string{"relay", "--listen", "0.0.0.0:4443", "--secret-file", dataDir + "/relay.secret",
			"--metrics-listen", "0.0.0.0:9090", "--metrics-allow-remote"},
		ready: `relay: metrics on`,
	})
	fingerprint := w.relay.match(ctx, t, `relay: self-signed certificate, fingerprint (\S+)`)[1]
	for _, nw := range nets {
		w.relayIP[nw.Name] = w.relay.ip(ctx, t, nw)
	}
	w.control = mustStart(ctx, t, w.img, boxSpec{
		name: "control", nets: nets, alias: "control", volume: newVolume(ctx, t, "control"),
		files: map[string]string{"tokens": w.token + "\n", "relay.secret": secret},
		args: []string{"control", "--embedded-nats", "--nats-listen", "0.0.0.0:4222",
			// Nodes connect to the URL control hands out, not to --server-url.
			"--advertise-nats", "tls://control:4222", "--listen-http=",
			"--token-file", dataDir + "/tokens", "--data-dir", dataDir + "/data",
			"--relay", "relay:4443," + fingerprint, "--relay-secret-file", dataDir + "/relay.secret"},
		ready: `control: NATS on`,
	})
	fp := w.control.match(ctx, t, `control: TLS self-signed certificate in \S+, fingerprint (\S+)`)[1]
	w.controlURL = "tls://control:4222?fingerprint=" + fp
	return w
}

// sandbox is a running `lattice sandbox start --mode pod` container.
type sandbox struct {
	*box
	nodeID, addr string // from its first output line
	user, pass   string // SOCKS5 credentials, if it serves SOCKS5
}

// sandboxSpec says how to run one sandbox.
type sandboxSpec struct {
	name   string
	net    *testcontainers.DockerNetwork
	volume string // its state volume; the test makes it so it can reuse it
	socks  bool   // serve SOCKS5 on 0.0.0.0:1080, published on the host
	// forwardTo, if set, is HOST:PORT exposed on overlay port webPort.
	forwardTo string
}

// startSandbox runs a pod-mode sandbox, checks that it runs without any
// privilege, and returns its identity once it serves.
func (w *world) startSandbox(ctx context.Context, t *testing.T, s sandboxSpec) *sandbox {
	t.Helper()
	sb := &sandbox{}
	files := map[string]string{"token": w.token + "\n"}
	// --isolation proxy: the container's RuntimeDefault seccomp profile
	// refuses the user namespaces of namespace isolation.
	args := []string{"sandbox", "start", "--mode", "pod", "--isolation", "proxy", "--name", s.name,
		"--server-url", w.controlURL, "--token-file", dataDir + "/token", "--state-dir", stateDir}
	var ports []string
	if s.socks {
		sb.user, sb.pass = "agent", randomHex(12)
		files["proxy-credentials"] = sb.user + ":" + sb.pass + "\n"
		args = append(args, "--socks5", "0.0.0.0:1080", "--proxy-credentials-file", dataDir+"/proxy-credentials")
		ports = []string{socksPort}
	}
	if s.forwardTo != "" {
		args = append(args, "--forward", fmt.Sprintf("%d=%s", webPort, s.forwardTo))
	}
	sb.box = mustStart(ctx, t, w.img, boxSpec{
		name: s.name, nets: []*testcontainers.DockerNetwork{s.net}, alias: s.name, volume: s.volume,
		files: files, args: args, ports: ports, ready: `sandbox: control socket`,
	})
	m := sb.match(ctx, t, `sandbox: `+s.name+` \((\S+)\) at (\S+), mode pod`)
	sb.nodeID = m[1]
	sb.addr, _, _ = strings.Cut(m[2], "/")
	assertUnprivileged(ctx, t, sb.box)
	return sb
}

// socks returns an HTTP client that goes through the sandbox's SOCKS5
// proxy, as published on the host.
func (s *sandbox) socks(ctx context.Context, t *testing.T) *http.Client {
	t.Helper()
	host, err := publishedHost(t)
	require.NoError(t, err)
	port, err := s.MappedPort(ctx, socksPort)
	require.NoError(t, err)
	proxy := &url.URL{Scheme: "socks5", User: url.UserPassword(s.user, s.pass), Host: net.JoinHostPort(host, port.Port())}
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
}

// getThrough fetches the relay's metrics page through from's SOCKS5 proxy,
// over the overlay, via to's forward: the test's traffic proof.
func getThrough(ctx context.Context, from *sandbox, c *http.Client, to *sandbox) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(to.addr, fmt.Sprint(webPort))), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("via %s to %s: %w", from.name, to.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "lattice_relay_clients") {
		return fmt.Errorf("via %s to %s: %s, %.200q", from.name, to.name, resp.Status, body)
	}
	return nil
}

// reach waits until from reaches to over the overlay.
func reach(ctx context.Context, t *testing.T, from, to *sandbox, timeout time.Duration) {
	t.Helper()
	c := from.socks(ctx, t)
	start := time.Now()
	poll(ctx, t, fmt.Sprintf("HTTP from %s's SOCKS5 to %s:%d on the overlay", from.name, to.addr, webPort), timeout,
		func(ctx context.Context) error { return getThrough(ctx, from, c, to) })
	t.Logf("%s reached %s at %s:%d in %v", from.name, to.name, to.addr, webPort, time.Since(start).Round(time.Millisecond))
}

// assertForwarded checks, in to's audit log, that to forwarded a
// connection from from's overlay address to target (the other end of the
// traffic proof), and that `lattice sandbox audit verify` accepts the log.
func assertForwarded(ctx context.Context, t *testing.T, to, from *sandbox, target string) {
	t.Helper()
	log := stateDir + "/audit.jsonl"
	code, out, err := to.exec(ctx, "sandbox", "audit", "verify", log)
	require.NoError(t, err)
	assert.Equal(t, 0, code, "audit verify in %s:\n%s", to.name, out)
	assert.Contains(t, out, ": ok, ")

	rc, err := to.CopyFileFromContainer(ctx, log)
	require.NoError(t, err)
	defer rc.Close()
	var forwards []string
	sc := bufio.NewScanner(rc)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct{ Kind, Src, Dst string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), "audit line %q", sc.Text())
		if ev.Kind != "forward" {
			continue
		}
		forwards = append(forwards, ev.Src+" -> "+ev.Dst)
		if host, _, _ := net.SplitHostPort(ev.Src); host == from.addr && ev.Dst == target {
			return
		}
	}
	require.NoError(t, sc.Err())
	assert.Fail(t, "no forward from "+from.name+" in "+to.name+"'s audit log", "want %s:* -> %s; forwards: %q", from.addr, target, forwards)
}

// status runs `lattice sandbox agent status` in the sandbox's container.
func (s *sandbox) status(ctx context.Context, t *testing.T) string {
	t.Helper()
	out, err := s.statusErr(ctx)
	require.NoError(t, err)
	return out
}

// statusErr is status for use inside poll.
func (s *sandbox) statusErr(ctx context.Context) (string, error) {
	code, out, err := s.exec(ctx, "sandbox", "agent", "status", "--state-dir", stateDir)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("sandbox agent status in %s: exit code %d:\n%s", s.name, code, out)
	}
	return out, nil
}

// pathTo returns the PATH column of peer's row in a status table, the
// column found by its header.
func pathTo(status, peer string) string {
	col := -1
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "PEER" {
			col = slices.Index(f, "PATH")
			continue
		}
		if col >= 0 && len(f) > col && f[0] == peer {
			return f[col]
		}
	}
	return ""
}

// waitPath waits until s reports path to peer.
func waitPath(ctx context.Context, t *testing.T, s *sandbox, peer, path string, timeout time.Duration) string {
	t.Helper()
	var out string
	poll(ctx, t, fmt.Sprintf("%s's path to %s is %s", s.name, peer, path), timeout, func(ctx context.Context) error {
		var err error
		if out, err = s.statusErr(ctx); err != nil {
			return err
		}
		if got := pathTo(out, peer); got != path {
			return fmt.Errorf("path %q in:\n%s", got, out)
		}
		return nil
	})
	return out
}
