package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

// calloutSecrets is what an operator makes for the auth callout
// (docs/OPERATIONS.md): an account nkey, whose seed control signs with
// and whose public key the NATS servers take as the callout's issuer, and
// auth.conf naming control's NATS user with its password.
type calloutSecrets struct {
	seed, issuer, password, authConf string
}

func newCalloutSecrets(t *testing.T, user string) calloutSecrets {
	t.Helper()
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	seed, err := acct.Seed()
	require.NoError(t, err)
	pub, err := acct.PublicKey()
	require.NoError(t, err)
	pass := randomHex(16)
	return calloutSecrets{seed: string(seed), issuer: pub, password: pass,
		authConf: fmt.Sprintf("users: [ { user: %q, password: %q } ]\n", user, pass)}
}

// pinnedTLS is a client TLS configuration accepting only the certificate
// with the SHA-256 fingerprint fp, as lattice pins the NATS servers'.
func pinnedTLS(fp string) *tls.Config {
	return &tls.Config{
		InsecureSkipVerify: true, // #nosec G402 -- the certificate is pinned below
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			if got := relay.CertFingerprint(cs.PeerCertificates[0].Raw); got != fp {
				return fmt.Errorf("certificate %s, want %s", got, fp)
			}
			return nil
		},
	}
}

// assertConfined shows the callout confining nodes on the cluster: a node
// registered through the NATS server at natsAddr, logging in with its own
// credentials, is refused (a permissions violation, by the server) every
// subscription and publication on victim's subjects and receives nothing
// of them; logging in as victim with its own password is refused, and a
// control replica logs the refusal with the user it claimed and the
// server that asked.
func assertConfined(ctx context.Context, t *testing.T, natsAddr, fingerprint, token, victim string, controls []*box) {
	t.Helper()
	url := "tls://" + natsAddr + "?fingerprint=" + fingerprint
	reg, err := controlapi.RegisterNATS(ctx, netx.OS, url, controlapi.Join{Token: token, Name: "intruder", Key: key.NewPrivate()})
	require.NoError(t, err, "a node registers through the callout")
	require.NotEqual(t, victim, reg.NodeID)

	var mu sync.Mutex
	var violations []string
	nc, err := nats.Connect("tls://"+natsAddr, nats.Secure(pinnedTLS(fingerprint)),
		nats.UserInfo(reg.NATS.User, reg.NATS.Password), nats.CustomInboxPrefix(reg.NATS.Inbox), nats.NoReconnect(), nats.IgnoreDiscoveredServers(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			violations = append(violations, err.Error())
		}))
	require.NoError(t, err, "the intruder logs in with its own credentials")
	defer nc.Close()
	server := nc.ConnectedServerName() // the refused login below goes to it too
	got := make(chan *nats.Msg, 16)
	subs := []string{controlapi.NodeSubject(victim, controlapi.LeafPeers), controlapi.NodeSubject(victim, controlapi.LeafSignalIn),
		"lattice.v1.>", controlapi.InboxPrefix + "." + victim + ".>"}
	for _, subj := range subs {
		_, err := nc.ChanSubscribe(subj, got)
		require.NoError(t, err)
	}
	pubs := []string{controlapi.NodeSubject(victim, controlapi.LeafSignalIn), controlapi.NodeSubject(victim, controlapi.LeafSignalOut)}
	for _, subj := range pubs {
		require.NoError(t, nc.Publish(subj, []byte("forged")))
	}
	require.NoError(t, nc.Flush())
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), violations...)
	}
	poll(ctx, t, "the server refuses each of the intruder's attempts", 10*time.Second, func(context.Context) error {
		if v := seen(); len(v) < len(subs)+len(pubs) {
			return fmt.Errorf("%d violations: %v", len(v), v)
		}
		return nil
	})
	for _, subj := range append(subs, pubs...) {
		assert.True(t, containsAll(seen(), "permissions violation", subj), "%s refused: %v", subj, seen())
	}
	select {
	case m := <-got:
		t.Errorf("the intruder read %s", m.Subject)
	case <-time.After(time.Second):
	}
	t.Logf("the intruder (on %s) and its attempts on %s's subjects: %v", server, victim, seen())

	// Logging in as the victim, with the intruder's password.
	_, err = nats.Connect("tls://"+natsAddr, nats.Secure(pinnedTLS(fingerprint)),
		nats.UserInfo(victim, reg.NATS.Password), nats.NoReconnect(), nats.IgnoreDiscoveredServers(), nats.Timeout(10*time.Second))
	require.Error(t, err, "a login as %s with another node's password", victim)
	assert.Contains(t, strings.ToLower(err.Error()), "authorization")
	poll(ctx, t, "a control replica logs the refused login", 10*time.Second, func(context.Context) error {
		for _, c := range controls {
			for _, line := range strings.Split(c.output(), "\n") {
				if strings.Contains(line, "NATS login refused") && strings.Contains(line, "user="+victim) && strings.Contains(line, "server="+server) {
					t.Logf("%s: %s", c.name, line)
					return nil
				}
			}
		}
		return errors.New("not logged yet")
	})
}

// containsAll tells whether one of lines contains every one of words.
func containsAll(lines []string, words ...string) bool {
	for _, l := range lines {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(strings.ToLower(l), strings.ToLower(w))
		}
		if ok {
			return true
		}
	}
	return false
}
