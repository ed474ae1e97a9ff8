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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox"
)

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

// gvisorChild is the lab's handle on a running child (gvisorchild.go:
// what the child is and runs).
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
	newProcessGroup(cmd)
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
