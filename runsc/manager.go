package runsc

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/latticelab/lattice/runsc/gate"
)

// GVisorVersion is the gVisor module version Lattice pins in go.mod; `make
// runsc` builds runsc from it.
const GVisorVersion = "v0.0.0-20260905035102-160fafc42237"

// InstallHint says how to get a runsc that works here.
const InstallHint = "build it statically with: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@" + GVisorVersion +
	" (or make runsc in lattice's source tree, which also precompiles its seccomp filters: faster starts), then put it in $PATH or pass --runsc"

// Errors.
var (
	ErrNotFound = errors.New("runsc: not found")
	ErrDynamic  = errors.New("runsc: dynamically linked")
	ErrExists   = errors.New("runsc: a container with this name exists")
)

// Find returns the runsc binary to use: path if given, else runsc in
// $PATH, else $GOPATH/bin/runsc. It refuses a dynamically linked one.
func Find(path string) (string, error) {
	if path == "" {
		if p, err := exec.LookPath("runsc"); err == nil {
			path = p
		} else if gp := goBin(); gp != "" {
			if _, err := os.Stat(filepath.Join(gp, "runsc")); err == nil {
				path = filepath.Join(gp, "runsc")
			}
		}
		if path == "" {
			return "", fmt.Errorf("%w in $PATH: %s", ErrNotFound, InstallHint)
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s: %s", ErrNotFound, path, InstallHint)
		}
		return "", fmt.Errorf("runsc: %s is not an executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w: %s needs a dynamic loader, which does not exist inside its own chroot (it would fail with \"fork/exec /proc/self/exe: no such file or directory\"); %s", ErrDynamic, path, InstallHint)
		}
	}
	return path, nil
}

func goBin() string {
	if gb := os.Getenv("GOBIN"); gb != "" {
		return gb
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		return filepath.Join(strings.Split(gp, string(os.PathListSeparator))[0], "bin")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, "go", "bin")
	}
	return ""
}

// Config configures a Manager.
type Config struct {
	// Binary is runsc's path. If empty, Find looks for it.
	Binary string
	// StateDir holds runsc's state (--root), the bundles and the logs.
	// If empty, /run/lattice/runsc.
	StateDir string
	// Platform is systrap or ptrace. If empty, systrap.
	Platform string
	Logger   *slog.Logger
}

// Manager runs containers with one runsc binary and state directory.
type Manager struct {
	bin      string
	root     string
	platform string
	log      *slog.Logger

	// cmdTimeout and runWaitDelay, if not zero, replace the constants of
	// their names (tests shorten them).
	cmdTimeout, runWaitDelay time.Duration
}

// Platforms are the runsc platforms a Manager runs sandboxes on, the
// default first.
var Platforms = []string{"systrap", "ptrace"}

// NewManager checks the binary and makes the state directory.
func NewManager(cfg Config) (*Manager, error) {
	bin, err := Find(cfg.Binary)
	if err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/lattice/runsc"
	}
	if cfg.Platform == "" {
		cfg.Platform = Platforms[0]
	}
	if !slices.Contains(Platforms, cfg.Platform) {
		return nil, fmt.Errorf("runsc: platform %q: want %s", cfg.Platform, strings.Join(Platforms, " or "))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{"state", "bundles", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("runsc: state dir: %w", err)
		}
	}
	return &Manager{bin: bin, root: cfg.StateDir, platform: cfg.Platform, log: cfg.Logger.With("component", "runsc")}, nil
}

// Binary is the runsc in use.
func (m *Manager) Binary() string { return m.bin }

// validID is compiled at first use, not at every start of every binary
// that links runsc.
var validID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`) })

// Stdio is where the agent reads and writes.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Run creates and starts container spec.ID, waits for its PID 1 to exit
// and returns its exit code (128+N if signal N ended it). The container is
// deleted afterwards, whatever happened. When ctx ends, the agent gets
// SIGTERM, then SIGKILL after grace.
func (m *Manager) Run(ctx context.Context, spec Spec, stdio Stdio) (int, error) {
	c, err := m.launch(ctx, spec, stdio, false)
	if err != nil {
		return -1, err
	}
	return c.Wait(ctx)
}

// Prepare creates container spec.ID with its start held: `runsc run`
// boots the sandbox (most of a container's start: the sandbox process,
// the platform, the memory manager) and then waits in a createRuntime
// hook (package gate) until Start or Close. The agent runs nothing
// before Start, so a caller prepares while it sets up what the agent's
// network needs, and starts once that is in place.
//
// A prepared container's /etc/hosts is always the bundle's file
// (localhost and spec.Hosts), rewritten by Start with the entries known
// then: the names an agent sees are taken when it starts.
func (m *Manager) Prepare(spec Spec, stdio Stdio) (*Container, error) {
	return m.launch(context.Background(), spec, stdio, true)
}

// Container is a container being run by `runsc run`: one Run, or one
// Prepare and its Start and Wait. Wait or Close deletes it.
type Container struct {
	m      *Manager
	id     string
	bundle string
	cmd    *exec.Cmd

	waited  chan struct{} // closed when cmd has exited
	waitErr error         // cmd.Wait's, once waited is closed

	mu      sync.Mutex // guards the following fields
	gate    *os.File   // the held start's FIFO (our end), until Close
	started bool       // Start has written to gate

	closeOnce sync.Once
	closeErr  error
}

// ID is the container's ID.
func (c *Container) ID() string { return c.id }

// launch writes the bundle and starts `runsc run`; with held, the start
// waits on the gate. ctx bounds only the check for a stale container.
func (m *Manager) launch(ctx context.Context, spec Spec, stdio Stdio, held bool) (_ *Container, err error) {
	if !validID().MatchString(spec.ID) {
		return nil, fmt.Errorf("runsc: container name %q: use letters, digits, '.', '_' and '-'", spec.ID)
	}
	if m.mayExist(spec.ID) {
		switch exists, err := m.exists(ctx, spec.ID); {
		case err != nil:
			return nil, err
		case exists:
			return nil, fmt.Errorf("%w: %q (left by a crash?); remove it with: %s --root %s delete --force %s",
				ErrExists, spec.ID, m.bin, m.stateRoot(), spec.ID)
		}
	}
	c := &Container{m: m, id: spec.ID, bundle: filepath.Join(m.root, "bundles", spec.ID), waited: make(chan struct{})}
	defer func() {
		if err != nil {
			c.closeGate()
			_ = os.RemoveAll(c.bundle)
		}
	}()
	var hook *ociHook
	if held {
		spec.hostsMount = true
		if hook, err = c.makeGate(); err != nil {
			return nil, err
		}
	}
	if err := m.writeBundle(c.bundle, spec, hook); err != nil {
		return nil, err
	}
	args := append(m.globalArgs(spec.ID), "run", "--bundle", c.bundle, spec.ID)
	c.cmd = exec.Command(m.bin, args...)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	c.cmd.WaitDelay = cmp.Or(m.runWaitDelay, runWaitDelay)
	m.log.Info("starting container", "id", spec.ID, "args", spec.Args, "platform", m.platform, "held", held)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("runsc: run %s: %w", spec.ID, err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.waited)
	}()
	return c, nil
}

// runWaitDelay bounds how long `runsc run`'s output may stay open once it
// has exited: Stdio that is not a file is copied through pipes, and a
// process of a wedged sandbox that outlived runsc and holds them would
// keep Wait, and so Run, Wait and Close, waiting forever.
const runWaitDelay = 5 * time.Second

// heldExit bounds how long Close lets a called-off container's `runsc
// run` destroy it (the gate hook fails at once; runsc may still be
// booting the sandbox) before killing it.
const heldExit = 30 * time.Second

// gateFIFO is the held start's FIFO in the bundle directory.
const gateFIFO = "start.fifo"

// makeGate makes the FIFO the gate hook reads and opens our end of it
// read-write: a writer exists from now on, so the hook's read blocks
// until Start writes (or Close closes: end of file, the hook fails).
func (c *Container) makeGate() (*ociHook, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("runsc: finding this binary for the start hook: %w", err)
	}
	if err := os.RemoveAll(c.bundle); err != nil {
		return nil, fmt.Errorf("runsc: bundle: %w", err)
	}
	if err := os.MkdirAll(c.bundle, 0o700); err != nil {
		return nil, fmt.Errorf("runsc: bundle: %w", err)
	}
	p := filepath.Join(c.bundle, gateFIFO)
	if err := mkfifo(p); err != nil {
		return nil, fmt.Errorf("runsc: start gate: %w", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("runsc: start gate: %w", err)
	}
	c.gate = f
	return &ociHook{Path: exe, Args: []string{gate.Arg0, p}}, nil
}

// Start lets a prepared container's agent start, with hosts as its
// /etc/hosts entries (after localhost). It does not wait for the agent.
func (c *Container) Start(hosts []HostEntry) error {
	b, err := hostsContent(hosts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil || c.started {
		return fmt.Errorf("runsc: start %s: not held, or called off", c.id)
	}
	// In place: the gofer bind-mounted this inode when runsc created the
	// container; the sentry reads it only once the agent opens it.
	if err := os.WriteFile(filepath.Join(c.bundle, hostsFile), b, 0o644); err != nil { //nolint:gosec // the agent's /etc/hosts, read by its unprivileged user
		return fmt.Errorf("runsc: hosts file: %w", err)
	}
	// Our end stays open: the hook may not have opened the FIFO yet (runsc
	// still booting), and a FIFO's data goes when its last end closes.
	if _, err := c.gate.Write([]byte{gate.Open}); err != nil {
		return fmt.Errorf("runsc: start %s: %w", c.id, err)
	}
	c.started = true
	return nil
}

// closeGate calls a held start off: the hook reads end of file and fails,
// and runsc destroys the container. It reports whether the start was
// still held.
func (c *Container) closeGate() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil {
		return false
	}
	c.gate.Close()
	c.gate = nil
	return !c.started
}

// Exited is closed once `runsc run` has exited: a prepared container
// that exits before Start failed to be created.
func (c *Container) Exited() <-chan struct{} { return c.waited }

// Wait waits for the container's PID 1 to exit and returns its exit code
// (128+N if signal N ended it), then deletes the container. When ctx
// ends, the agent gets SIGTERM, then SIGKILL after grace. A held
// container that is never started waits until Close.
func (c *Container) Wait(ctx context.Context) (int, error) {
	defer c.Close()
	m := c.m
	var err error
	select {
	case <-c.waited:
		err = c.waitErr
	case <-ctx.Done():
		if c.closeGate() {
			// Called off before its start: runsc destroys it.
			<-c.waited
			return -1, fmt.Errorf("runsc: run %s: %w", c.id, ctx.Err())
		}
		m.log.Info("stopping container", "id", c.id)
		// ctx is over; the kills still carry its values.
		stop := context.WithoutCancel(ctx)
		_ = m.kill(stop, c.id, "TERM")
		select {
		case <-c.waited:
		case <-time.After(5 * time.Second):
			_ = m.kill(stop, c.id, "KILL")
			_ = c.cmd.Process.Kill()
			<-c.waited
		}
		err = c.waitErr
	}
	code, ok := ExitStatus(err)
	switch {
	case !ok:
		return -1, fmt.Errorf("runsc: run %s: %w", c.id, err)
	case code == 128 && m.failedToStart(c.id):
		return -1, fmt.Errorf("runsc: container %s did not start; see %s", c.id, m.logPath(c.id))
	}
	return code, nil
}

// Close stops the container if it runs (a held one is called off, a
// started one killed), waits for `runsc run` to exit and deletes the
// container and its bundle. It is idempotent.
func (c *Container) Close() error {
	c.closeOnce.Do(func() {
		if c.closeGate() {
			select {
			case <-c.waited:
			case <-time.After(heldExit):
			}
		}
		select {
		case <-c.waited:
		default:
			_ = c.m.kill(context.Background(), c.id, "KILL")
			select {
			case <-c.waited:
			case <-time.After(5 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.waited
			}
		}
		c.closeErr = c.m.Delete(c.id)
		_ = os.RemoveAll(c.bundle)
	})
	return c.closeErr
}

// ExitStatus is a finished command's exit status as a shell reports it
// (128+N for a death by signal N), from exec.Cmd's Run or Wait error; ok
// is false when the command did not run to an exit.
func ExitStatus(err error) (code int, ok bool) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ee):
		if ws, isWS := ee.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ee.ExitCode(), true
	}
	return -1, false
}

// failedToStart reports whether runsc's log shows the container never ran.
func (m *Manager) failedToStart(id string) bool {
	b, err := os.ReadFile(m.logPath(id))
	return err == nil && strings.Contains(string(b), "starting container: ")
}

func (m *Manager) stateRoot() string { return filepath.Join(m.root, "state") }

func (m *Manager) logPath(id string) string { return filepath.Join(m.root, "logs", id+".log") }

// globalArgs are runsc's flags for container id. --ignore-cgroups: the
// sandbox and its gofer stay in the caller's cgroup (in Kubernetes, the
// pod's, whose limits then hold for the agent too) instead of a cgroup of
// their own at the top of the host's tree, which runsc would join and
// leave itself (cgroup v1: no CLONE_INTO_CGROUP), each move waiting for an
// RCU grace period: about 20 ms of a start, two of them between the
// sandbox being ready and the agent starting. The spec sets no resource
// limits that such a cgroup would carry.
func (m *Manager) globalArgs(id string) []string {
	return []string{"--root", m.stateRoot(), "--platform", m.platform, "--network", "host", "--ignore-cgroups",
		"--log", m.logPath(id), "--debug-log", filepath.Join(m.root, "logs", id+".%COMMAND%.log")}
}

// exists asks runsc whether container id exists. Its error says runsc
// did not answer; runsc answering no is false.
func (m *Manager) exists(ctx context.Context, id string) (bool, error) {
	_, err := m.manage(ctx, "state", id)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee):
		return false, nil
	}
	return false, err
}

// mayExist is exists' cheap first test: whether any file in the state
// directory names id (runsc keeps ID_sandbox:ID.state, its lock and the
// control socket there while a container exists). Only then is runsc
// asked, so a fresh container does not pay a runsc process (about 30 ms
// on a quiet machine, 0.3-0.4 s on a loaded one) before it starts, nor
// one after it exits. A false positive costs that process; a false
// negative only leaves runsc's own "already exists" error.
func (m *Manager) mayExist(id string) bool {
	entries, err := os.ReadDir(m.stateRoot())
	if err != nil {
		return true
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), id) {
			return true
		}
	}
	return false
}

func (m *Manager) kill(ctx context.Context, id, sig string) error {
	_, err := m.manage(ctx, "kill", "--all", id, sig)
	return err
}

// Delete removes container id if it exists. Each runsc command it runs
// is killed if it does not answer in 30s.
func (m *Manager) Delete(id string) error {
	if !m.mayExist(id) {
		return nil
	}
	ctx := context.Background()
	exists, err := m.exists(ctx, id)
	if err != nil || !exists {
		return err
	}
	_, err = m.manage(ctx, "delete", "--force", id)
	return err
}

// List returns the containers runsc knows in this state directory. runsc
// is killed if it does not answer in 30s.
func (m *Manager) List() ([]string, error) {
	out, err := m.manage(context.Background(), "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// cmdTimeout bounds each of runsc's management commands (state, kill,
// delete, list). Each answers in well under a second, even on a loaded
// machine (see mayExist); one silent this long waits on a wedged sandbox
// or gofer (their lock, their control socket) and would wait forever.
const cmdTimeout = 30 * time.Second

// cmdWaitDelay bounds how long a killed command's children, holding its
// output pipes, may delay the caller after the kill.
const cmdWaitDelay = time.Second

// manage runs runsc management command args against the state directory
// and returns its standard output. The command is killed, with any
// process it started, when ctx ends or it has not answered in
// cmdTimeout; the error then names it and the bound.
func (m *Manager) manage(ctx context.Context, args ...string) ([]byte, error) {
	timeout := cmp.Or(m.cmdTimeout, cmdTimeout)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, m.bin, append([]string{"--root", m.stateRoot()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = cmdWaitDelay
	killGroupOnCancel(cmd)
	err := cmd.Run()
	name := strings.Join(args, " ")
	switch {
	case err == nil:
		return stdout.Bytes(), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("runsc: %s: %w", name, ctx.Err())
	case tctx.Err() != nil:
		// Logged too: a kill's error is dropped (the next step backs it up).
		m.log.Warn("runsc command did not answer: killed", "cmd", name, "timeout", timeout)
		return nil, &noAnswerError{cmd: name, after: timeout}
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		return nil, fmt.Errorf("runsc: %s: %w: %s", name, err, msg)
	}
	return nil, fmt.Errorf("runsc: %s: %w", name, err)
}

// noAnswerError is a management command killed for not answering in
// time. It is a context.DeadlineExceeded.
type noAnswerError struct {
	cmd   string
	after time.Duration
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("runsc: %s: no answer in %v: killed", e.cmd, e.after)
}

func (e *noAnswerError) Unwrap() error { return context.DeadlineExceeded }

// writeBundle writes the bundle for spec into dir, with hook, if not
// nil, as its createRuntime hook. A bundle without a hook starts empty;
// one with a hook keeps the gate FIFO made in it.
func (m *Manager) writeBundle(dir string, spec Spec, hook *ociHook) error {
	if hook == nil {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("runsc: bundle: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil { //nolint:gosec // the agent's root, walked by its unprivileged user
		return fmt.Errorf("runsc: bundle: %w", err)
	}
	oci, err := spec.oci(dir)
	if err != nil {
		return err
	}
	if hook != nil {
		oci.Hooks = &ociHooks{CreateRuntime: []ociHook{*hook}}
	}
	b, err := json.MarshalIndent(oci, "", "  ")
	if err != nil {
		return fmt.Errorf("runsc: bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("runsc: bundle: %w", err)
	}
	return nil
}
