package runsc

import (
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
	"strings"
	"sync"
	"syscall"
	"time"
)

// GVisorVersion is the gVisor module version Lattice pins in go.mod; `make
// runsc` builds runsc from it.
const GVisorVersion = "v0.0.0-20260905035102-160fafc42237"

// InstallHint says how to get a runsc that works here.
const InstallHint = "build it statically with: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@" + GVisorVersion +
	" (or make runsc), then put it in $PATH or pass --runsc"

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
}

// NewManager checks the binary and makes the state directory.
func NewManager(cfg Config) (*Manager, error) {
	bin, err := Find(cfg.Binary)
	if err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/lattice/runsc"
	}
	switch cfg.Platform {
	case "":
		cfg.Platform = "systrap"
	case "systrap", "ptrace":
	default:
		return nil, fmt.Errorf("runsc: platform %q: want systrap or ptrace", cfg.Platform)
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
	if !validID().MatchString(spec.ID) {
		return -1, fmt.Errorf("runsc: container name %q: use letters, digits, '.', '_' and '-'", spec.ID)
	}
	if m.mayExist(spec.ID) && m.exists(spec.ID) {
		return -1, fmt.Errorf("%w: %q (left by a crash?); remove it with: %s --root %s delete --force %s",
			ErrExists, spec.ID, m.bin, m.stateRoot(), spec.ID)
	}
	bundle := filepath.Join(m.root, "bundles", spec.ID)
	if err := m.writeBundle(bundle, spec); err != nil {
		return -1, err
	}
	defer os.RemoveAll(bundle)
	defer m.Delete(spec.ID)

	args := append(m.globalArgs(spec.ID), "run", "--bundle", bundle, spec.ID)
	cmd := exec.Command(m.bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	m.log.Info("starting container", "id", spec.ID, "args", spec.Args, "platform", m.platform)
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("runsc: run %s: %w", spec.ID, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-ctx.Done():
		m.log.Info("stopping container", "id", spec.ID)
		_ = m.kill(spec.ID, "TERM")
		select {
		case err = <-waited:
		case <-time.After(5 * time.Second):
			_ = m.kill(spec.ID, "KILL")
			_ = cmd.Process.Kill()
			err = <-waited
		}
	}
	code, ok := ExitStatus(err)
	switch {
	case !ok:
		return -1, fmt.Errorf("runsc: run %s: %w", spec.ID, err)
	case code == 128 && m.failedToStart(spec.ID):
		return -1, fmt.Errorf("runsc: container %s did not start; see %s", spec.ID, m.logPath(spec.ID))
	}
	return code, nil
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

func (m *Manager) globalArgs(id string) []string {
	return []string{"--root", m.stateRoot(), "--platform", m.platform, "--network", "host",
		"--log", m.logPath(id), "--debug-log", filepath.Join(m.root, "logs", id+".%COMMAND%.log")}
}

func (m *Manager) exists(id string) bool {
	return exec.Command(m.bin, "--root", m.stateRoot(), "state", id).Run() == nil
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

func (m *Manager) kill(id, sig string) error {
	return exec.Command(m.bin, "--root", m.stateRoot(), "kill", "--all", id, sig).Run()
}

// Delete removes container id if it exists.
func (m *Manager) Delete(id string) error {
	if !m.mayExist(id) || !m.exists(id) {
		return nil
	}
	out, err := exec.Command(m.bin, "--root", m.stateRoot(), "delete", "--force", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runsc: delete %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// List returns the containers runsc knows in this state directory.
func (m *Manager) List() ([]string, error) {
	out, err := exec.Command(m.bin, "--root", m.stateRoot(), "list", "--quiet").Output()
	if err != nil {
		return nil, fmt.Errorf("runsc: list: %w", err)
	}
	return strings.Fields(string(out)), nil
}

func (m *Manager) writeBundle(dir string, spec Spec) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("runsc: bundle: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		return fmt.Errorf("runsc: bundle: %w", err)
	}
	oci, err := spec.oci(dir)
	if err != nil {
		return err
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
