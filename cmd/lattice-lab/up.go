package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/runner"
)

// upOptions are the up command's flags.
type upOptions struct {
	stateDir  string
	daemon    bool
	verbose   bool
	logFormat *string // --log-format: text or json
}

// upMessage is what the lab's background process tells up on its ready
// pipe: progress lines, then the lab's description or why it failed.
type upMessage struct {
	Line  string           `json:"line,omitempty"`
	Info  *runner.LiveInfo `json:"info,omitempty"`
	Error string           `json:"error,omitempty"`
}

func newUpCmd() *cobra.Command {
	var opts upOptions
	cmd := &cobra.Command{
		Use:   "up FILE [--state DIR]",
		Short: "Bring a topology up in the background, to explore by hand",
		Long: `up builds a topology (or a scenario's topology) on the emulation fabric in a
background process and returns once it is up, printing every host's
addresses and, for kernel hosts (kind: netns), the network namespace with
the exact command to enter it. The lab stays up until lattice-lab down.

While it runs:
  lattice-lab inspect            hosts, addresses, NAT mappings, node paths
  lattice-lab exec HOST -- CMD   a program in a kernel host's namespace; on an
                                 in-process node: ping, fetch, transfer, discover
  lattice-lab do 'STEP'          any scenario step, e.g. 'link_down: {link: home}'
  lattice-lab capture NET -w -   a live pcapng stream of a network or a host
  lattice-lab down               stop it, leaving nothing behind

The state directory (--state, default $XDG_RUNTIME_DIR/lattice-lab or
/tmp/lattice-lab-UID; mode 0700) holds the lab's record (live.json, lab.pid),
its control socket (control.sock, 0600), its log (lab.log) and the nodes'
identities. Give each lab its own. down cleans up from the record even when
the background process was killed.`,
		Example: `  # A lab to walk into, with a kernel host behind a NAT
  lattice-lab up scenarios/netns-host.yaml
  lattice-lab exec box -- ping -c 1 203.0.113.100
  lattice-lab do 'link_down: {link: box}'
  lattice-lab capture internet -w - | tshark -i -
  lattice-lab down`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), notEmpty("FILE", 1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := liveDir(opts.stateDir, true)
			if err != nil {
				return err
			}
			if opts.daemon {
				return upDaemon(cmd.Context(), args[0], dir, opts)
			}
			return upStart(cmd.Context(), args[0], dir, opts, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	addStateFlag(cmd, &opts.stateDir)
	fl.BoolVarP(&opts.verbose, "verbose", "v", false, "debug logs of every component in DIR/lab.log")
	opts.logFormat = cli.LogFormatFlag(cmd)
	fl.BoolVar(&opts.daemon, "daemon", false, "run the lab in this process (what up starts in the background)")
	_ = fl.MarkHidden("daemon")
	return cmd
}

// addStateFlag adds --state to a live-lab command.
func addStateFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "state", "", "the live lab's state `DIR` (default $XDG_RUNTIME_DIR/lattice-lab, else /tmp/lattice-lab-UID)")
}

// liveDir resolves --state and checks (or, with create, makes) it: a
// directory of this user's, closed to others, since it holds the control
// socket and the nodes' keys.
func liveDir(flag string, create bool) (string, error) {
	if runtime.GOOS != "linux" {
		// The lab in the background finds its processes, namespaces and
		// mounts through /proc.
		return "", fmt.Errorf("live labs (up, inspect, exec, do, capture, down) need Linux, this is %s; lattice-lab run works here", runtime.GOOS)
	}
	dir := flag
	if dir == "" {
		if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
			dir = filepath.Join(rt, "lattice-lab")
		} else {
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("lattice-lab-%d", os.Getuid()))
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil { //nolint:gosec // the user's own --state
			return "", fmt.Errorf("state dir: %w", err)
		}
	}
	fi, err := os.Lstat(dir) //nolint:gosec // the user's own --state
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: state dir %s does not exist", runner.ErrNoLiveLab, dir)
	}
	if err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	uid, ok := ownerUID(fi)
	switch {
	case !fi.IsDir():
		return "", cli.Usagef("state dir %s is not a directory", dir)
	case ok && uid != os.Getuid():
		return "", cli.Usagef("state dir %s belongs to uid %d, not to you", dir, uid)
	case fi.Mode().Perm()&0o077 != 0:
		return "", cli.Usagef("state dir %s is open to others (mode %04o); chmod 700 it", dir, fi.Mode().Perm())
	}
	return dir, nil
}

// upStart checks the file, starts the lab's background process and
// relays its progress until the lab is up.
func upStart(ctx context.Context, file, dir string, opts upOptions, out io.Writer) error {
	if rec, err := runner.ReadLiveRecord(dir); err == nil {
		if rec.Alive() {
			return fmt.Errorf("a lab (topology %s, pid %d) is already up in %s: lattice-lab down --state %s first", rec.Topology, rec.PID, dir, dir)
		}
		lo, err := rec.Clean(dir)
		if err != nil {
			return fmt.Errorf("clean up after the killed lab (pid %d) in %s: %w", rec.PID, dir, err)
		}
		fmt.Fprintf(out, "removed what a killed lab (pid %d) left: %s\n", rec.PID, lo)
	}
	f, err := lab.Load(file, labfile.Options{})
	if err != nil {
		return err
	}
	if !strings.HasPrefix(file, "builtin:") {
		if file, err = filepath.Abs(file); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, runner.LiveLogFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	defer pr.Close()
	args := []string{"up", file, "--state", dir, "--daemon"}
	if opts.verbose {
		args = append(args, "-v")
	}
	args = append(args, "--log-format", *opts.logFormat)
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logf, logf, []*os.File{pw}
	if err := newSession(cmd); err != nil {
		pw.Close()
		return fmt.Errorf("up: %w", err)
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("up: start the lab: %w", err)
	}
	pw.Close()
	fmt.Fprintf(out, "lattice-lab up: topology %s (%s), pid %d, state %s\n", f.Plan.Name, summary(f.Plan), cmd.Process.Pid, dir)
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	info, err := readUp(pr, out)
	if err != nil {
		_ = cmd.Wait()
		return fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, runner.LiveLogFile))
	}
	_ = cmd.Process.Release()
	printUp(out, info)
	return nil
}

// readUp relays the background process's progress until its last word.
func readUp(r io.Reader, out io.Writer) (*runner.LiveInfo, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m upMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("up: bad message from the lab: %w", err)
		}
		switch {
		case m.Error != "":
			return nil, errors.New(m.Error)
		case m.Info != nil:
			return m.Info, nil
		default:
			fmt.Fprint(out, indent(m.Line, "  "))
		}
	}
	return nil, errors.New("up: the lab exited while coming up")
}

// printUp lists every host's addresses and how to enter kernel hosts.
func printUp(out io.Writer, info *runner.LiveInfo) {
	fmt.Fprintf(out, "\nlab %s is up (pid %d); hosts:\n", info.Topology, info.PID)
	for _, h := range info.Hosts {
		fmt.Fprintf(out, "  %-12s %-9s %s", h.Name, h.Kind, ifaceText(h.Interfaces))
		if len(h.Nodes) > 0 {
			fmt.Fprintf(out, "  nodes: %s", strings.Join(h.Nodes, ", "))
		}
		fmt.Fprintln(out)
		if h.Netns != "" {
			fmt.Fprintf(out, "               netns %s: nsenter --net=%s -- CMD, or ip netns exec %s CMD\n", h.Netns, h.NetnsPath, h.Netns)
		}
	}
	fmt.Fprintf(out, "\nlattice-lab inspect, exec, do, capture and down --state %s act on it.\n", info.StateDir)
}

func ifaceText(ifcs []runner.LiveInterface) string {
	var parts []string
	for _, ifc := range ifcs {
		addrs := make([]string, 0, len(ifc.Addrs))
		for _, a := range ifc.Addrs {
			addrs = append(addrs, a.String())
		}
		parts = append(parts, fmt.Sprintf("%s %s on %s", ifc.Name, strings.Join(addrs, ","), ifc.Network))
	}
	return strings.Join(parts, "; ")
}

// upDaemon is the lab's background process: it records itself, brings
// the lab up, serves the control socket and goes down when asked (down,
// SIGTERM, SIGINT).
func upDaemon(ctx context.Context, file, dir string, opts upOptions) error {
	signal.Ignore(syscall.SIGHUP)
	ready := os.NewFile(3, "ready")
	enc := json.NewEncoder(ready)
	send := func(m upMessage) { _ = enc.Encode(m) }
	defer ready.Close()
	level := slog.LevelWarn
	if opts.verbose {
		level = slog.LevelDebug
	}
	log := cli.NewLogger(os.Stderr, *opts.logFormat, level)
	fail := func(err error) error {
		send(upMessage{Error: err.Error()})
		return err
	}
	f, err := lab.Load(file, labfile.Options{})
	if err != nil {
		return fail(err)
	}
	pid := os.Getpid()
	start, err := runner.ProcStart(pid)
	if err != nil {
		return fail(fmt.Errorf("up: %w", err))
	}
	rec := &runner.LiveRecord{PID: pid, Start: start, Topology: f.Plan.Name, File: file}
	if err := runner.WriteLiveRecord(dir, rec); err != nil {
		return fail(err)
	}
	l, err := runner.Up(ctx, runner.Config{Plan: f.Plan, StateDir: dir, Logger: log, Progress: func(s string) {
		fmt.Fprintln(os.Stderr, s)
		send(upMessage{Line: s})
	}})
	if err != nil {
		_, cerr := rec.Clean(dir)
		return fail(errors.Join(err, cerr))
	}
	down := func() error {
		cerr := l.Close()
		_, rerr := rec.Clean(dir)
		return errors.Join(cerr, rerr)
	}
	info := l.Info()
	for _, h := range info.Hosts {
		if h.Netns != "" {
			rec.Namespaces = append(rec.Namespaces, h.Netns)
		}
	}
	if err := runner.WriteLiveRecord(dir, rec); err != nil {
		return fail(errors.Join(err, down()))
	}
	srv, err := runner.ServeLive(l, runner.LiveConfig{Socket: filepath.Join(dir, runner.LiveSocketFile),
		Info: runner.LiveInfo{PID: pid, StateDir: dir}, Logger: log})
	if err != nil {
		return fail(errors.Join(err, down()))
	}
	info.PID, info.StateDir, info.Socket = pid, dir, filepath.Join(dir, runner.LiveSocketFile)
	send(upMessage{Info: &info})
	ready.Close()
	select {
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "going down: %v\n", context.Cause(ctx))
	case <-srv.Down():
		fmt.Fprintln(os.Stderr, "going down: asked by lattice-lab down")
	}
	return errors.Join(srv.Close(), down())
}
