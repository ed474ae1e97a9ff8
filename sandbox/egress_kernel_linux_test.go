package sandbox

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/netns"
)

// auditLines is an audit.Sink in memory.
type auditLines struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (a *auditLines) Write(ev audit.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, ev)
	return nil
}

func (a *auditLines) egress(dst string) []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Event
	for _, ev := range a.evs {
		if ev.Kind == "egress" && ev.Dst == dst {
			out = append(out, ev)
		}
	}
	return out
}

// TestKernelOverlayAudit: gvisor mode's filter on wg0, with eBPF (Pro)
// and with iptables (its fallback): a named peer is reached, an unnamed
// one is not, and each connection is one audit line, allowed or denied.
func TestKernelOverlayAudit(t *testing.T) {
	pod := testNetns(t)
	srv := fmt.Sprintf("lsbxsrv-%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", srv)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", srv).Run() })
	ip("-n", pod, "link", "add", "wg0", "type", "veth", "peer", "name", "wgpeer", "netns", srv)
	ip("-n", pod, "addr", "add", "100.64.0.7/10", "dev", "wg0")
	ip("-n", pod, "link", "set", "wg0", "up")
	for _, a := range []string{"100.64.0.2/10", "100.64.0.3/10"} {
		ip("-n", srv, "addr", "add", a, "dev", "wgpeer")
	}
	ip("-n", srv, "link", "set", "wgpeer", "up")
	var ln net.Listener
	require.NoError(t, netns.Do("/run/netns/"+srv, func() (err error) { ln, err = net.Listen("tcp", ":8080"); return err }))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func(to string) error {
		var derr error
		require.NoError(t, netns.Do("/run/netns/"+pod, func() error {
			c, err := net.DialTimeout("tcp", to, 700*time.Millisecond)
			if err == nil {
				c.Close()
			}
			derr = err
			return nil
		}))
		return derr
	}
	require.Eventually(t, func() bool { return dial("100.64.0.3:8080") == nil }, 10*time.Second, 100*time.Millisecond, "before the filter")

	backends := []bool{true} // iptables only
	if edition.Pro() {
		backends = append(backends, false)
	}
	for _, iptablesOnly := range backends {
		name := map[bool]string{true: "iptables", false: "ebpf"}[iptablesOnly]
		t.Run(name, func(t *testing.T) {
			var logs strings.Builder
			var logMu sync.Mutex
			k := newKernelEgress("wg0", netip.MustParsePrefix("100.64.0.7/10"), mustPolicy(t, "default: deny\nrules:\n  - allow: peer:web\n    ports: [8080]\n"),
				func() []nodePeer {
					return []nodePeer{{"web", netip.MustParseAddr("100.64.0.2")}, {"db", netip.MustParseAddr("100.64.0.3")}}
				},
				slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return logs.Write(p) }), nil)))
			k.v6 = true
			k.iptablesOnly = iptablesOnly
			sink := &auditLines{}
			k.audit = sink
			k.run = func(tool string, args []string, stdin string) error {
				return runTool("ip", append([]string{"netns", "exec", pod, tool}, args...), stdin)
			}
			// The eBPF program and the NFLOG socket are made in the pod.
			require.NoError(t, netns.Do("/run/netns/"+pod, k.install))
			defer k.remove()
			for range 2 {
				assert.NoError(t, dial("100.64.0.2:8080"), "web, by name")
			}
			assert.Error(t, dial("100.64.0.3:8080"), "db, not named")
			require.Eventually(t, func() bool {
				return len(sink.egress("100.64.0.2:8080")) >= 2 && len(sink.egress("100.64.0.3:8080")) >= 1
			},
				5*time.Second, 20*time.Millisecond, "audit lines")
			time.Sleep(100 * time.Millisecond)
			allowed := sink.egress("100.64.0.2:8080")
			require.Len(t, allowed, 2, "one line per connection: %v", allowed)
			assert.NotEqual(t, allowed[0].Src, allowed[1].Src)
			for _, ev := range allowed {
				assert.Equal(t, "allow", ev.Decision)
				assert.Equal(t, "p.yaml:3 allow peer:web ports 8080", ev.Rule)
			}
			denied := sink.egress("100.64.0.3:8080")[0]
			assert.Equal(t, "deny", denied.Decision)
			assert.Equal(t, "overlay peer not named", denied.Rule)
			logMu.Lock()
			defer logMu.Unlock()
			if iptablesOnly {
				assert.NotContains(t, logs.String(), "eBPF egress filter attached")
			} else {
				assert.Contains(t, logs.String(), "egress on wg0 by the eBPF filter")
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }
