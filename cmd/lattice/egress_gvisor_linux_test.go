//go:build pro

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/meshtest"
)

// TestSandboxGVisorEgressAudit: in gvisor mode the eBPF filter on wg0
// reports every connection the agent in runsc opens: three destinations
// (two ports on web, one on vault), each connection the servers saw is
// one "egress" allow line in a log that verifies, and the refused port is
// a deny line.
func TestSandboxGVisorEgressAudit(t *testing.T) {
	p := newPod(t, 6)
	w := meshtest.StartOn(t, p.host)
	web := w.Peer(t, "web")
	vault := w.Peer(t, "vault")
	var mu sync.Mutex
	served := map[string]int{} // requests (one connection each) by destination
	serve := func(peer *meshtest.Peer, port uint16) string {
		dst := netip.AddrPortFrom(peer.Addr(), port).String()
		peer.ServeHTTP(t, port, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			served[dst]++
			mu.Unlock()
			w.Header().Set("Connection", "close")
			fmt.Fprint(w, "ok")
		}))
		return dst
	}
	dsts := []string{serve(web, 8080), serve(web, 8081), serve(vault, 8080)}
	agent := buildAgent(t)
	state := t.TempDir()
	pol := writeFile(t, "policy.yaml", "default: deny\nrules:\n  - allow: [peer:web, peer:vault]\n    ports: [8080, 8081]\n    proto: tcp\n", 0o600)
	args := []string{"sandbox", "run", "--mode", "gvisor", "--name", "agent", "--server-url", w.NATSURL,
		"--token", meshtest.Token, "--state-dir", state, "--listen-addr", p.addr.String(), "--egress-policy", pol, "--", agent, "sleep", "2s"}
	for _, dst := range dsts {
		args = append(args, "fetch", "http://"+dst+"/")
	}
	denied := netip.AddrPortFrom(web.Addr(), 22).String()
	args = append(args, "refused", denied)
	stdout, stderr, code := p.run(t, args...)
	t.Logf("agent output:\n%s", stdout)
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	assert.NotContains(t, stdout, "FAIL")
	require.Contains(t, stderr, "egress on wg0 by the eBPF filter", "the kernel runs the eBPF filter here")

	path := filepath.Join(state, "audit.jsonl")
	rep, err := audit.VerifyFile(path)
	require.NoError(t, err, "the audit log verifies")
	allows := map[string][]string{} // sources by destination
	var denies []audit.Event
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev audit.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Kind != "egress" {
			continue
		}
		switch ev.Decision {
		case "allow":
			allows[ev.Dst] = append(allows[ev.Dst], ev.Src)
		case "deny":
			denies = append(denies, ev)
		}
	}
	require.NoError(t, sc.Err())
	t.Logf("audit: %d lines verified; allowed connections %v", rep.Lines, allows)
	mu.Lock()
	defer mu.Unlock()
	for _, dst := range dsts {
		srcs := allows[dst]
		assert.Len(t, srcs, served[dst], "one allow line per connection %s served", dst)
		assert.NotEmpty(t, srcs, dst)
		seen := map[string]bool{}
		for _, src := range srcs {
			assert.False(t, seen[src], "%s -> %s audited twice", src, dst)
			seen[src] = true
			ap, err := netip.ParseAddrPort(src)
			assert.NoError(t, err)
			assert.True(t, web.Node.Address().Masked().Contains(ap.Addr()), "from the agent's overlay address: %s", src)
		}
	}
	require.NotEmpty(t, denies, "the refused connection is audited")
	for _, ev := range denies {
		if ev.Dst == denied {
			assert.Equal(t, "overlay peer not named", ev.Rule)
			return
		}
	}
	t.Errorf("no deny line for %s: %v", denied, denies)
}
