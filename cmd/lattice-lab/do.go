package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/runner"
)

func newDoCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "do 'STEP' [--state DIR]",
		Short: "Run one scenario step on a live lab",
		Long: `do runs one step on the live lab, written as in a scenario's steps list (a
mapping in YAML flow or block style), checked with the same rules and
errors as a scenario file (positions are in the STEP text, named "do") and
against the lab as it is now: which nodes run, which services are stopped,
which routers block UDP. Every step type works except background and join:
faults (link_down, impair, block_udp, nat_reboot, blackhole_direct, move),
lifecycle (start, stop, restart), checks and traffic (wait_path, ping,
fetch, transfer, discover_nat, exec). lattice-lab schema scenario lists them.

Exit status: 0 when the step passed, 1 when it failed, 2 when it does not
parse or names nothing the lab has.`,
		Example: `  lattice-lab do 'link_down: {link: home}'
  lattice-lab do 'impair: {link: internet, latency: 80ms, loss: 2%}'
  lattice-lab do 'wait_path: {from: alice, to: bob, path: relay, within: 20s}'
  lattice-lab do 'nat_reboot: {router: home}'`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), notEmpty("STEP", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := liveDir(dir, false)
			if err != nil {
				return err
			}
			return doStep(cmd.Context(), d, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addStateFlag(cmd, &dir)
	return cmd
}

// doStep sends one step to the live lab and prints how it went.
func doStep(ctx context.Context, dir, step string, out, errOut io.Writer) error {
	resp, c, err := runner.CallLive(ctx, dir, runner.LiveRequest{Op: "do", Step: step})
	if err != nil {
		return err
	}
	c.Close()
	for _, l := range resp.Lines {
		fmt.Fprint(out, indent(l, ""))
	}
	switch {
	case resp.Invalid:
		fmt.Fprintln(errOut, resp.Error)
		return cli.ExitCode{Code: cli.ExitUsage}
	case resp.Error != "":
		if len(resp.Lines) == 0 {
			return errors.New(resp.Error)
		}
		return cli.ExitCode{Code: cli.ExitFailure}
	case len(resp.Lines) == 0:
		fmt.Fprintln(out, strings.TrimSpace(resp.Detail))
	}
	return nil
}
