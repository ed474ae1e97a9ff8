//go:build !pro

package sandbox_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/sandbox"
)

// TestProFeaturesInCommunity: the community edition refuses the Pro
// features by name, before doing anything.
func TestProFeaturesInCommunity(t *testing.T) {
	good := sandbox.DriverConfig{Name: "a", ServerURL: "nats://127.0.0.1:4222", Token: "t"}
	for _, tc := range []struct {
		name string
		edit func(*sandbox.DriverConfig)
		want string
	}{
		{"egress policy", func(c *sandbox.DriverConfig) { c.EgressPolicy = "policy.yaml" }, "egress policy (--egress-policy) is a Pro feature"},
		{"forward", func(c *sandbox.DriverConfig) { c.Forwards = []sandbox.Forward{{Port: 80, Target: "127.0.0.1:80"}} }, "inbound forwarding (--forward) is a Pro feature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, err := sandbox.NewPod(cfg)
			require.ErrorIs(t, err, edition.ErrProFeature)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
