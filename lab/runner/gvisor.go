package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/unixhttp"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox"
)

// A gvisor sandbox runs as it would in a pod: in a process of its own
// inside its network namespace, which is a kernel host of the fabric.
// The lab re-executes its own binary there (nsenter --net=NAMESPACE, with
// childEnv naming a 0600 file of childConfig); that child runs phase 1
// (registration, wg0, iptables) and serves the lab a unix socket: GET
// /status, and POST /run, which runs an agent in runsc (phase 2). The
// child stops when its stdin closes, so it never outlives the lab.
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
	os.Exit(childMain(path))
}

// childConfig is what the child runs; it holds the join token, so it is
// passed in a 0600 file, not on the command line.
type childConfig struct {
	Name           string               `json:"name"`
	ServerURL      string               `json:"server_url"`
	Token          string               `json:"token"`
	StateDir       string               `json:"state_dir"`
	ListenPort     int                  `json:"listen_port"`
	RelayTransport string               `json:"relay_transport"`
	ICE            topology.ICESettings `json:"ice"`
	EgressPolicy   string               `json:"egress_policy,omitempty"`
	Runsc          string               `json:"runsc"`
	Socket         string               `json:"socket"`
	Debug          bool                 `json:"debug,omitempty"`
}

// AgentResult is what an agent run in a gvisor sandbox did.
type AgentResult = scenario.AgentResult

// agentReply is the child's answer to POST /run.
type agentReply struct {
	Code   int    `json:"code"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Error  string `json:"error,omitempty"`
}

// maxAgentOutput bounds what the lab keeps of an agent's output streams.
const maxAgentOutput = 64 << 10

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
	client *http.Client
	done   chan struct{} // closed when the child has exited
	logs   sync.WaitGroup

	mu     sync.Mutex // guards the following fields
	status sandbox.Status
	tail   []string // the last lines the child logged, for errors
}

// startGVisor starts the child for one gvisor sandbox in the namespace at
// netnsPath and waits until it has registered and brought wg0 up.
func startGVisor(ctx context.Context, cfg childConfig, netnsPath string, log *slog.Logger) (*gvisorChild, error) {
	bin, err := gvisorRunsc()
	if err != nil {
		return nil, err
	}
	cfg.Runsc = bin
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	cfg.Socket = filepath.Join(cfg.StateDir, "lab.sock")
	cfg.Debug = log.Enabled(ctx, slog.LevelDebug)
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfg.StateDir, "lab-child.json")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the lab's own binary: %w", err)
	}
	cmd := exec.Command("nsenter", "--net="+netnsPath, "--", exe, childFlag)
	cmd.Env = append(os.Environ(), childEnv+"="+cfgPath)
	// Its own process group: Ctrl-C reaches the lab, which stops the
	// child in order, not the child behind the lab's back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	client := unixhttp.Client(cfg.Socket)
	client.Timeout = 0 // an agent_run lasts as long as its step allows (the request's context)
	c := &gvisorChild{name: cfg.Name, cmd: cmd, client: client, done: make(chan struct{})}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the sandbox process: %w", err)
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
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	_ = os.Remove(cfgPath) // read by now; it holds the join token
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

// refresh asks the child for its status.
func (c *gvisorChild) refresh(ctx context.Context) (sandbox.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var st sandbox.Status
	if err := c.call(ctx, http.MethodGet, "/status", nil, &st); err != nil {
		return st, err
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
	var rep agentReply
	err := c.call(ctx, http.MethodPost, "/run", argv, &rep)
	res := AgentResult{Code: rep.Code, Stdout: rep.Stdout, Stderr: rep.Stderr}
	if err == nil && rep.Error != "" {
		err = errors.New(rep.Error)
	}
	return res, err
}

func (c *gvisorChild) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sandbox"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		select {
		case <-c.done:
			return fmt.Errorf("the sandbox process has exited%s", c.lastWords())
		default:
		}
		return fmt.Errorf("ask the sandbox process: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4*maxAgentOutput))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the sandbox process answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return json.Unmarshal(data, out)
}

// close stops the child: its stdin closes, it tears down (container,
// rules, wg0) and exits; one that does not within 15 s is killed.
func (c *gvisorChild) close() error {
	_ = c.stdin.Close()
	defer c.client.CloseIdleConnections()
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

// childMain is the child: phase 1 in this process's namespace, the
// socket, and phase 2 on each /run. It returns the exit code.
func childMain(cfgPath string) int {
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lattice-lab gvisor sandbox:", err)
		return 2
	}
	var cfg childConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "lattice-lab gvisor sandbox: config:", err)
		return 2
	}
	level := slog.LevelInfo
	if cfg.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := runChild(cfg, log); err != nil {
		log.Error("gvisor sandbox failed", "err", err)
		return 1
	}
	return 0
}

func runChild(cfg childConfig, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lab closing our stdin (or dying) is the signal to stop; so are
	// SIGINT and SIGTERM.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	d, err := sandbox.NewRunsc(sandbox.DriverConfig{
		Name: cfg.Name, ServerURL: cfg.ServerURL, Token: cfg.Token, StateDir: cfg.StateDir, Network: netx.OS,
		ListenPort: cfg.ListenPort, RelayTransport: cfg.RelayTransport, EgressPolicy: cfg.EgressPolicy,
		ICE: node.ICEConfig{AttemptTimeout: cfg.ICE.AttemptTimeout, RetryMin: cfg.ICE.RetryMin, RetryMax: cfg.ICE.RetryMax,
			DeadAfter: cfg.ICE.DeadAfter, RelayOnly: cfg.ICE.RelayOnly},
		Runsc: cfg.Runsc, Logger: log,
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Start(ctx); err != nil {
		return err
	}
	var runMu sync.Mutex // one container per sandbox: one agent at a time
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeChildJSON(w, d.Status()) })
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		var argv []string
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&argv); err != nil || len(argv) == 0 {
			http.Error(w, "want a JSON array: the agent's command line", http.StatusBadRequest)
			return
		}
		runMu.Lock()
		defer runMu.Unlock()
		stdout, stderr := &tailBuffer{max: maxAgentOutput}, &tailBuffer{max: maxAgentOutput}
		code, err := d.Run(r.Context(), argv, sandbox.Stdio{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr})
		res := agentReply{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
		if err != nil {
			res.Error = err.Error()
		}
		writeChildJSON(w, res)
	})
	stop, err := unixhttp.Serve(cfg.Socket, mux)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}

func writeChildJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "[…]" + string(t.buf)
	}
	return string(t.buf)
}
