package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/wgdev"
)

// TestWireGuardOptions: what --wireguard and --userspace choose, and the
// combinations refused (no root needed: nothing is brought up).
func TestWireGuardOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    wgOptions
		check   func(t *testing.T, cfg node.Config)
		wantErr string
	}{
		{name: "userspace", opts: wgOptions{mode: "userspace", ifname: "lw0"}, check: func(t *testing.T, cfg node.Config) {
			u, ok := cfg.Provisioner.(*wgdev.Userspace)
			require.True(t, ok, "%T", cfg.Provisioner)
			assert.Equal(t, "lw0", u.Name)
			assert.Nil(t, cfg.Device)
		}},
		{name: "kernel", opts: wgOptions{mode: "kernel", ifname: "lw0", noFirewall: true}, check: func(t *testing.T, cfg node.Config) {
			k, ok := cfg.Device.(*wgdev.Kernel)
			require.True(t, ok, "%T", cfg.Device)
			assert.Equal(t, "lw0", k.Name)
			assert.True(t, k.NoFirewall)
			assert.Nil(t, cfg.Provisioner)
		}},
		{name: "netstack", opts: wgOptions{mode: "auto", netstack: true}, check: func(t *testing.T, cfg node.Config) {
			_, ok := cfg.Provisioner.(*netstack.SandboxProvisioner)
			assert.True(t, ok, "%T", cfg.Provisioner)
		}},
		{name: "netstack and kernel", opts: wgOptions{mode: "kernel", netstack: true}, wantErr: "--wireguard kernel makes a kernel interface; --userspace runs without one"},
		{name: "bad mode", opts: wgOptions{mode: "wg-quick"}, wantErr: `--wireguard "wg-quick": want auto, kernel or userspace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg node.Config
			err := tc.opts.apply(context.Background(), &cfg, nil)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			tc.check(t, cfg)
		})
	}
	got, _ := complete(t, "up", "--wireguard", "")
	assert.Equal(t, wireguardModes, got)
	var out, errOut strings.Builder
	assert.Equal(t, exitUsage, execute(t.Context(), []string{"up", "--control", "nats://127.0.0.1:1", "--token", "x", "--state-dir", "mem:", "--wireguard", "nope"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `--wireguard "nope": want auto, kernel or userspace`)
}
