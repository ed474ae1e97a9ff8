package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/edition"
)

// Version describes the running binary. Its JSON keys are what
// `version --json` prints; scripts may rely on them.
type Version struct {
	Module     string `json:"module"`      // main module path
	Version    string `json:"version"`     // module version, "(devel)" for a build from a checkout
	Commit     string `json:"commit"`      // VCS revision; "" when the build was not stamped
	Modified   bool   `json:"modified"`    // the work tree had uncommitted changes
	CommitTime string `json:"commit_time"` // RFC 3339; "" when not stamped
	Edition    string `json:"edition"`     // "community" or "pro"
	Go         string `json:"go"`          // toolchain that built the binary
	Platform   string `json:"platform"`    // GOOS/GOARCH
}

// ReadVersion describes this binary from the build information the Go
// toolchain embeds (go build stamps vcs.* settings in a git checkout;
// -buildvcs=false or go test leave them out).
func ReadVersion() Version {
	info, _ := debug.ReadBuildInfo()
	return versionFrom(info)
}

func versionFrom(info *debug.BuildInfo) Version {
	v := Version{
		Version:  "(devel)",
		Edition:  edition.Name(),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info == nil {
		return v
	}
	v.Module = info.Main.Path
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		v.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			v.CommitTime = s.Value
		}
	}
	return v
}

// WriteText prints v for people, one field a line, as `tailscale version`
// does.
func (v Version) WriteText(w io.Writer, program string) error {
	commit := v.Commit
	switch {
	case commit == "":
		commit = "unknown (built without VCS information)"
	case v.Modified:
		commit += " (modified)"
	}
	if v.CommitTime != "" {
		commit += ", " + v.CommitTime
	}
	_, err := fmt.Fprintf(w, "%s %s\n  commit:  %s\n  edition: %s\n  go:      %s %s\n",
		program, v.Version, commit, v.Edition, v.Go, v.Platform)
	return err
}

// NewVersionCmd returns the `version` command every Lattice binary has.
func NewVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, edition and Go version",
		Long: `version prints the module version, the commit it was built from (and whether
the work tree had uncommitted changes), the edition (community or pro) and
the Go toolchain. With --json it prints one object with the keys module,
version, commit, modified, commit_time, edition, go and platform.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := ReadVersion()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return v.WriteText(cmd.OutOrStdout(), cmd.Root().Name())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	// The examples name the binary the command is part of (lattice-lab
	// version, not lattice version), known only once it is attached.
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		c.Example = fmt.Sprintf("  %[1]s version\n  %[1]s version --json | jq -r .commit", c.Root().Name())
		c.Parent().HelpFunc()(c, args)
	})
	return cmd
}
