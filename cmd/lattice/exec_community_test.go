//go:build !pro

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSandboxExecInCommunity: the community edition names exec as Pro and
// asks no sandbox anything.
func TestSandboxExecInCommunity(t *testing.T) {
	var out, errOut strings.Builder
	code := execute(t.Context(), []string{"sandbox", "exec", "--state-dir", t.TempDir(), "--", "true"}, &out, &errOut)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut.String(), "sandbox exec is a Pro feature")
	assert.NotContains(t, errOut.String(), "not reachable")
}
