package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsListenRefusesRemote: every daemon refuses a non-loopback
// --metrics-listen before starting anything, unless --metrics-allow-remote.
func TestMetricsListenRefusesRemote(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, bytes.Repeat([]byte("s"), 32), 0o600))
	for _, args := range [][]string{
		{"relay", "--secret-file", secret},
		{"control", "--embedded-nats", "--token-file", secret, "--state-dir", dir},
		{"up", "--control", "nats://127.0.0.1:1", "--token", "t", "--state-dir", "mem:", "--userspace"},
		{"sandbox", "start", "--control", "nats://127.0.0.1:1", "--token", "t", "--state-dir", "mem:", "--name", "a"},
	} {
		for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9090"} {
			t.Run(args[0]+"/"+addr, func(t *testing.T) {
				var out, errb bytes.Buffer
				code := execute(context.Background(), append(args, "--metrics-listen", addr), &out, &errb)
				assert.Equal(t, exitUsage, code, "%s%s", out.String(), errb.String())
				assert.Contains(t, errb.String(), "refusing to listen beyond loopback")
				assert.Contains(t, errb.String(), "--metrics-allow-remote")
			})
		}
	}
}
