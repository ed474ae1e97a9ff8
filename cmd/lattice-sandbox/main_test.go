package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpeaksAsItWasCalled: exec'd by `lattice sandbox ...` (lattice's own
// argv), usage errors and help name `lattice sandbox`, the command the
// user typed; called directly, lattice-sandbox names itself.
func TestSpeaksAsItWasCalled(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want string // stderr
		code int
	}{
		{"through lattice", []string{"/usr/local/bin/lattice", "sandbox", "start"},
			"lattice: --name and --control are required\nRun 'lattice sandbox start --help' for usage.\n", 2},
		{"through a renamed lattice", []string{"./lattice-v2", "sandbox", "run", "--bogus"},
			"lattice: unknown flag: --bogus\nRun 'lattice sandbox run --help' for usage.\n", 2},
		{"directly", []string{"/usr/local/bin/lattice-sandbox", "start"},
			"lattice-sandbox: --name and --control are required\nRun 'lattice-sandbox start --help' for usage.\n", 2},
		{"directly, naming sandbox", []string{"lattice-sandbox", "sandbox"},
			"lattice-sandbox: unknown command \"sandbox\"\nRun 'lattice-sandbox --help' for usage.\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LATTICE_TOKEN", "")
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.argv, &stdout, &stderr)
			assert.Equal(t, tc.want, stderr.String())
			assert.Equal(t, tc.code, code)
			assert.Empty(t, stdout.String())
		})
	}

	var stdout bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"lattice", "sandbox", "start", "--help"}, &stdout, &bytes.Buffer{}))
	assert.Contains(t, stdout.String(), "lattice sandbox start [flags]")
	assert.False(t, strings.Contains(stdout.String(), "lattice-sandbox"), "help through lattice names lattice-sandbox:\n%s", stdout.String())
}
