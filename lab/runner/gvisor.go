package runner

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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox"
)

// A gvisor sandbox runs as it would in a pod: in a process of its own
// inside its network namespace, which is a kernel host of the fabric.
// The lab re-executes its own binary there (nsenter --net=NAMESPACE, with
// childEnv naming a 0600 file of the sandbox's DriverConfig); that child
// is the product's sandbox daemon (sandbox.StartDaemon: phase 1, then the
// control socket in the state directory), and the lab asks it for status
// and runs agents in runsc (POST /run) with sandbox.Client. The child
// stops when its stdin closes, so it never outlives the lab.
//
// The child is whatever program runs the lab: its main (or TestMain)
// calls MaybeRunChild first. The child is started with childFlag, which a
// program that does not is bound to refuse as an unknown flag, rather than
// running as itself in the namespace.
const (
	childEnv  = "LATTICE_LAB_GVISOR_CHILD"
	childFlag = "-lattice-lab-gvisor-child"
)

// MaybeRunChild makes this process a gvisor sandbox's child, and exits
// when the child is done, if the lab started it as one; otherwise it
// returns at once. The lab runs a gvisor sandbox by re-executing its own
// binary, so every program that runs scenarios with gvisor sandboxes
// (lattice-lab, test binaries) calls it first in main or TestMain.
func MaybeRunChild() {
	path := os.Getenv(childEnv)
	if path == "" || len(os.Args) < 2 || os.Args[1] != childFlag {
		return
	}
	os.Exit(childMain(path, len(os.Args) > 2 && os.Args[2] == "debug"))
}

// childFile is the DriverConfig as the child's file carries it. The
// fields that are Go values stay behind: Logger and Network are the
// child's own, and ICE, whose Candidates is a func, travels as its data.
type childFile struct {
	sandbox.DriverConfig
	ICE struct {
		STUN                                          []string
		DeadAfter, RetryMin, RetryMax, AttemptTimeout time.Duration
		RelayOnly                                     bool
	}
}

func newChildFile(cfg sandbox.DriverConfig) (childFile, error) {
	if cfg.ICE.Candidates != nil || cfg.ProxyCredentials != nil {
		return childFile{}, errors.New("a gvisor child takes no ICE.Candidates or ProxyCredentials (Go values, not data)")
	}
	f := childFile{DriverConfig: cfg}
	f.Logger, f.Network = nil, nil
	i := cfg.ICE
	f.ICE.STUN, f.ICE.DeadAfter, f.ICE.RetryMin, f.ICE.RetryMax = i.STUN, i.DeadAfter, i.RetryMin, i.RetryMax
	f.ICE.AttemptTimeout, f.ICE.RelayOnly = i.AttemptTimeout, i.RelayOnly
	return f, nil
}

func (f childFile) config(log *slog.Logger) sandbox.DriverConfig {
	cfg := f.DriverConfig
	cfg.Logger = log
	cfg.ICE = node.ICEConfig{STUN: f.ICE.STUN, DeadAfter: f.ICE.DeadAfter, RetryMin: f.ICE.RetryMin,
		RetryMax: f.ICE.RetryMax, AttemptTimeout: f.ICE.AttemptTimeout, RelayOnly: f.ICE.RelayOnly}
	return cfg
}

// AgentResult is what an agent run in a gvisor sandbox did.
type AgentResult = scenario.AgentResult

// GVisorReady reports why gvisor sandboxes cannot run here, or nil when
// they can: the Pro edition, root, nsenter and a static runsc.
func GVisorReady() error {
	_, err := gvisorRunsc()
	return err
}

// gvisorRunsc checks what GVisorReady checks and returns runsc's path.
func gvisorRunsc() (string, error) {
	if !edition.Pro() {
		return "", errors.New("gvisor sandboxes need the Pro edition (go test -tags pro, make EDITION=pro)")
	}
	if os.Geteuid() != 0 {
		return "", errors.New("gvisor sandboxes need root (a network namespace, wg0 and iptables in it)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return "", errors.New("gvisor sandboxes need nsenter (util-linux; make deps installs it)")
	}
	bin, err := runsc.Find("")
	if err != nil {
		return "", fmt.Errorf("gvisor sandboxes need runsc: %w", err)
	}
	return bin, nil
}

// gvisorChild is the lab's handle on a running child.
type gvisorChild struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	client *sandbox.Client
	done   chan struct{} // closed when the child has exited
	logs   sync.WaitGroup

	mu     sync.Mutex // guards the following fields
	status sandbox.Status
	tail   []string // the last lines the child logged, for errors
}

// startGVisor starts the child for the gvisor sandbox cfg in the
// namespace at netnsPath and waits until it has registered, brought wg0
// up and serves its control socket.
func startGVisor(ctx context.Context, cfg sandbox.DriverConfig, netnsPath string, log *slog.Logger) (*gvisorChild, error) {
	bin, err := gvisorRunsc()
	if err != nil {
		return nil, err
	}
	cfg.Runsc = bin
	file, err := newChildFile(cfg)
	if err != nil {
		return nil, fmt.Errorf("gvisor sandbox %s: %w", cfg.Name, err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor sandbox %s: state dir: %w", cfg.Name, err)
	}
	data, err := json.Marshal(file)
	if err != nil {
		return nil, fmt.Errorf("gvisor sandbox %s: encode its config: %w", cfg.Name, err)
	}
	cfgPath := filepath.Join(cfg.StateDir, "lab-child.json")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return nil, fmt.Errorf("gvisor sandbox %s: %w", cfg.Name, err)
	}
	defer os.Remove(cfgPath) // read once the child is ready; it holds the join token
	c, ready, err := spawnChild(cfg.Name, netnsPath, cfgPath, log)
	if err != nil {
		return nil, err
	}
	c.client = sandbox.NewClient(filepath.Join(cfg.StateDir, sandbox.SocketName))
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err != nil {
		_ = c.close()
		return nil, fmt.Errorf("gvisor sandbox %s: %w%s", cfg.Name, err, c.lastWords())
	}
	if _, err := c.refresh(ctx); err != nil {
		_ = c.close()
		return nil, fmt.Errorf("gvisor sandbox %s: %w", cfg.Name, err)
	}
	return c, nil
}

// spawnChild starts the child process; ready reports its first line.
func spawnChild(name, netnsPath, cfgPath string, log *slog.Logger) (*gvisorChild, <-chan error, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find the lab's own binary: %w", err)
	}
	level := "info"
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = "debug"
	}
	cmd := exec.Command("nsenter", "--net="+netnsPath, "--", exe, childFlag, level)
	cmd.Env = append(os.Environ(), childEnv+"="+cfgPath)
	// Its own process group: Ctrl-C reaches the lab, which stops the
	// child in order, not the child behind the lab's back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &gvisorChild{name: name, cmd: cmd, done: make(chan struct{})}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("gvisor sandbox %s: start its process: %w", name, err)
	}
	c.logs.Go(func() { c.forwardLogs(stderr, log) })
	ready := make(chan error, 1)
	c.logs.Go(func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() && sc.Text() == "ready" {
			ready <- nil
		} else {
			ready <- errors.New("it exited before it was ready (does the program call runner.MaybeRunChild first?)")
		}
		_, _ = io.Copy(io.Discard, stdout)
	})
	go func() {
		c.logs.Wait()
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, ready, nil
}

// forwardLogs passes the child's log lines on, keeping the last few.
func (c *gvisorChild) forwardLogs(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "W") && len(line) > 3 && line[1] >= '0' && line[1] <= '9' {
			continue // gVisor's own warnings (W1130 ...), not ours
		}
		log.Debug(line, "process", "gvisor sandbox")
		c.mu.Lock()
		c.tail = append(c.tail, line)
		if len(c.tail) > 8 {
			c.tail = c.tail[1:]
		}
		c.mu.Unlock()
	}
}

// lastWords is what the child last logged, for an error message.
func (c *gvisorChild) lastWords() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) == 0 {
		return ""
	}
	return "; it said:\n  " + strings.Join(c.tail, "\n  ")
}

// asked names a failed request: the child's exit, if that is why.
func (c *gvisorChild) asked(err error) error {
	select {
	case <-c.done:
		return fmt.Errorf("the sandbox process has exited%s", c.lastWords())
	default:
		return err
	}
}

// refresh asks the child for its status.
func (c *gvisorChild) refresh(ctx context.Context) (sandbox.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.client.Status(ctx)
	if err != nil {
		return st, c.asked(err)
	}
	c.mu.Lock()
	c.status = st
	c.mu.Unlock()
	return st, nil
}

// peers is the child's view of its peers: fresh if it answers, else the
// last it gave.
func (c *gvisorChild) peers() []node.PeerStatus {
	select {
	case <-c.done:
	default:
		if st, err := c.refresh(context.Background()); err == nil {
			return st.Peers
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status.Peers
}

// identity is the sandbox's node ID and overlay address.
func (c *gvisorChild) identity() sandbox.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// run runs argv as the agent in runsc and returns what it did.
func (c *gvisorChild) run(ctx context.Context, argv []string) (AgentResult, error) {
	r, err := c.client.Run(ctx, sandbox.ExecRequest{Argv: argv})
	res := AgentResult{Code: r.Code, Stdout: r.Stdout, Stderr: r.Stderr}
	if r.StdoutTruncated {
		res.Stdout = "[…]" + res.Stdout
	}
	if r.StderrTruncated {
		res.Stderr = "[…]" + res.Stderr
	}
	if err != nil && r.Error == "" {
		err = c.asked(err) // the request failed, not the agent
	}
	return res, err
}

// close stops the child: its stdin closes, it tears down (container,
// rules, wg0) and exits; one that does not within 15 s is killed.
func (c *gvisorChild) close() error {
	_ = c.stdin.Close()
	if c.client != nil {
		defer c.client.Close()
	}
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("gvisor sandbox %s did not stop within 15s; killed", c.name)
	}
	if st := c.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("gvisor sandbox %s exited with %v%s", c.name, st, c.lastWords())
	}
	return nil
}

// childMain is the child: the sandbox daemon in this process's namespace
// until its stdin closes. It returns the exit code.
func childMain(cfgPath string, debug bool) int {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		log.Error("gvisor sandbox: read its config", "err", err)
		return 2
	}
	var f childFile
	if err := json.Unmarshal(data, &f); err != nil {
		log.Error("gvisor sandbox: config", "file", cfgPath, "err", err)
		return 2
	}
	if err := runChild(f.config(log)); err != nil {
		log.Error("gvisor sandbox failed", "err", err)
		return 1
	}
	return 0
}

func runChild(cfg sandbox.DriverConfig) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lab closing our stdin (or dying) is the signal to stop; so are
	// SIGINT and SIGTERM.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dm, err := sandbox.StartDaemon(ctx, sandbox.ModeGVisor, cfg)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	return dm.Close()
}
