package control

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/netx"
)

// lockedBuffer is a log sink safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// externalNATS runs a stock nats-server from a configuration file whose
// only users are control's; every other login goes to the auth callout
// whose issuer is issuerPub.
func externalNATS(t *testing.T, controlPass, issuerPub string) *server.Server {
	t.Helper()
	conf := fmt.Sprintf(`
listen: "127.0.0.1:-1"
server_name: external
authorization {
  timeout: 2s
  users: [ { user: %q, password: %q } ]
  auth_callout {
    issuer: %q
    auth_users: [ %q ]
  }
}
`, controlUser, controlPass, issuerPub, controlUser)
	path := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// TestAuthCalloutConfinesNodes: on an external nats-server that knows
// nothing of Lattice but its callout, control signs each login's
// permissions: a node that tries to read or publish on another node's
// subjects is refused by the server, a login as another node is refused
// and logged by control, and what a node may do still works.
func TestAuthCalloutConfinesNodes(t *testing.T) {
	ctx := ctxT(t)
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	seed, err := acct.Seed()
	require.NoError(t, err)
	pub, err := PublicKeyOfSeed(seed)
	require.NoError(t, err)
	const pass = "control-password-0123456789"
	ext := externalNATS(t, pass, pub)
	url := ext.ClientURL()
	var logs lockedBuffer
	srv, err := New(t.Context(), Config{
		Tokens: []JoinToken{{Value: testToken}}, Store: NewMemStore(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		NATSURL: url, NATSUser: controlUser, NATSPassword: pass, AuthCallout: &AuthCallout{IssuerSeed: seed},
	})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })

	a, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: testToken, Name: "alpha", Key: newPriv(t)})
	require.NoError(t, err, "a joining client is let in by the callout")
	b, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: testToken, Name: "beta", Key: newPriv(t)})
	require.NoError(t, err)
	signals := make(chan string, 4)
	sb, err := controlapi.Connect(ctx, netx.OS, b.NodeID, b.NATS, controlapi.Handlers{Signal: func(from string, p []byte) { signals <- from + ":" + string(p) }})
	require.NoError(t, err)
	defer sb.Close()

	nc, errs := permissionErrors(t, url, a.NATS.User, a.NATS.Password, a.NATS.Inbox)
	got := make(chan *nats.Msg, 10)
	for _, subj := range []string{controlapi.NodeSubject(b.NodeID, controlapi.LeafPeers), controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalIn), "lattice.v1.>", "_INBOX." + b.NodeID + ".>"} {
		_, err := nc.ChanSubscribe(subj, got)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Publish(controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalIn), []byte("forged")))
	require.NoError(t, nc.Publish(controlapi.NodeSubject(b.NodeID, controlapi.LeafSignalOut), []byte("as beta")))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return len(errs()) >= 6 }, 5*time.Second, 10*time.Millisecond, "violations: %v", errs())
	for _, e := range errs() {
		assert.Contains(t, strings.ToLower(e), "permissions violation")
	}

	// What alpha may do works: a signal to beta, through control.
	sa, err := controlapi.Connect(ctx, netx.OS, a.NodeID, a.NATS, controlapi.Handlers{})
	require.NoError(t, err)
	defer sa.Close()
	require.NoError(t, sa.Signal(ctx, b.NodeID, []byte("offer")))
	select {
	case s := <-signals:
		assert.Equal(t, a.NodeID+":offer", s, "beta got alpha's signal and not the forged one")
	case <-ctx.Done():
		t.Fatal("no signal")
	}
	select {
	case m := <-got:
		t.Fatalf("alpha read %s", m.Subject)
	default:
	}

	// Alpha logging in as beta, with its own password: refused, logged.
	_, err = nats.Connect(url, nats.UserInfo(b.NATS.User, a.NATS.Password))
	require.Error(t, err)
	assert.Contains(t, logs.String(), "NATS login refused")
	assert.Contains(t, logs.String(), "user="+b.NodeID)
}
