//go:build !pro

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUpEBPFEgressInCommunity: asking for the eBPF backend names it as a
// Pro feature before anything starts.
func TestUpEBPFEgressInCommunity(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	pol := writeFile(t, "policy.yaml", "default: deny\n", 0o600)
	var out, errOut strings.Builder
	code := execute(t.Context(), []string{"up", "--control", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:",
		"--egress-policy", pol, "--egress-backend", "ebpf"}, &out, &errOut)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut.String(), "the eBPF egress backend (--egress-backend ebpf) is a Pro feature")
	assert.Contains(t, errOut.String(), "make EDITION=pro build")
}
