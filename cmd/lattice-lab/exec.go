package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/runner"
)

func newExecCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "exec HOST -- CMD [ARG...]",
		Short: "Run a program in a live lab's host",
		Long: `exec runs a command in a host of the live lab.

On a kernel host (kind: netns) CMD is any program of this machine, run in
the host's network namespace with this terminal's stdin, stdout and stderr;
exec exits with its exit status (128+N when killed by signal N). It is what
nsenter --net=/run/netns/NS -- CMD does.

On an in-process host (a gVisor stack) only the lab's built-in commands
run, from the node on the host (HOST may name the node):
  ping PEER [-c COUNT]       UDP echo round trips over the overlay
  fetch URL                  HTTP GET over the overlay (http://PEER/, /bytes/N)
  transfer PEER SIZE         send SIZE bytes (e.g. 4MiB) over TCP, checked by SHA-256
  discover [STUN]            classify the host's NATs (RFC 5780)
Each is the scenario step of the same name, run as lattice-lab do runs it.`,
		Example: `  lattice-lab exec box -- ping -c 1 203.0.113.100
  lattice-lab exec box -- sh -c 'ip addr; ip route'
  lattice-lab exec alice -- ping bob -c 3
  lattice-lab exec alice -- transfer bob 4MiB`,
		Args: cobra.MatchAll(cobra.MinimumNArgs(2), notEmpty("HOST", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := ownFlags(cmd, args[1:])
			if err != nil || argv == nil { // nil: --help was answered
				return err
			}
			d, err := liveDir(dir, false)
			if err != nil {
				return err
			}
			return execIn(cmd.Context(), d, args[0], argv, cmd)
		},
	}
	addStateFlag(cmd, &dir)
	cmd.Flags().SetInterspersed(false) // CMD's own flags are CMD's
	return cmd
}

// ownFlags parses exec's own flags written between HOST and -- (exec box
// --state DIR -- CMD, as the other commands take --state after their
// argument): flag parsing stops at HOST so that CMD keeps its flags, and
// they would otherwise become the command.
func ownFlags(cmd *cobra.Command, argv []string) ([]string, error) {
	i := slices.Index(argv, "--")
	if i <= 0 || !strings.HasPrefix(argv[0], "-") {
		return argv, nil
	}
	if err := cmd.Flags().Parse(argv[:i]); err != nil {
		return nil, cli.UsageError{Err: err}
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return nil, cmd.Help()
	}
	if rest := cmd.Flags().Args(); len(rest) > 0 {
		return nil, cli.Usagef("%q before --: HOST comes first, then exec's flags, then -- CMD", rest[0])
	}
	return argv[i:], nil
}

func execIn(ctx context.Context, dir, target string, argv []string, cmd *cobra.Command) error {
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return cli.Usagef("no command after %s --", target)
	}
	info, err := liveInfo(ctx, dir)
	if err != nil {
		return err
	}
	for _, h := range info.Hosts {
		if h.Name == target && h.NetnsPath != "" {
			return execKernel(ctx, h.NetnsPath, argv)
		}
	}
	node, err := nodeOn(info, target)
	if err != nil {
		return err
	}
	step, err := builtinStep(node, argv)
	if err != nil {
		return err
	}
	return doStep(ctx, dir, step, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// execKernel runs argv in the namespace with this process's stdio.
func execKernel(ctx context.Context, nsPath string, argv []string) error {
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	if err := runner.StartInNetns(nsPath, c); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	err := c.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return cli.ExitCode{Code: 128 + int(ws.Signal())}
		}
		return cli.ExitCode{Code: ee.ExitCode()}
	default:
		return fmt.Errorf("exec: %w", err)
	}
}

// nodeOn is the node a builtin runs from: the named node, or the one node
// on the named host.
func nodeOn(info *runner.LiveInfo, target string) (string, error) {
	for _, n := range info.Nodes {
		if n.Name == target {
			return n.Name, nil
		}
	}
	for _, h := range info.Hosts {
		if h.Name != target {
			continue
		}
		switch len(h.Nodes) {
		case 0:
			return "", cli.Usagef("host %s runs no node, and the built-in commands run from a node", target)
		case 1:
			return h.Nodes[0], nil
		default:
			return "", cli.Usagef("host %s runs nodes %s; name one of them", target, strings.Join(h.Nodes, ", "))
		}
	}
	var names []string
	for _, h := range info.Hosts {
		names = append(names, h.Name)
	}
	return "", cli.Usagef("no host or node %q (hosts: %s)", target, strings.Join(names, ", "))
}

// builtinStep turns a built-in command into its scenario step.
func builtinStep(node string, argv []string) (string, error) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	args := argv[1:]
	switch argv[0] {
	case "ping":
		count := 0
		if i := slices.Index(args, "-c"); i >= 0 {
			if i+1 >= len(args) {
				return "", cli.Usagef("ping: -c needs a count")
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				return "", cli.Usagef("ping: -c %q: not a number", args[i+1])
			}
			count, args = n, slices.Delete(slices.Clone(args), i, i+2)
		}
		if len(args) != 1 {
			return "", cli.Usagef("usage: ping PEER [-c COUNT]")
		}
		if count > 0 {
			return fmt.Sprintf("ping: {from: %s, to: %s, count: %d}", q(node), q(args[0]), count), nil
		}
		return fmt.Sprintf("ping: {from: %s, to: %s}", q(node), q(args[0])), nil
	case "fetch":
		if len(args) != 1 {
			return "", cli.Usagef("usage: fetch URL")
		}
		return fmt.Sprintf("fetch: {from: %s, url: %s}", q(node), q(args[0])), nil
	case "transfer":
		if len(args) != 2 {
			return "", cli.Usagef("usage: transfer PEER SIZE")
		}
		return fmt.Sprintf("transfer: {from: %s, to: %s, bytes: %s}", q(node), q(args[0]), args[1]), nil
	case "discover":
		switch len(args) {
		case 0:
			return fmt.Sprintf("discover_nat: {node: %s}", q(node)), nil
		case 1:
			return fmt.Sprintf("discover_nat: {node: %s, stun: %s}", q(node), q(args[0])), nil
		}
		return "", cli.Usagef("usage: discover [STUN]")
	}
	return "", cli.Usagef("%s is an in-process host: it runs only ping, fetch, transfer and discover, not %q", node, argv[0])
}
