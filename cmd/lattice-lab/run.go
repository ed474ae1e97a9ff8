package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/owner"
	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
)

// runOptions are the run command's flags.
type runOptions struct {
	scenario   string
	once       bool
	duration   time.Duration
	interval   time.Duration
	watchFlags []string // --once, --duration, --interval as given: for a topology only
	captureDir string
	reportDir  string
	stateDir   string
	clock      string
	verbose    bool
	logFormat  *string // --log-format: text or json
	out        io.Writer
	owner      owner.Owner // of the captures and reports run creates
}

func newRunCmd() *cobra.Command {
	opts := runOptions{interval: 2 * time.Second, clock: runner.ClockAuto}
	cmd := &cobra.Command{
		Use:   "run [FILE] [--scenario SCENARIO]",
		Short: "Bring a topology up and run a scenario on it, or watch its reachability",
		Long: `run brings a topology up on the in-process emulation fabric (networks, NAT
routers, hosts, control with NATS, relays, STUN servers, Lattice nodes and
pod sandboxes; no root, no containers, no traffic leaves this process) and
then does one of three things:

  run                        the built-in quickstart scenario: three nodes behind a
                             home NAT, a symmetric office NAT and a double NAT go
                             direct where they can, relay where they cannot, carry
                             data both ways and fail over when a direct path is cut
  run SCENARIO.yaml          that scenario's timeline, step by step
  run TOPOLOGY.yaml          check every node pair's reachability and print the
                             table every --interval until interrupted (--once:
                             print it once the mesh settles, and exit)
  run TOPOLOGY.yaml --scenario SCENARIO.yaml
                             the scenario's timeline on that topology instead of
                             the one the scenario names

Every step prints as it runs, with a ✓ or a ✗ and why. A scenario fails at
its first failing step or when its timeout passes. Ctrl-C stops the run
cleanly: nodes, services and the fabric are closed, capture files completed.

--report DIR writes result.json, junit.xml (for CI) and report.html (the NAT
pair matrix, the path-switch timeline with reasons, links to captures).

--clock: lattice-lab runs every scenario on the wall clock. Virtual time (a
testing/synctest bubble, where timers cost no wall time and runs repeat)
needs a *testing.T, which Go gives only to tests, so it is go test's:
  go test $(scripts/vtime-flags.sh) ./scenarios/ -run 'TestScenarios/NAME$'
or make scenarios. --clock virtual is therefore an error here; auto (the
default) and real run on the wall clock, and auto says so when the scenario
could have run virtually.

Exit status: 0 when the scenario passed (or the mesh is complete with
--once), 1 when it failed or cannot run here (a Pro scenario in the
community build, gvisor sandboxes), 2 for bad flags, 130 when interrupted.`,
		Example: `  # The quickstart: bring the default topology up and exercise it
  lattice-lab run

  # A scenario, with captures and an HTML report
  lattice-lab run scenarios/blackhole-failover.yaml --capture /tmp/lab --report /tmp/lab
  tshark -r /tmp/lab/internet.pcapng

  # Is everything reachable? Print the path table once and exit
  lattice-lab run topologies/cgnat.yaml --once

  # Watch a topology for a minute
  lattice-lab run topologies/nat-matrix.yaml --duration 1m

  # A scenario on another topology that has nodes of the same names
  lattice-lab run topologies/dual-stack.yaml --scenario scenarios/pair-symmetric+symmetric.yaml`,
		Args: cobra.MatchAll(cobra.MaximumNArgs(1), notEmpty("FILE", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.interval <= 0 {
				return cli.Usagef("--interval %v: must be positive", opts.interval)
			}
			switch opts.clock {
			case runner.ClockAuto, "real", "virtual":
			default:
				return cli.Usagef("--clock %q: want auto, real or virtual", opts.clock)
			}
			if opts.duration < 0 {
				return cli.Usagef("--duration %v: must not be negative", opts.duration)
			}
			for _, n := range []string{"once", "duration", "interval"} {
				if cmd.Flags().Changed(n) {
					opts.watchFlags = append(opts.watchFlags, "--"+n)
				}
			}
			opts.out = cmd.OutOrStdout()
			level := slog.LevelError + 4 // components log their own errors loudly; the steps say what matters
			if opts.verbose {
				level = slog.LevelDebug
			}
			log := cli.NewLogger(cmd.ErrOrStderr(), *opts.logFormat, level)
			// A capture or report left to root is worth a warning even
			// when components' logs are quiet.
			opts.owner = owner.Sudo(cli.NewLogger(cmd.ErrOrStderr(), *opts.logFormat, min(level, slog.LevelWarn)))
			file := "builtin:quickstart"
			switch {
			case len(args) == 1:
				file = args[0]
			case opts.scenario != "":
				// No topology to put it on: the scenario's own, as with
				// `run SCENARIO.yaml`.
				file, opts.scenario = opts.scenario, ""
			}
			return runLab(cmd.Context(), file, log, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.scenario, "scenario", "s", "", "run `SCENARIO` on the given topology instead of the topology it names")
	fl.BoolVar(&opts.once, "once", false, "topology only: print the reachability table once the mesh settles, then exit")
	fl.DurationVar(&opts.duration, "duration", 0, "topology only: stop watching after this long (0: until interrupted)")
	fl.DurationVar(&opts.interval, "interval", opts.interval, "topology only: how often to print the reachability table")
	fl.StringVar(&opts.captureDir, "capture", "", "write one pcapng capture per network that carried traffic to `DIR`/NETWORK.pcapng")
	fl.StringVar(&opts.reportDir, "report", "", "write result.json, junit.xml and report.html to `DIR` (captures outside DIR are copied to DIR/captures, so the report can be moved)")
	fl.StringVar(&opts.stateDir, "state", "", "keep node identities and control's registry in `DIR` (default: a temporary directory)")
	fl.StringVar(&opts.clock, "clock", opts.clock, "the clock to run the scenario on: auto or real (the wall clock); virtual is go test's only, see above")
	fl.BoolVarP(&opts.verbose, "verbose", "v", false, "debug logs of every component on stderr")
	opts.logFormat = cli.LogFormatFlag(cmd)
	return cmd
}

func runLab(ctx context.Context, file string, log *slog.Logger, opts runOptions) error {
	out := opts.out
	say := func(s string) { fmt.Fprint(out, indent(s, "  ")) }
	load := labfile.Options{}
	if opts.scenario != "" {
		file, load.On = opts.scenario, file
	}
	f, err := lab.Load(file, load)
	if err != nil {
		return err
	}
	if f.Scenario == nil {
		if opts.reportDir != "" {
			return cli.Usagef("--report: %s is a topology, watched until interrupted; reports are of a scenario's steps (add --scenario SCENARIO)", file)
		}
		return watch(ctx, f, log, opts)
	}
	if len(opts.watchFlags) > 0 {
		return cli.Usagef("%s: for watching a topology; %s is a scenario, which runs its own timeline", strings.Join(opts.watchFlags, ", "), file)
	}
	if opts.reportDir != "" { // fail now, not after the whole scenario
		if err := opts.owner.MkdirAll(opts.reportDir, 0o755); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	sc := f.Scenario
	fmt.Fprintf(out, "lattice-lab run: scenario %s on topology %s (%s)\n", sc.Name, f.Plan.Name, summary(f.Plan))
	if sc.Description != "" {
		fmt.Fprint(out, indentText(sc.Description, "  "))
	}
	choice, err := runner.ResolveClock(sc, opts.clock, false, noBubble)
	if err != nil {
		return err
	}
	if choice.Note != "" {
		fmt.Fprintf(out, "  clock: real, not virtual: %s\n", choice.Note)
	}
	res := runner.RunScenario(ctx, sc, runner.Options{StateDir: opts.stateDir, CaptureDir: opts.captureDir, Owner: opts.owner,
		Progress: say, Logger: log})
	if err := writeReports(opts.reportDir, []*report.Result{res}, opts.owner, out); err != nil {
		return err
	}
	if len(res.Captures) > 0 {
		fmt.Fprintf(out, "\ncaptures (open with tshark -r FILE, or Wireshark):\n")
		for _, c := range res.Captures {
			fmt.Fprintf(out, "  %s\n", c)
		}
	}
	switch res.Status {
	case report.Passed:
		fmt.Fprintf(out, "\n✓ scenario %s passed: %d steps in %s\n", sc.Name, len(res.Steps), fmtSeconds(res.Duration))
		return nil
	case report.Skipped:
		fmt.Fprintf(out, "\n- scenario %s cannot run here: %s\n", sc.Name, res.SkipReason)
		return fmt.Errorf("scenario %s: %s", sc.Name, res.SkipReason)
	}
	fmt.Fprintf(out, "\n✗ scenario %s failed after %s: %s\n", sc.Name, fmtSeconds(res.Duration), res.Error)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return cli.ExitCode{Code: cli.ExitFailure}
}

// noBubble says why lattice-lab cannot run a scenario in virtual time.
const noBubble = "lattice-lab runs on the wall clock (a testing/synctest bubble needs a *testing.T); " +
	"for virtual time: go test $(scripts/vtime-flags.sh) ./scenarios/ -run 'TestScenarios/NAME$', or make scenarios"

// watch brings a topology up and prints its reachability table.
func watch(ctx context.Context, f *labfile.File, log *slog.Logger, opts runOptions) error {
	out := opts.out
	fmt.Fprintf(out, "lattice-lab run: topology %s (%s)\n", f.Plan.Name, summary(f.Plan))
	start := time.Now()
	l, err := runner.Up(ctx, runner.Config{Plan: f.Plan, StateDir: opts.stateDir, CaptureDir: opts.captureDir, Owner: opts.owner,
		Progress: func(s string) { fmt.Fprint(out, indent(s, "  ")) }, Logger: log})
	if err != nil {
		return err
	}
	defer l.Close()
	if opts.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.duration)
		defer cancel()
	}
	settle, cancel := context.WithTimeout(ctx, 30*time.Second)
	ms, err := l.WaitMesh(settle)
	if err == nil {
		// Then give ICE its chance, so the table shows final paths.
		_ = l.WaitSettled(settle)
		ms = l.Mesh()
	}
	cancel()
	fmt.Fprintf(out, "\nreachability after %s (D direct, R relay, - no path yet):\n%s", fmtSeconds(time.Since(start)), indentText(l.MeshTable(), "  "))
	if opts.once {
		if err := l.Close(); err != nil {
			return err
		}
		if err != nil {
			fmt.Fprintf(out, "\n✗ %d of %d node pairs have a path\n", ms.Connected, ms.Pairs)
			return cli.ExitCode{Code: cli.ExitFailure}
		}
		fmt.Fprintf(out, "\n✓ all %d node pairs have a path (%d direct)\n", ms.Pairs/2, ms.Direct/2)
		return nil
	}
	tick := time.NewTicker(opts.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if opts.duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintf(out, "\nwatched for %v\n", opts.duration)
				return l.Close()
			}
			return context.Cause(ctx)
		case <-tick.C:
			ms := l.Mesh()
			fmt.Fprintf(out, "\n%s  %d/%d pairs connected, %d direct\n%s", time.Now().Format("15:04:05"),
				ms.Connected/2, ms.Pairs/2, ms.Direct/2, indentText(l.MeshTable(), "  "))
		}
	}
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

func indentText(s, prefix string) string { return strings.TrimRight(indent(s, prefix), "\n") + "\n" }

// fmtSeconds prints a run's length.
func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// writeReports writes result.json, junit.xml and report.html to dir; what
// it creates is own's.
func writeReports(dir string, results []*report.Result, own owner.Owner, out io.Writer) error {
	if dir == "" {
		return nil
	}
	paths, err := report.WriteDirWith(dir, results, report.DirOptions{Owner: own})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(out, "\nreports: %s\n", strings.Join(paths, ", "))
	return nil
}
