package main

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/latticelab/lattice/internal/cli"
)

// stateRootGuard runs the tests and then fails the run if they added
// anything under the default state root (cli.DefaultStateDir(): as root
// /var/lib/lattice), which belongs to the machine's real nodes and
// sandboxes. Tests pass --state-dir under t.TempDir(), or "mem:". It never
// removes what it finds: that is for whoever reads the message.
type stateRootGuard struct{ m *testing.M }

func (g stateRootGuard) Run() int {
	root := cli.DefaultStateDir()
	before, err := stateRootEntries(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "state root guard: %v\n", err)
		return 1
	}
	code := g.m.Run()
	after, err := stateRootEntries(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "state root guard: %v\n", err)
		return 1
	}
	var added []string
	for p := range after {
		if !before[p] {
			added = append(added, p)
		}
	}
	if len(added) > 0 {
		slices.Sort(added)
		fmt.Fprintf(os.Stderr, "FAIL: tests wrote to the default state root %s (give them --state-dir under t.TempDir() or \"mem:\"):\n\t%s\n",
			root, strings.Join(added, "\n\t"))
		return max(code, 1)
	}
	return code
}

// stateRootEntries lists every path under root; none if root is absent.
func stateRootEntries(root string) (map[string]bool, error) {
	entries := make(map[string]bool)
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // root, or an entry removed while walking
		case err != nil:
			return err
		}
		entries[p] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	return entries, nil
}

func TestStateRootEntries(t *testing.T) {
	root := filepath.Join(t.TempDir(), "lattice")
	got, err := stateRootEntries(root)
	if err != nil || len(got) != 0 {
		t.Fatalf("absent root: %v, %v; want none, nil", got, err)
	}
	if err := os.MkdirAll(filepath.Join(root, "sandbox", "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sandbox", "a", "proxy-credentials"), []byte("u:p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = stateRootEntries(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{root: true, filepath.Join(root, "sandbox"): true, filepath.Join(root, "sandbox", "a"): true,
		filepath.Join(root, "sandbox", "a", "proxy-credentials"): true}
	if !maps.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
}
