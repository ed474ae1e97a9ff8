package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestNATSConfigCallout: nats-server's own parser reads the shipped
// nats.conf, with auth.conf included inside its authorization block and
// the issuer from the environment as the StatefulSet sets it, as one
// authorization: control's user and password, and the auth callout with
// the seed's public key as issuer and control among auth_users.
func TestNATSConfigCallout(t *testing.T) {
	m, err := Load(Files)
	require.NoError(t, err)
	text := m.Find("ConfigMap", "nats-config").Value.(*corev1.ConfigMap).Data["nats.conf"]
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	pub, err := acct.PublicKey()
	require.NoError(t, err)

	// The pod's layout: /etc/nats/config/nats.conf includes ../auth/auth.conf.
	dir := t.TempDir()
	for _, d := range []string{"config", "auth"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o700))
	}
	const pass = "0123456789abcdef-password"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config", "nats.conf"), []byte(text), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth", "auth.conf"),
		[]byte(fmt.Sprintf("users: [ { user: control, password: %q } ]\n", pass)), 0o600))
	t.Setenv("POD_NAME", "nats-0")
	t.Setenv("AUTH_CALLOUT_ISSUER", pub)

	got, err := conf.ParseFile(filepath.Join(dir, "config", "nats.conf"))
	require.NoError(t, err)
	auth, ok := got["authorization"].(map[string]any)
	require.True(t, ok, "authorization: %#v", got["authorization"])
	assert.Equal(t, []any{map[string]any{"user": "control", "password": pass}}, auth["users"], "auth.conf's users, inside authorization")
	callout, ok := auth["auth_callout"].(map[string]any)
	require.True(t, ok, "auth_callout: %#v", auth)
	assert.Equal(t, pub, callout["issuer"])
	assert.Equal(t, []any{"control"}, callout["auth_users"])
	assert.Equal(t, "nats-0", got["server_name"])
}
