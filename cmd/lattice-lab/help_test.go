package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpPath matches a relative repository path with an extension in help
// text: lower-case directories (DIR/NETWORK.pcapng is a placeholder), not
// inside an absolute path or a URL.
var helpPath = regexp.MustCompile(`(^|[^/\w.:-])([a-z][a-z0-9_.-]*(?:/[A-Za-z0-9_.*+-]+)+\.[a-z]{2,7})\b`)

// helpOutput matches what a help example writes: a redirection's target
// or an output flag's value, and files an earlier example wrote under it
// may be read by a later one.
var helpOutput = regexp.MustCompile(`(?:>|-o|--output|--out|--report|--capture)\s+([^\s|;]+)`)

// TestHelpPathsExist: every file any lattice-lab --help names as an
// example input exists in the repository, so copying an example works.
func TestHelpPathsExist(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(newRootCmd(), nil)
	require.Greater(t, len(paths), 5, "the walk found the subcommands")
	checked := 0
	for _, path := range paths {
		code, out, stderr := run(t, append(path, "--help")...)
		require.Equal(t, 0, code, "%v --help: %s", path, stderr)
		var written []string
		for _, m := range helpOutput.FindAllStringSubmatch(out, -1) {
			written = append(written, strings.TrimSuffix(m[1], "/"))
		}
	paths:
		for _, m := range helpPath.FindAllStringSubmatch(out, -1) {
			for _, w := range written {
				if m[2] == w || strings.HasPrefix(m[2], w+"/") {
					continue paths
				}
			}
			checked++
			matches, err := filepath.Glob(filepath.Join("..", "..", filepath.FromSlash(m[2])))
			require.NoError(t, err, m[2])
			assert.NotEmpty(t, matches, "lattice-lab %s --help names %s, which is not in the repository", strings.Join(path, " "), m[2])
		}
	}
	assert.Greater(t, checked, 10, "the pattern found the paths in the help texts")
}

// TestHelpFlagPlaceholders: a flag's value placeholder in --help is its
// type or an upper-case name (FILE, DIR), never a word from its
// description that reads like a default (--kind topology, --format dot).
func TestHelpFlagPlaceholders(t *testing.T) {
	upper := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if name == "" || name == f.Value.Type() || upper.MatchString(name) {
				return
			}
			switch name { // pflag's names for its own types
			case "string", "strings", "stringArray", "int", "float", "duration":
				return
			}
			t.Errorf("%s --%s: placeholder %q", c.CommandPath(), f.Name, name)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
