package main

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/node"
)

// lazyFlags are up's lazy-connection flags (node.ICEConfig.Lazy).
type lazyFlags struct {
	lazy         bool
	idleTimeout  time.Duration
	alwaysDirect []string
}

func (l *lazyFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&l.lazy, "lazy", false, "negotiate a peer's direct path only while traffic flows to or from it (the relay carries the first packets); for large meshes")
	f.DurationVar(&l.idleTimeout, "idle-timeout", 5*time.Minute, "with --lazy: quiet time after which a peer's direct path is closed")
	f.StringSliceVar(&l.alwaysDirect, "always-direct", nil, "with --lazy: peers whose direct path is negotiated at once (routers, servers): node names, or tag:TAG for every peer whose join token carries TAG; comma-separated or repeated")
}

// apply checks the flags and sets them in cfg.
func (l *lazyFlags) apply(cmd *cobra.Command, cfg *node.Config) error {
	f := cmd.Flags()
	if !l.lazy && (f.Changed("idle-timeout") || f.Changed("always-direct")) {
		return usagef("--idle-timeout and --always-direct need --lazy")
	}
	if l.idleTimeout < time.Second {
		return usagef("--idle-timeout %v: want at least 1s", l.idleTimeout)
	}
	var names []string
	for _, n := range l.alwaysDirect {
		n = strings.TrimSpace(n)
		if tag, ok := strings.CutPrefix(n, node.TagPrefix); ok {
			if !controlapi.ValidName(tag) {
				return usagef("--always-direct %q: not a tag (tag: then lowercase letters, digits, hyphens)", n)
			}
		} else if n == "" || cli.SanitizeName(n) != n {
			return usagef("--always-direct %q: not a node name (lowercase letters, digits, hyphens) nor tag:TAG", n)
		}
		names = append(names, n)
	}
	cfg.ICE.Lazy, cfg.ICE.IdleTimeout, cfg.ICE.AlwaysDirect = l.lazy, l.idleTimeout, names
	return nil
}
