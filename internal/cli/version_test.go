package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/edition"
)

func TestVersionFrom(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name     string
		info     *debug.BuildInfo
		want     Version
		wantText string
	}{
		{
			name: "stamped, modified",
			info: &debug.BuildInfo{
				GoVersion: "go1.26.3",
				Main:      debug.Module{Path: "github.com/latticelab/lattice", Version: "v0.4.0"},
				Settings: []debug.BuildSetting{
					{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: "5d1dd11aabbccdd"},
					{Key: "vcs.time", Value: "2026-12-01T19:00:00Z"},
					{Key: "vcs.modified", Value: "true"},
				},
			},
			want: Version{Module: "github.com/latticelab/lattice", Version: "v0.4.0", Commit: "5d1dd11aabbccdd", Modified: true,
				CommitTime: "2026-12-01T19:00:00Z", Edition: edition.Name(), Go: "go1.26.3", Platform: platform},
			wantText: "lattice v0.4.0\n  commit:  5d1dd11aabbccdd (modified), 2026-12-01T19:00:00Z\n  edition: " + edition.Name() +
				"\n  go:      go1.26.3 " + platform + "\n",
		},
		{
			name: "checkout build without vcs stamping",
			info: &debug.BuildInfo{GoVersion: "go1.26.3", Main: debug.Module{Path: "github.com/latticelab/lattice", Version: "(devel)"}},
			want: Version{Module: "github.com/latticelab/lattice", Version: "(devel)", Edition: edition.Name(), Go: "go1.26.3", Platform: platform},
			wantText: "lattice (devel)\n  commit:  unknown (built without VCS information)\n  edition: " + edition.Name() +
				"\n  go:      go1.26.3 " + platform + "\n",
		},
		{
			name: "no build info",
			want: Version{Version: "(devel)", Edition: edition.Name(), Go: runtime.Version(), Platform: platform},
			wantText: "lattice (devel)\n  commit:  unknown (built without VCS information)\n  edition: " + edition.Name() +
				"\n  go:      " + runtime.Version() + " " + platform + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := versionFrom(tc.info)
			assert.Equal(t, tc.want, v)
			var b bytes.Buffer
			require.NoError(t, v.WriteText(&b, "lattice"))
			assert.Equal(t, tc.wantText, b.String())
		})
	}
}

func TestVersionCommand(t *testing.T) {
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "prog"}
		Configure(root)
		root.AddCommand(NewVersionCmd())
		return root
	}
	var out, errOut bytes.Buffer
	require.Equal(t, ExitOK, Execute(context.Background(), newRoot(), []string{"version", "--json"}, &out, &errOut), errOut.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"module", "version", "commit", "modified", "commit_time", "edition", "go", "platform"}, keys)
	assert.Equal(t, edition.Name(), got["edition"])
	assert.Equal(t, runtime.Version(), got["go"])

	out.Reset()
	require.Equal(t, ExitOK, Execute(context.Background(), newRoot(), []string{"version"}, &out, &errOut), errOut.String())
	assert.Regexp(t, `^prog \S+\n  commit:  .+\n  edition: `+edition.Name()+`\n  go:      go\S+ \S+/\S+\n$`, out.String())

	assert.Equal(t, ExitUsage, Execute(context.Background(), newRoot(), []string{"version", "extra"}, &out, &errOut))
}

// TestVersionHelpNamesBinary: the examples in version --help run the
// binary the help came from, not always lattice.
func TestVersionHelpNamesBinary(t *testing.T) {
	root := &cobra.Command{Use: "lattice-lab"}
	Configure(root)
	root.AddCommand(NewVersionCmd())
	var out, errOut bytes.Buffer
	require.Equal(t, ExitOK, Execute(context.Background(), root, []string{"version", "--help"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "  lattice-lab version --json | jq -r .commit\n")
	assert.NotContains(t, out.String(), "  lattice version")
}
