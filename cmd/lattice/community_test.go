//go:build !pro

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestProCommandsInCommunity: the community edition names each Pro
// feature it lacks and how to get it.
func TestProCommandsInCommunity(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	start := []string{"sandbox", "start", "--name", "agent", "--server-url", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"run", []string{"sandbox", "run", "--name", "a", "--server-url", "nats://127.0.0.1:1", "--token", "t", "--", "true"}, "sandbox run is a Pro feature"},
		{"agent", []string{"sandbox", "agent", "status", "--state-dir", t.TempDir()}, "sandbox agent is a Pro feature"},
		{"forward", append(start, "--forward", "8080=127.0.0.1:3000"), "inbound forwarding (--forward) is a Pro feature"},
		{"policy", append(start, "--egress-policy", "policy.yaml"), "egress policy (--egress-policy) is a Pro feature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := execute(t.Context(), tc.args, &out, &errOut)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, errOut.String(), tc.want)
			assert.Contains(t, errOut.String(), "make EDITION=pro build")
		})
	}
}
