package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestUpEgressFlagErrors: egress flags that cannot work are usage errors,
// before the node starts.
func TestUpEgressFlagErrors(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	pol := writeFile(t, "policy.yaml", "default: deny\n", 0o600)
	base := []string{"up", "--control", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"backend alone", []string{"--egress-backend", "iptables"}, "--egress-backend needs --egress-policy"},
		{"fail closed alone", []string{"--egress-fail-closed"}, "--egress-fail-closed needs --egress-policy"},
		{"audit alone", []string{"--audit-log", "a.jsonl"}, "--audit-log needs --egress-policy"},
		{"userspace", []string{"--userspace", "--egress-policy", pol}, "--egress-policy filters the kernel's overlay interface; --userspace has none"},
		{"backend", []string{"--egress-policy", pol, "--egress-backend", "nft"}, `--egress-backend "nft": want auto, ebpf or iptables`},
		{"missing file", []string{"--egress-policy", "/no/such/policy.yaml"}, "--egress-policy: policy: open /no/such/policy.yaml: no such file or directory"},
		{"malformed file", []string{"--egress-policy", writeFile(t, "bad.yaml", "default: maybe\n", 0o600)}, "--egress-policy: policy: invalid policy file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a missed check retries registration
			defer cancel()
			var out, errOut strings.Builder
			code := execute(ctx, append(base, tc.args...), &out, &errOut)
			assert.Equal(t, exitUsage, code, errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

// TestEgressClearNothing: clear on an interface without a filter says so.
func TestEgressClearNothing(t *testing.T) {
	var out, errOut strings.Builder
	code := execute(t.Context(), []string{"egress", "clear", "--interface", "lnone0", "--pin-root", t.TempDir()}, &out, &errOut)
	assert.Equal(t, exitOK, code, errOut.String())
	assert.Contains(t, out.String(), "egress: no filter left on lnone0")
}

// TestInterfaceNameErrors: egress clear and up refuse what cannot be an
// interface name instead of reporting "no filter left on " or failing
// after registration.
func TestInterfaceNameErrors(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"clear empty", []string{"egress", "clear", "--interface", "", "--pin-root", t.TempDir()}, "--interface: name an interface"},
		{"clear path", []string{"egress", "clear", "--interface", "../x", "--pin-root", t.TempDir()}, `--interface "../x": not an interface name`},
		{"clear too long", []string{"egress", "clear", "--interface", "lattice-overlay-0", "--pin-root", t.TempDir()}, `--interface "lattice-overlay-0": 17 bytes`},
		{"up", []string{"up", "--control", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:", "--interface", "wg 0"}, `--interface "wg 0": not an interface name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a missed check retries registration
			defer cancel()
			var out, errOut strings.Builder
			assert.Equal(t, exitUsage, execute(ctx, tc.args, &out, &errOut), out.String()+errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}
