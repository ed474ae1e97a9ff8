package control

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latticelab/lattice/key"
)

// FuzzOpenFileStore opens arbitrary bytes as the registry file. Nothing
// panics; a refusal names the file and leaves it as it was; what opens
// lists every node once, by id, and survives a rewrite: after a change
// the file opens again to the same nodes.
func FuzzOpenFileStore(f *testing.F) {
	pub := key.NewPrivate().Public()
	n := &Node{ID: "n1", Name: "laptop", PublicKey: pub, Address: netip.MustParsePrefix("100.64.0.1/10"),
		SecretHash: bytes.Repeat([]byte{7}, 32), Registered: time.Unix(1_800_000_000, 0).UTC(), ProofNonce: []byte{1, 2}}
	good, _ := json.Marshal(fileState{Version: 1, Nodes: []*Node{n}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"nodes":[]}`))
	f.Add([]byte(`{"version":1,"nodes":[null]}`))
	f.Add([]byte(`{"version":1,"nodes":[{"id":"a"},{"id":"a","name":"b"}]}`))
	f.Add([]byte(`{"version":1,"nodes":[{"id":"a","address":"100.64.0.1/33"}]}`))
	f.Add([]byte(`{"version":1,"nodes":[{"id":"a","registered":"2026-13-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"nodes":[{"id":"a","secret_hash":"!"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "registry.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenFileStore(path)
		if err != nil {
			if s != nil {
				t.Fatalf("store with error %v", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
				t.Fatal("a refused registry was changed")
			}
			return
		}
		defer s.j.close() // not Close: its compaction fsyncs, and fuzzing wants speed
		ctx := context.Background()
		nodes, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(nodes))
		for i, n := range nodes {
			ids[i] = n.ID
			if n.ID == "" {
				t.Fatal("a node without an id")
			}
			if g, err := s.Get(ctx, n.ID); err != nil || g.ID != n.ID {
				t.Fatalf("Get(%q) = %v, %v", n.ID, g, err)
			}
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("ids %q not sorted and unique", ids)
		}

		// A change is journaled: delete the first node, or add one.
		if len(nodes) > 0 {
			err = s.Delete(ctx, nodes[0].ID)
		} else {
			err = s.Create(ctx, &Node{ID: "fresh", Name: "fresh", Address: netip.MustParsePrefix("100.64.9.9/10")})
		}
		if err != nil {
			t.Fatalf("change: %v", err)
		}
		before, _ := s.List(ctx)
		again, err := OpenFileStore(path)
		if err != nil {
			t.Fatalf("the rewritten registry does not open: %v", err)
		}
		defer again.j.close()
		after, _ := again.List(ctx)
		bj, _ := json.Marshal(before)
		aj, _ := json.Marshal(after)
		if !bytes.Equal(bj, aj) {
			t.Fatalf("registry %s\nreopened as %s", bj, aj)
		}
	})
}
