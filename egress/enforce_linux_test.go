package egress

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
)

// basePolicy allows web on 8080 by name and anything outside the overlay;
// db (10.79.N.3) is an overlay peer it does not name.
const basePolicy = "default: deny\nrules:\n  - allow: peer:web\n    ports: [8080]\n    proto: tcp\n  - allow: any\n"

// memSink is an audit.Sink in memory.
type memSink struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (s *memSink) Write(ev audit.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, ev)
	return nil
}

// find returns the first event to dst, waiting up to 5 s for it.
func (s *memSink) find(t *testing.T, dst string) audit.Event {
	t.Helper()
	var got audit.Event
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ev := range s.evs {
			if ev.Dst == dst {
				got = ev
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "an audit event to %s", dst)
	return got
}

// start runs Start for the pair's client side.
func start(t *testing.T, p pair, cfg Config) *Enforcer {
	t.Helper()
	cfg.Interface, cfg.Netns, cfg.Overlay = "vc", p.client, p.overlay()
	if cfg.Peers == nil {
		cfg.Peers = func() map[string][]netip.Addr {
			return map[string][]netip.Addr{"web": {p.addr(2)}, "db": {p.addr(3)}}
		}
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = filepath.Join(t.TempDir(), "no-bpffs")
	}
	e, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestEnforce: with each backend, the policy's rules hold on the
// interface: a peer named by the policy on its port, not on another; an
// overlay peer it does not name; the metadata address though "allow: any"
// is there; a destination outside the overlay by "allow: any". Denials
// are audited. Close removes the filter.
func TestEnforce(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	listen(t, p, 9090)
	web, webOther, db := netip.AddrPortFrom(p.addr(2), 8080), netip.AddrPortFrom(p.addr(2), 9090), netip.AddrPortFrom(p.addr(3), 8080)
	meta := netip.MustParseAddrPort("169.254.169.254:8080")
	outside := netip.AddrPortFrom(p.outside(), 8080)
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			require.True(t, canConnect(t, p, db), "before the filter")
			sink := &memSink{}
			e := start(t, p, Config{Policy: writePolicy(t, p, t.TempDir(), basePolicy), Backend: backend, Audit: sink})
			require.Equal(t, backend, e.Backend())
			assert.True(t, canConnect(t, p, web), "peer:web on 8080")
			assert.False(t, canConnect(t, p, webOther), "peer:web on 9090")
			assert.False(t, canConnect(t, p, db), "db: overlay peer not named")
			assert.False(t, canConnect(t, p, meta), "metadata, denied by default")
			assert.True(t, canConnect(t, p, outside), "outside the overlay: allow any")
			for dst, rule := range map[netip.AddrPort]string{db: "overlay peer not named", meta: "metadata", webOther: "overlay peer not named"} {
				ev := sink.find(t, dst.String())
				assert.Equal(t, "deny", ev.Decision, dst)
				assert.Equal(t, rule, ev.Rule, dst)
				assert.Equal(t, "tcp", ev.Proto)
				assert.Equal(t, p.addr(1).String(), strings.Split(ev.Src, ":")[0], "from the filtered side")
			}
			require.NoError(t, e.Close())
			assert.True(t, canConnect(t, p, db), "Close removes the filter")
		})
	}
}

// TestPeerAddressFollowed: peer:NAME follows the peer's address.
func TestPeerAddressFollowed(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			var mu sync.Mutex
			webAt := p.addr(2)
			peers := func() map[string][]netip.Addr {
				mu.Lock()
				defer mu.Unlock()
				return map[string][]netip.Addr{"web": {webAt}}
			}
			start(t, p, Config{Policy: writePolicy(t, p, t.TempDir(), basePolicy), Backend: backend, Peers: peers, PeerInterval: 50 * time.Millisecond})
			require.True(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)))
			require.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(3), 8080)))
			mu.Lock()
			webAt = p.addr(3)
			mu.Unlock()
			assert.Eventually(t, func() bool { return canConnect(t, p, netip.AddrPortFrom(p.addr(3), 8080)) }, 5*time.Second, 50*time.Millisecond, "web's new address")
			assert.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "web's old address")
		})
	}
}

// TestReloadUnderTraffic: a stream to web runs while the policy file is
// rewritten back and forth (both versions allow web, they differ about
// db): no write or echo fails, and db's verdict follows the file.
func TestReloadUnderTraffic(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	withDB := "default: deny\nrules:\n  - allow: [peer:web, peer:db]\n    ports: [8080]\n"
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			path := writePolicy(t, p, t.TempDir(), basePolicy)
			e := start(t, p, Config{Policy: path, Backend: backend, WatchInterval: 20 * time.Millisecond})
			c, err := dial(t, p, netip.AddrPortFrom(p.addr(2), 8080), time.Second)
			require.NoError(t, err)
			defer c.Close()
			stop := make(chan struct{})
			streamErr := make(chan error, 1)
			var echoed int
			go func() {
				buf := make([]byte, 1024)
				for {
					select {
					case <-stop:
						streamErr <- nil
						return
					default:
					}
					_ = c.SetDeadline(time.Now().Add(2 * time.Second))
					if _, err := c.Write(buf); err != nil {
						streamErr <- err
						return
					}
					if _, err := readFull(c, buf); err != nil {
						streamErr <- err
						return
					}
					echoed++
				}
			}()
			for i := range 6 {
				src := basePolicy
				if i%2 == 0 {
					src = withDB
				}
				rewritePolicy(t, p, path, src)
				require.NoError(t, e.Reload())
				assert.Equal(t, i%2 == 0, canConnect(t, p, netip.AddrPortFrom(p.addr(3), 8080)), "db after reload %d", i)
			}
			close(stop)
			require.NoError(t, <-streamErr, "the allowed stream across reloads")
			assert.Greater(t, echoed, 10)
		})
	}
}

func readFull(c interface{ Read([]byte) (int, error) }, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestBadEditKeepsPolicy: a file that does not parse, on SIGHUP (Reload)
// or by the poll, leaves the policy in force, and the log says so.
func TestBadEditKeepsPolicy(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			var logs logBuffer
			path := writePolicy(t, p, t.TempDir(), basePolicy)
			e := start(t, p, Config{Policy: path, Backend: backend, Logger: logs.logger(), WatchInterval: 20 * time.Millisecond})
			before := e.Policy()
			rewritePolicy(t, p, path, "default: deny\nrules:\n  - allow: peer:db\n    ports: [http]\n")
			err := e.Reload()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "policy.yaml:4:13: rule 1: ports")
			assert.Same(t, before, e.Policy())
			assert.True(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "web still allowed")
			assert.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(3), 8080)), "db still denied")
			assert.Contains(t, logs.String(), "keeping the policy in force")
		})
	}
}

// TestStartErrors: bad configuration is refused before anything is
// installed.
func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("default: maybe\n"), 0o600))
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no interface", Config{Policy: bad}, "egress: Interface and Policy (or Fixed) are required"},
		{"no policy", Config{Interface: "lo"}, "egress: Interface and Policy (or Fixed) are required"},
		{"backend", Config{Interface: "lo", Policy: bad, Backend: "nft"}, `egress: backend "nft": want one of [auto ebpf iptables]`},
		{"bad file", Config{Interface: "lo", Policy: bad, Backend: IPTables}, "bad.yaml:1"},
		{"missing file", Config{Interface: "lo", Policy: filepath.Join(dir, "none.yaml"), Backend: IPTables}, "none.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(tc.cfg)
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), tc.wantErr), "%v, want %q", err, tc.wantErr)
		})
	}
}

// TestReportAllowed: with ReportAllowed, each allowed connection is one
// "allow" event with its own source port, by either backend.
func TestReportAllowed(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	listen(t, p, 8080)
	web := netip.AddrPortFrom(p.addr(2), 8080)
	for _, backend := range backends() {
		t.Run(backend, func(t *testing.T) {
			sink := &memSink{}
			start(t, p, Config{Policy: writePolicy(t, p, t.TempDir(), basePolicy), Backend: backend, Audit: sink, ReportAllowed: true})
			for range 3 {
				require.True(t, canConnect(t, p, web))
			}
			var srcs []string
			require.Eventually(t, func() bool {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				srcs = srcs[:0]
				for _, ev := range sink.evs {
					if ev.Dst == web.String() && ev.Decision == "allow" {
						assert.Contains(t, ev.Rule, "allow peer:web tcp ports 8080")
						srcs = append(srcs, ev.Src)
					}
				}
				return len(srcs) >= 3
			}, 5*time.Second, 20*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // no late duplicates
			sink.mu.Lock()
			defer sink.mu.Unlock()
			n := 0
			seen := map[string]bool{}
			for _, ev := range sink.evs {
				if ev.Dst == web.String() && ev.Decision == "allow" {
					n++
					assert.False(t, seen[ev.Src], "one event per connection: %s twice", ev.Src)
					seen[ev.Src] = true
				}
			}
			assert.Equal(t, 3, n)
		})
	}
}
