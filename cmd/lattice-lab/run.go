package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/pcapng"
)

// runOptions are the run command's flags.
type runOptions struct {
	seed        uint64
	captureDir  string
	timeout     time.Duration
	transferMiB int
	verbose     bool
}

// errTimeout is the cause of a run that outlived --timeout.
var errTimeout = errors.New("timed out")

func newRunCmd() *cobra.Command {
	opts := runOptions{seed: 1, timeout: 2 * time.Minute, transferMiB: 64}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Build the default topology and exercise it end to end",
		Long: `run builds the built-in default topology on the in-process emulation fabric
and drives traffic through it, printing each step as it passes:

  internet  203.0.113.0/24  server 203.0.113.100 (and .101 for NAT discovery)
  home      192.168.1.0/24  laptop,  behind home-nat    (port-restricted-cone)
  office    10.0.0.0/24     desktop, behind office-nat  (symmetric)
  flat      192.168.1.0/24  tablet,  behind flat-nat    (full-cone),
                            itself behind carrier-nat   (cgnat, 100.64.0.0/10)

  1. build the topology
  2. ping the server from every client
  3. discover each site's NAT behaviour (RFC 5780) and compare it with the
     configured profile
  4. send --transfer-mib MiB over TCP from every client to the server
  5. UDP echo round trips from every client
  6. print the routers' counters

Any failing step stops the run. Ctrl-C stops it too, cleanly: the fabric is
torn down and capture files are completed. Exit status: 0 when every step
passed, 1 when one failed or the run timed out, 2 for bad flags or arguments,
130 when interrupted.

Topology files will be accepted as an argument later; today run takes none.`,
		Example: `  # The whole run, with a 64 MiB transfer per client
  lattice-lab run

  # A quick run that also records every network to DIR/NAME.pcapng
  lattice-lab run --transfer-mib 4 --capture /tmp/lab
  tshark -r /tmp/lab/internet.pcapng

  # Debug logs from the fabric on stderr
  lattice-lab run -v`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("run %q: topology files are not supported yet; run without arguments for the built-in default topology", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.transferMiB < 1 {
				return cli.Usagef("--transfer-mib %d: must be at least 1", opts.transferMiB)
			}
			if opts.timeout <= 0 {
				return cli.Usagef("--timeout %v: must be positive", opts.timeout)
			}
			level := slog.LevelWarn
			if opts.verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			return runLab(cmd.Context(), cmd.OutOrStdout(), log, opts)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&opts.seed, "seed", opts.seed, "seed for the fabric's random decisions (NAT port choice, impairments)")
	fl.StringVar(&opts.captureDir, "capture", "", "write one pcapng capture per network to `DIR`/NAME.pcapng")
	fl.DurationVar(&opts.timeout, "timeout", opts.timeout, "give up on the whole run after this long")
	fl.IntVar(&opts.transferMiB, "transfer-mib", opts.transferMiB, "MiB each client sends to the server over TCP")
	fl.BoolVarP(&opts.verbose, "verbose", "v", false, "debug logs on stderr (otherwise warnings only)")
	return cmd
}

// runLab builds the default topology and runs every step on it, writing
// progress to out.
func runLab(ctx context.Context, out io.Writer, log *slog.Logger, opts runOptions) (err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, opts.timeout, fmt.Errorf("%w after %v (raise --timeout)", errTimeout, opts.timeout))
	defer cancel()

	topo, err := defaultTopology()
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	l := &lab{out: out, log: log, opts: opts, topo: topo}
	defer func() { err = errors.Join(err, l.close()) }()

	fmt.Fprintf(out, "lattice-lab run: built-in default topology, seed %d\n", opts.seed)
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"build topology", l.build},
		{"ping server", l.ping},
		{"NAT behaviour discovery (RFC 5780)", l.discover},
		{fmt.Sprintf("TCP transfer, %d MiB per client", opts.transferMiB), l.transfer},
		{"UDP echo", l.echo},
		{"router counters", l.summary},
	}
	for i, s := range steps {
		fmt.Fprintf(out, "\n[%d/%d] %s\n", i+1, len(steps), s.title)
		if err := s.run(ctx); err != nil {
			if ctx.Err() != nil {
				// Whatever broke did so because the run was cancelled or
				// timed out; say that rather than the symptom.
				err = context.Cause(ctx)
			}
			fmt.Fprintf(out, "  ✗ %v\n", err)
			return fmt.Errorf("run: %s: %w", s.title, err)
		}
	}
	// Close now rather than on return: capture files are complete only once
	// the fabric has stopped and their writers are flushed.
	if err := l.close(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if len(l.captures) > 0 {
		fmt.Fprintf(out, "\ncaptures (open with tshark -r FILE, or Wireshark):\n")
		for _, c := range l.captures {
			size := ""
			if fi, err := os.Stat(c.path); err == nil {
				size = fmt.Sprintf("  %.1f MiB", float64(fi.Size())/(1<<20))
			}
			fmt.Fprintf(out, "  %s%s\n", c.path, size)
		}
		fmt.Fprintf(out, "  e.g. tshark -r %s\n", l.captures[0].path)
	}
	fmt.Fprintf(out, "\n✓ all %d steps passed in %s\n", len(steps), fmtDuration(time.Since(start)))
	return nil
}

// lab is one run: the topology, the fabric built from it, the services on
// its server and the captures recording it. Its steps run one at a time.
type lab struct {
	out  io.Writer
	log  *slog.Logger
	opts runOptions
	topo *builtinTopology

	f        *fabric.Fabric
	services []io.Closer // closed in reverse order, before the fabric
	captures []capture
	closed   bool
}

// capture is one network's pcapng file.
type capture struct {
	path string
	w    *pcapng.Writer
}

// startCaptures records every network of the topology to dir/NAME.pcapng.
func (l *lab) startCaptures(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	for _, nc := range l.topo.networks {
		path := filepath.Join(dir, nc.Name+".pcapng")
		w, err := pcapng.Create(path, pcapng.Options{
			Comment: fmt.Sprintf("lattice-lab run, built-in default topology, seed %d: network %s %v", l.opts.seed, nc.Name, nc.Prefix),
		})
		if err != nil {
			return fmt.Errorf("capture %s: %w", nc.Name, err)
		}
		l.captures = append(l.captures, capture{path: path, w: w})
		if err := l.f.Network(nc.Name).Capture(w); err != nil {
			return fmt.Errorf("capture %s: %w", nc.Name, err)
		}
	}
	fmt.Fprintf(l.out, "  ✓ capturing %d networks to %s\n", len(l.captures), dir)
	return nil
}

// close stops the services, the fabric and then the captures, in that order
// so no frame is written to a closed capture. Idempotent: later calls return
// nil.
func (l *lab) close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for i := len(l.services) - 1; i >= 0; i-- {
		errs = append(errs, l.services[i].Close())
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close fabric: %w", err))
		}
	}
	for _, c := range l.captures {
		if err := c.w.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close capture %s: %w", c.path, err))
		}
	}
	return errors.Join(errs...)
}

// build adds the topology to a fresh fabric and, with --capture, starts
// recording.
func (l *lab) build(_ context.Context) error {
	start := time.Now()
	f, err := fabric.New(fabric.Config{Logger: l.log, Seed: l.opts.seed})
	if err != nil {
		return fmt.Errorf("new fabric: %w", err)
	}
	l.f = f
	if err := l.topo.addTo(f); err != nil {
		return err
	}
	t := l.topo
	fmt.Fprintf(l.out, "  ✓ %d networks, %d hosts, %d routers in %s\n",
		len(t.networks), len(t.hosts), len(t.routers), fmtDuration(time.Since(start)))
	for _, line := range t.describe() {
		fmt.Fprintf(l.out, "      %s\n", line)
	}
	if l.opts.captureDir != "" {
		return l.startCaptures(l.opts.captureDir)
	}
	return nil
}

// fmtDuration prints d with the precision a reader wants at its scale:
// "0.42ms", "3.1ms", "120ms", "1.53s".
func fmtDuration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 100*time.Microsecond:
		return fmt.Sprintf("%.2fms", ms)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", ms)
	case d < time.Second:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
