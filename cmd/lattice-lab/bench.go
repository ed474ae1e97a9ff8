package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/owner"
	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/bench"
	"github.com/latticelab/lattice/lab/labfile"
)

func newBenchCmd() *cobra.Command {
	var (
		out, baseline, only, pair, scale string
		cpuProfile, memProfile           string
		tolerance                        float64
		size                             strictyaml.Size = 64 << 20
		runs                             int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the data path, connect time and scale, and compare with a baseline",
		Long: `bench runs three benchmarks on the emulation fabric and writes what it
measured to DIR/bench.json and DIR/bench.svg:

  datapath  TCP over WireGuard through a direct pair and a relayed pair
            (--pair's laptop → tablet and laptop → desktop), then the
            direct pair again with UDP between them cut, so over the relay
            (direct_pair_relayed: the same pair by the other path), in Mbit/s
  connect   a node joins a running one: time to the first answered overlay
            ping (and how much of it the joining node's own start took)
            and to the direct path (median of --runs)
  scale     every node of --scale's topology started (16 at a time from 32
            nodes) until every pair has a WireGuard handshake, then each
            node pings 10 random peers; with the peak memory

The figures measure Lattice running in one process on this machine; compare
them with a baseline from the same machine. Other work on it is measured too:
bench warns when the load average is above the core count, and bench.json
keeps the load at the start and the end. With --baseline FILE (an earlier
bench.json) each figure is set beside its baseline, and a change for the
worse beyond --tolerance is flagged as a regression: bench then exits 1.`,
		Example: `  # Everything, into bench/
  lattice-lab bench --out bench

  # Just the data path, and fail on a regression against the last run
  lattice-lab bench --only datapath --baseline bench/bench.json --out /tmp/now`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			var names []string
			if only != "" {
				for _, n := range strings.Split(only, ",") {
					if n != "datapath" && n != "connect" && n != "scale" {
						return cli.Usagef("--only %q: want datapath, connect or scale", n)
					}
					names = append(names, n)
				}
			}
			switch {
			case runs < 1:
				return cli.Usagef("--runs %d: want at least 1", runs)
			case tolerance < 0:
				return cli.Usagef("--tolerance %v: must not be negative (0.2 flags a change for the worse beyond 20%%)", tolerance)
			case int64(size) <= 0:
				return cli.Usagef("--bytes %s: want more than 0", size.String())
			case out == "":
				return cli.Usagef("--out: name a directory for bench.json and bench.svg")
			}
			var base *bench.Report
			if baseline != "" {
				var err error
				if base, err = bench.LoadJSON(baseline); err != nil {
					return fmt.Errorf("baseline: %w", err)
				}
			}
			pf, err := lab.Load(pair, labfile.Options{Kind: labfile.Topology})
			if err != nil {
				return err
			}
			topos := bench.Topologies{Pair: pf.Plan, Direct: [2]string{"laptop", "tablet"}, Relay: [2]string{"laptop", "desktop"}}
			if only == "" || strings.Contains(only, "scale") {
				sf, err := lab.Load(scale, labfile.Options{Kind: labfile.Topology})
				if err != nil {
					return err
				}
				topos.Scale = sf.Plan
			}
			own := sudoOwner(cmd)
			stopProfile, err := startCPUProfile(cpuProfile, own)
			if err != nil {
				return err
			}
			// The heap profile is taken while the scale bench's lab is at
			// its fullest (after the full mesh, or when waiting for it
			// failed: the run whose memory needs explaining), else at the
			// end.
			var heapErr error
			heapTaken := false
			takeHeap := func() { heapErr, heapTaken = writeHeapProfile(memProfile, own), true }
			rep, err := bench.Run(cmd.Context(), topos, bench.Options{Only: names, Bytes: int64(size), Runs: runs,
				Progress: func(s string) { fmt.Fprintln(w, s) }, AtScale: takeHeap})
			if perr := stopProfile(); err == nil {
				err = perr
			}
			if !heapTaken {
				takeHeap()
			}
			if err == nil {
				err = heapErr
			}
			if err != nil {
				return err
			}
			if err := own.MkdirAll(out, 0o755); err != nil {
				return err
			}
			for name, write := range map[string]func(*os.File) error{
				"bench.json": func(f *os.File) error { return bench.WriteJSON(f, rep) },
				"bench.svg":  func(f *os.File) error { return bench.WriteSVG(f, rep, base) },
			} {
				f, err := own.Create(filepath.Join(out, name))
				if err != nil {
					return err
				}
				err = write(f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
			}
			fmt.Fprintf(w, "wrote %s and %s\n", filepath.Join(out, "bench.json"), filepath.Join(out, "bench.svg"))
			if base == nil {
				return nil
			}
			regressions := 0
			fmt.Fprintf(w, "\nagainst %s (tolerance %.0f%%):\n", baseline, tolerance*100)
			for _, c := range bench.Compare(rep, base, tolerance) {
				flag := "ok"
				if c.Regression {
					flag = "REGRESSION"
					regressions++
				}
				fmt.Fprintf(w, "  %-24s %10.1f %-7s baseline %10.1f  %5.2f×  %s\n", c.Metric.Name, c.Metric.Value, c.Metric.Unit, c.Baseline, c.Ratio, flag)
			}
			if regressions > 0 {
				fmt.Fprintf(w, "\n✗ %d regressions\n", regressions)
				return cli.ExitCode{Code: cli.ExitFailure}
			}
			fmt.Fprintln(w, "\n✓ no regressions")
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "out", "o", "bench", "write bench.json and bench.svg to `DIR`")
	fl.StringVar(&baseline, "baseline", "", "compare with this earlier bench.json `FILE`")
	fl.Float64Var(&tolerance, "tolerance", 0.2, "a change for the worse beyond this fraction is a regression")
	fl.StringVar(&only, "only", "", "run only these benchmarks, comma-separated: datapath,connect,scale")
	fl.StringVar(&pair, "pair", "builtin:quickstart", "topology for datapath and connect (nodes laptop, tablet, desktop)")
	fl.StringVar(&scale, "scale", "builtin:scale", "topology for scale")
	fl.Var(sizeFlag{&size}, "bytes", "data path transfer `SIZE` (e.g. 64MiB)")
	fl.IntVar(&runs, "runs", 5, "connect repetitions")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmarks (go tool pprof) to `FILE`")
	fl.StringVar(&memProfile, "memprofile", "", "write a heap profile (go tool pprof) to `FILE`: with scale, while its lab is up, after the pings or when it failed; else at the end")
	return cmd
}

// startCPUProfile profiles the process into path until stop is called; with
// an empty path it does nothing. A file it creates is own's.
func startCPUProfile(path string, own owner.Owner) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := own.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile %s: %w", path, err)
		}
		return nil
	}, nil
}

// writeHeapProfile writes the heap profile of what is live now to path,
// after a GC so that it is current; nothing if path is empty. A file it
// creates is own's.
func writeHeapProfile(path string, own owner.Owner) error {
	if path == "" {
		return nil
	}
	f, err := own.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	runtime.GC()
	err = pprof.WriteHeapProfile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return nil
}

// sizeFlag parses a size flag the way lab files write sizes.
type sizeFlag struct{ s *strictyaml.Size }

func (f sizeFlag) String() string     { return f.s.String() }
func (f sizeFlag) Set(v string) error { return f.s.UnmarshalText([]byte(v)) }
func (f sizeFlag) Type() string       { return "size" }
