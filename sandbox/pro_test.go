//go:build pro

package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/sandbox"
)

const testPolicy = `# the agent may use web's API and nothing else on the overlay
default: allow
rules:
  - allow: peer:web
    ports: [8080]
    proto: tcp
  - deny: 10.0.0.0/8
`

// TestEgressPolicy: allowed destinations work; a peer the policy does not
// name, a denied prefix and the metadata service fail at once; every
// decision is in the audit log, and an edited audit line is detected.
// Editing the policy file takes effect without a restart.
func TestEgressPolicy(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(testPolicy), 0o600))
	cfg := m.config(t, "agent", state)
	cfg.EgressPolicy = pol
	d := startPod(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	eventually(t, 20*time.Second, func() error {
		_, err := get(ctx, d.Dial, "http://web:8080/")
		return err
	})
	for _, tc := range []struct{ addr, rule string }{
		{"vault:8080", "overlay peer not named"},
		{"web:22", "overlay peer not named"},
		{"10.1.2.3:80", "policy.yaml:7 deny 10.0.0.0/8"},
		{"169.254.169.254:80", "metadata"},
	} {
		start := time.Now()
		_, err := d.Dial(ctx, "tcp", tc.addr)
		require.ErrorIs(t, err, sandbox.ErrDenied, tc.addr)
		assert.Contains(t, err.Error(), tc.rule)
		assert.Less(t, time.Since(start), 500*time.Millisecond, "%s fails fast", tc.addr)
	}

	// Allow vault: the running sandbox picks the change up by itself.
	require.NoError(t, os.WriteFile(pol, []byte(testPolicy+"  - allow: peer:vault\n"), 0o600))
	eventually(t, 10*time.Second, func() error {
		_, err := get(ctx, d.Dial, "http://vault:8080/")
		return err
	})
	// A broken edit keeps the policy in force.
	require.NoError(t, os.WriteFile(pol, []byte("rules: [\n"), 0o600))
	require.Error(t, d.ReloadPolicy())
	_, err := get(ctx, d.Dial, "http://vault:8080/")
	require.NoError(t, err, "the previous policy stays in force")
	require.NoError(t, d.Close())

	log := filepath.Join(state, "audit.jsonl")
	rep, err := audit.VerifyFile(log)
	require.NoError(t, err)
	lines := readLines(t, log)
	assert.Len(t, lines, rep.Lines)
	joined := strings.Join(lines, "\n")
	for _, want := range []string{
		`"kind":"egress","decision":"deny","proto":"tcp","dst":"10.1.2.3:80","rule":"policy.yaml:7 deny 10.0.0.0/8"`,
		`"decision":"deny","proto":"tcp","dst":"169.254.169.254:80","rule":"metadata"`,
		`"rule":"overlay peer not named","detail":"peer vault"`,
		`"kind":"policy"`,
	} {
		assert.Contains(t, joined, want)
	}

	// Someone hides the metadata attempt: verify names the line.
	for i, l := range lines {
		if strings.Contains(l, "169.254.169.254") {
			lines[i] = strings.Replace(l, "169.254.169.254", "93.184.216.34", 1)
			tampered := filepath.Join(t.TempDir(), "audit.jsonl")
			require.NoError(t, os.WriteFile(tampered, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
			_, err := audit.VerifyFile(tampered)
			require.ErrorIs(t, err, audit.ErrEdited)
			assert.Contains(t, err.Error(), fmt.Sprintf("line %d", i+1))
			return
		}
	}
	t.Fatal("no metadata line in the audit log")
}

// TestInboundForward: a peer reaches a server on the sandbox's host
// through an overlay port; the forward is audited.
func TestInboundForward(t *testing.T) {
	m := newMesh(t)
	ln := meshtest.Listener(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "agent dev server") }),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	state := t.TempDir()
	cfg := m.config(t, "agent", state)
	cfg.Forwards = []sandbox.Forward{{Port: 3000, Target: ln.Addr().String()}}
	d := startPod(t, cfg)
	assert.Equal(t, []string{"3000=" + ln.Addr().String()}, d.Status().Forwards)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	target := netip.AddrPortFrom(d.Node().Address().Addr(), 3000).String()
	var body string
	eventually(t, 20*time.Second, func() (err error) {
		// Each try gets 5 s: one connection whose SYN went out before
		// the peers' first handshake must not spend the whole budget
		// (the fresh-clone CI saw one try take all 30 s).
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err = get(try, func(ctx context.Context, _, _ string) (net.Conn, error) {
			return m.web.Stack.Dial(ctx, "tcp", target)
		}, "http://"+target+"/")
		return err
	})
	assert.Equal(t, "agent dev server", body)
	require.NoError(t, d.Close())
	assert.Regexp(t, `"kind":"forward","decision":"allow","proto":"tcp","src":"`+m.web.Addr().String()+`:\d+","dst":"`+ln.Addr().String()+`"`,
		strings.Join(readLines(t, filepath.Join(state, "audit.jsonl")), "\n"))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	require.NoError(t, sc.Err())
	return out
}
