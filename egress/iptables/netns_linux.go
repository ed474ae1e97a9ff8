package iptables

import "github.com/latticelab/lattice/internal/netns"

// InNetns returns a RunFunc running the real tools in the network
// namespace at path ("" for the process's).
func InNetns(path string) RunFunc {
	if path == "" {
		return runTool
	}
	return func(tool string, args []string, stdin string) error {
		return netns.Do(path, func() error { return runTool(tool, args, stdin) })
	}
}
