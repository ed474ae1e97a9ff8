package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestControlClusterFlagErrors: the replica and external-NATS flags refuse
// what cannot work, naming the flag.
func TestControlClusterFlagErrors(t *testing.T) {
	good := writeFile(t, "tokens", "cli-test-token-0123456789\n", 0o600)
	short := writeFile(t, "secret", "short\n", 0o600)
	seed := writeFile(t, "seed", "SAAJUNUSEDSEED\n", 0o600)
	embedded := []string{"control", "--embedded-nats", "--token-file", good, "--state-dir", t.TempDir(), "--listen-http", "", "--nats-listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"routes without a route listener", append(embedded, "--nats-routes", "nats-route://127.0.0.1:1"), exitUsage, "--nats-routes needs --nats-cluster"},
		{"cluster flags on an external NATS", []string{"control", "--nats-url", "nats://127.0.0.1:1", "--token-file", good, "--state-dir", t.TempDir(), "--nats-cluster", "127.0.0.1:6222"}, exitUsage, "are for --embedded-nats"},
		{"callout on the embedded NATS", append(embedded, "--auth-callout-seed-file", seed), exitUsage, "--auth-callout-seed-file is for --nats-url"},
		{"short route secret", append(embedded, "--nats-cluster", "127.0.0.1:0", "--nats-cluster-secret-file", short), exitFailure, "use at least 16"},
		{"routes off loopback without a secret", append(embedded, "--nats-cluster", "0.0.0.0:0"), exitFailure, "routes need a shared secret"},
		{"bad route", append(embedded, "--nats-cluster", "127.0.0.1:0", "--nats-routes", "http://x"), exitFailure, "want nats-route://HOST:PORT"},
		{"bad callout seed", []string{"control", "--nats-url", "nats://127.0.0.1:1", "--token-file", good, "--state-dir", t.TempDir(), "--auth-callout-seed-file", seed}, exitFailure, "auth callout issuer seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := execute(context.Background(), tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, "stderr: %s", errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}
