package main

import (
	"context"
	"errors"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/runner"
)

func newCaptureCmd() *cobra.Command {
	var dir, out string
	cmd := &cobra.Command{
		Use:   "capture NETWORK|HOST -w FILE|- [--state DIR]",
		Short: "Stream a live pcapng capture of a network or a host",
		Long: `capture records a live lab's network segment (every frame crossing it, with
NAT drops and new mappings as packet comments) or a host's interfaces, as
pcapng, to FILE or, with -w -, to stdout for wireshark -k -i - or tshark -i -.
It runs until interrupted or until the reader goes away. One capture per
network or host at a time.`,
		Example: `  lattice-lab capture internet -w - | tshark -i -
  lattice-lab capture box -w - | wireshark -k -i -
  lattice-lab capture home -w home.pcapng`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), notEmpty("NETWORK|HOST", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return cli.Usagef("-w FILE or -w - (stdout) is required")
			}
			d, err := liveDir(dir, false)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "-" {
				f, err := sudoOwner(cmd).Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			return capture(cmd.Context(), d, args[0], w)
		},
	}
	addStateFlag(cmd, &dir)
	cmd.Flags().StringVarP(&out, "write", "w", "", "write the pcapng stream to `FILE` (- for stdout)")
	return cmd
}

func capture(ctx context.Context, dir, target string, w io.Writer) error {
	// A reader that goes away (tshark -c N) ends the capture: the write
	// fails with EPIPE rather than the signal killing the process.
	signal.Ignore(syscall.SIGPIPE)
	resp, c, err := runner.CallLive(ctx, dir, runner.LiveRequest{Op: "capture", Target: target})
	if err != nil {
		return err
	}
	defer c.Close()
	if resp.Error != "" {
		if resp.Invalid {
			return cli.Usagef("%s", resp.Error)
		}
		return errors.New(resp.Error)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_, err = io.Copy(w, c)
	switch {
	case ctx.Err() != nil, errors.Is(err, syscall.EPIPE):
		return nil
	case err != nil:
		return err
	}
	return nil
}
