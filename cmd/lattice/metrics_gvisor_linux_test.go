//go:build pro

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
)

// TestSandboxGVisorStartMetrics: `sandbox start --mode gvisor -- AGENT`
// serves /metrics while the agent runs. The agent makes one allowed and
// one refused connection through wg0; the scrape shows them as one allow
// and one deny under their rules (the kernel filter's audited decisions),
// no audit write errors, the sandbox's two peers, and its node's one relay
// connection.
func TestSandboxGVisorStartMetrics(t *testing.T) {
	p := newPod(t, 7)
	w := meshtest.StartOn(t, p.host)
	web := w.Peer(t, "web")
	w.Peer(t, "vault")
	var mu sync.Mutex
	served := 0
	web.ServeHTTP(t, 8080, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		rw.Header().Set("Connection", "close")
		fmt.Fprint(rw, "ok")
	}))
	agent := buildAgent(t)
	pol := writeFile(t, "policy.yaml", "default: deny\nrules:\n  - allow: peer:web\n    ports: [8080]\n    proto: tcp\n", 0o600)
	listen := netip.AddrPortFrom(p.addr, freePort(t)).String()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+p.ns, self, "sandbox", "start", "--mode", "gvisor", "--name", "agent",
		"--server-url", w.NATSURL, "--token", meshtest.Token, "--state-dir", t.TempDir(), "--listen-addr", p.addr.String(),
		"--egress-policy", pol, "--metrics-listen", listen, "--metrics-allow-remote", "--",
		agent, "sleep", "2s", "fetch", fmt.Sprintf("http://%s:8080/", web.Addr()), "refused", netip.AddrPortFrom(web.Addr(), 22).String(), "sleep", "30s")
	cmd.Env = append(os.Environ(), execMainEnv+"=1")
	// The test reads stderr while lattice still writes it.
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}()

	allow := `lattice_sandbox_egress_decisions_total\{decision="allow",rule="[^"]*:3 allow peer:web[^"]* ports 8080[^"]*"\}`
	deny := regexp.QuoteMeta(`lattice_sandbox_egress_decisions_total{decision="deny",rule="overlay peer not named"}`)
	var page string
	var scrapeErr error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if got, err := scrape("http://" + listen + "/metrics"); err != nil {
			scrapeErr = err
		} else {
			page = got
		}
		if sample(page, allow) >= 1 && sample(page, deny) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decisions on /metrics within 60s (%v); last page:\n%s", scrapeErr, page)
		}
	}
	mu.Lock()
	assert.Equal(t, 1, served, "the allowed fetch reached web")
	mu.Unlock()
	assert.Equal(t, 1.0, sample(page, allow), "one allowed connection")
	assert.Equal(t, 1.0, sample(page, deny), "one refused connection")
	assert.Equal(t, 0.0, sample(page, "lattice_sandbox_audit_write_errors_total"))
	assert.Equal(t, 2.0, sample(page, regexp.QuoteMeta(`lattice_node_peers{path="direct"}`))+sample(page, regexp.QuoteMeta(`lattice_node_peers{path="relay"}`)), "web and vault")
	assert.Equal(t, 1.0, sample(page, "lattice_node_relay_connects_total"))
	assert.Contains(t, stderr.String(), "sandbox: metrics on http://"+listen)
	select {
	case err := <-done:
		t.Fatalf("lattice exited while the agent sleeps: %v", err)
	default:
	}
}

func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// freePort is a TCP port free on this host now (and so, almost surely, in
// a fresh network namespace).
func freePort(t *testing.T) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}
