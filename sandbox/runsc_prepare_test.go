package sandbox

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

// sliceWriter is a Writer whose values cannot be compared with ==.
type sliceWriter struct{ _ []byte }

func (w sliceWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestSameStdio: a prepared agent is used only with the streams it was
// made with; streams that cannot be compared are never the same (and do
// not panic).
func TestSameStdio(t *testing.T) {
	var a, b bytes.Buffer
	for _, tc := range []struct {
		name string
		x, y Stdio
		want bool
	}{
		{"none", Stdio{}, Stdio{}, true},
		{"same files", Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, true},
		{"same buffer", Stdio{Stdout: &a}, Stdio{Stdout: &a}, true},
		{"other buffer", Stdio{Stdout: &a}, Stdio{Stdout: &b}, false},
		{"one missing", Stdio{Stdout: &a}, Stdio{}, false},
		{"other type", Stdio{Stdout: &a}, Stdio{Stdout: os.Stdout}, false},
		{"not comparable", Stdio{Stdout: sliceWriter{}}, Stdio{Stdout: sliceWriter{}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, sameStdio(tc.x, tc.y))
		})
	}
}

// failingStore refuses to save.
type failingStore struct{ node.CredentialStore }

func (failingStore) Save(*node.Identity) error { return errors.New("disk full") }

// TestIdentityHook: the store saves as before and the driver hears of
// each identity it saved, not of one it failed to save.
func TestIdentityHook(t *testing.T) {
	var heard []node.Identity
	mem := node.OpenCredentials("mem:")
	h := &identityHook{CredentialStore: mem, saved: func(id node.Identity) { heard = append(heard, id) }}
	id := &node.Identity{Name: "agent", NodeID: "n1", Address: netip.MustParsePrefix("100.64.0.7/10")}
	require.NoError(t, h.Save(id))
	got, err := mem.Load()
	require.NoError(t, err)
	assert.Equal(t, "n1", got.NodeID, "saved in the store")
	assert.Equal(t, []node.Identity{*id}, heard)

	heard = nil
	h = &identityHook{CredentialStore: failingStore{mem}, saved: func(id node.Identity) { heard = append(heard, id) }}
	assert.ErrorContains(t, h.Save(id), "disk full")
	assert.Empty(t, heard)
}
