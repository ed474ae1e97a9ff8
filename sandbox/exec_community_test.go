//go:build !pro

package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/sandbox"
)

// TestRunIsPro: the community edition's control socket refuses POST /run
// by name and runs nothing.
func TestRunIsPro(t *testing.T) {
	ran := false
	c := serve(t, &fakeAgent{mode: sandbox.ModePod, run: func(ctx context.Context, argv []string, stdio sandbox.Stdio) (int, error) {
		ran = true
		return 0, nil
	}})
	_, err := c.Run(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}})
	assert.ErrorContains(t, err, "sandbox: sandbox exec is a Pro feature (this is the community edition")
	assert.False(t, ran)
}
