package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/lab/runner"
)

func newInspectCmd() *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [--state DIR] [--json]",
		Short: "Show a live lab: hosts, addresses, NAT mappings, node paths",
		Long: `inspect asks the live lab in the state directory what it runs now: every
host with its addresses (and a kernel host's namespace), every router with
its NAT's live mappings (inside, outside, remote, age, time left), every
node with its overlay address and its path to each peer, and the path
matrix. --json prints the same as one JSON object.`,
		Example: `  lattice-lab inspect
  lattice-lab inspect --json | jq '.routers[] | {name, mappings}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := liveDir(dir, false)
			if err != nil {
				return err
			}
			info, err := liveInfo(cmd.Context(), d)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			printInspect(out, info)
			return nil
		},
	}
	addStateFlag(cmd, &dir)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// liveInfo asks the live lab in dir to describe itself.
func liveInfo(ctx context.Context, dir string) (*runner.LiveInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, c, err := runner.CallLive(ctx, dir, runner.LiveRequest{Op: "info"})
	if err != nil {
		return nil, err
	}
	c.Close()
	if resp.Error != "" {
		return nil, errors.New(resp.Error)
	}
	if resp.Info == nil {
		return nil, errors.New("live: the lab sent no description")
	}
	return resp.Info, nil
}

func printInspect(out io.Writer, info *runner.LiveInfo) {
	fmt.Fprintf(out, "lab %s, pid %d, up %s, state %s\n", info.Topology, info.PID,
		time.Since(info.Up).Round(time.Second), info.StateDir)
	fmt.Fprintln(out, "\nhosts:")
	for _, h := range info.Hosts {
		fmt.Fprintf(out, "  %-12s %-9s %s\n", h.Name, h.Kind, ifaceText(h.Interfaces))
		if h.Netns != "" {
			fmt.Fprintf(out, "  %-12s netns %s (nsenter --net=%s)\n", "", h.Netns, h.NetnsPath)
		}
		if len(h.Nodes)+len(h.Services) > 0 {
			fmt.Fprintf(out, "  %-12s runs %s\n", "", strings.Join(append(append([]string(nil), h.Nodes...), h.Services...), ", "))
		}
	}
	fmt.Fprintln(out, "\nrouters:")
	for _, r := range info.Routers {
		nat := r.NAT
		if nat == "" {
			nat = "no NAT"
		}
		fmt.Fprintf(out, "  %-12s %-22s %s\n", r.Name, nat, ifaceText(r.Interfaces))
		for _, m := range r.Mappings {
			remote := ""
			if m.Remote.IsValid() {
				remote = " to " + m.Remote.String()
			}
			state := ""
			if m.TCPState != "" {
				state = " " + m.TCPState
			}
			fmt.Fprintf(out, "  %-12s %s %v -> %v%s%s, age %s, expires in %s\n", "", m.Proto, m.Inside, m.External, remote, state,
				m.Age.Round(time.Second), m.ExpiresIn.Round(time.Second))
		}
	}
	fmt.Fprintln(out, "\nnodes:")
	for _, n := range info.Nodes {
		if !n.Running {
			fmt.Fprintf(out, "  %-12s on %s, stopped\n", n.Name, n.Host)
			continue
		}
		fmt.Fprintf(out, "  %-12s on %s, overlay %v\n", n.Name, n.Host, n.Overlay)
		for _, p := range n.Paths {
			ep := ""
			if p.Endpoint != "" {
				ep = " via " + p.Endpoint
			}
			fmt.Fprintf(out, "  %-12s   %s: %s%s\n", "", p.Peer, p.Path, ep)
		}
	}
	if info.Mesh != "" {
		fmt.Fprintf(out, "\npaths (D direct, R relay, - no handshake yet):\n%s", indentText(info.Mesh, "  "))
	}
}
