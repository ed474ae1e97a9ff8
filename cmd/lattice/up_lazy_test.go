package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

func TestLazyFlags(t *testing.T) {
	parse := func(args ...string) (node.Config, error) {
		var l lazyFlags
		cmd := &cobra.Command{Use: "up"}
		l.add(cmd)
		require.NoError(t, cmd.ParseFlags(args))
		var cfg node.Config
		return cfg, l.apply(cmd, &cfg)
	}
	cfg, err := parse()
	require.NoError(t, err)
	assert.False(t, cfg.ICE.Lazy)

	cfg, err = parse("--lazy", "--always-direct", "router, gw-2", "--always-direct", "db,tag:exit-eu", "--idle-timeout", "90s")
	require.NoError(t, err)
	assert.True(t, cfg.ICE.Lazy)
	assert.Equal(t, 90*time.Second, cfg.ICE.IdleTimeout)
	assert.Equal(t, []string{"router", "gw-2", "db", "tag:exit-eu"}, cfg.ICE.AlwaysDirect)

	for args, want := range map[string][]string{
		"need --lazy":        {"--always-direct", "router"},
		"at least 1s":        {"--lazy", "--idle-timeout", "10ms"},
		"not a node name":    {"--lazy", "--always-direct", "Router!"},
		"not a node name ":   {"--lazy", "--always-direct", "a,,b"},
		"not a tag":          {"--lazy", "--always-direct", "tag:Exit"},
		"not a tag ":         {"--lazy", "--always-direct", "tag:"},
		"need --lazy (idle)": {"--idle-timeout", "1m"},
	} {
		_, err := parse(want...)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), strings.TrimSpace(strings.Split(args, " (")[0]))
	}
}
