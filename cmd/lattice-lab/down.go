package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/lab/runner"
)

func newDownCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down [--state DIR]",
		Short: "Stop a live lab, leaving no namespace, process or mount behind",
		Long: `down asks the live lab in the state directory to close (nodes, services, the
fabric, kernel hosts' namespaces) and waits for it to exit. If the lab's
process is gone (killed with SIGKILL, crashed), down removes what it left
instead, from the state directory's record: the lab's namespaces under
/run/netns, the processes of its session and those running in its
namespaces, and their mounts. The nodes' identities stay in the directory.`,
		Example: `  lattice-lab down
  lattice-lab down --state /tmp/lab1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := liveDir(dir, false)
			if err != nil {
				return err
			}
			return down(cmd.Context(), d, cmd.OutOrStdout())
		},
	}
	addStateFlag(cmd, &dir)
	return cmd
}

func down(ctx context.Context, dir string, out io.Writer) error {
	rec, err := runner.ReadLiveRecord(dir)
	if err != nil {
		return err
	}
	if !rec.Alive() {
		lo, err := rec.Clean(dir)
		fmt.Fprintf(out, "lab %s (pid %d) was not running; removed what it left: %s\n", rec.Topology, rec.PID, lo)
		return err
	}
	call, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, c, err := runner.CallLive(call, dir, runner.LiveRequest{Op: "down"})
	cancel()
	if err == nil {
		c.Close()
		if resp.Error != "" {
			err = errors.New(resp.Error)
		}
	}
	if err != nil {
		// It runs but does not answer: ask the way a terminal would.
		fmt.Fprintf(out, "lab pid %d does not answer (%v); sending SIGTERM\n", rec.PID, err)
		_ = terminate(rec.PID)
	}
	if !waitGone(ctx, rec, 60*time.Second) {
		fmt.Fprintf(out, "lab pid %d did not exit; killing it\n", rec.PID)
	}
	lo, err := rec.Clean(dir)
	if err != nil {
		return err
	}
	if lo.Empty() {
		fmt.Fprintf(out, "lab %s (pid %d) is down\n", rec.Topology, rec.PID)
	} else {
		fmt.Fprintf(out, "lab %s (pid %d) is down; removed what it left: %s\n", rec.Topology, rec.PID, lo)
	}
	return nil
}

// waitGone polls until the recorded process has exited.
func waitGone(ctx context.Context, rec *runner.LiveRecord, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for rec.Alive() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
