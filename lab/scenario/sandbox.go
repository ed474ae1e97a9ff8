package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/report"
)

// SandboxEnv is what the sandbox steps ask of the lab.
type SandboxEnv interface {
	// SOCKS5Fetch fetches rawURL through a pod sandbox's SOCKS5 proxy,
	// with its credentials if auth, and returns the status and body.
	SOCKS5Fetch(ctx context.Context, name, rawURL string, auth bool) (int, string, error)
	// Egress asks a pod sandbox to connect to addr and returns whether
	// its policy allowed it, and why.
	Egress(ctx context.Context, name, addr string) (allowed bool, detail string, err error)
	// Forward connects from a peer to a sandbox's forwarded overlay port
	// and returns the HTTP answer of what it reaches.
	Forward(ctx context.Context, name string, port uint16, from string) (int, string, error)
	// AgentRun runs argv as the agent of a gvisor sandbox.
	AgentRun(ctx context.Context, name string, argv []string) (AgentResult, error)
}

// AgentResult is what an agent run in a gvisor sandbox did.
type AgentResult struct {
	Code           int
	Stdout, Stderr string
}

// SOCKS5Fetch fetches through a sandbox's SOCKS5 proxy.
type SOCKS5Fetch struct {
	Node     string        `yaml:"node" required:"true" doc:"The pod sandbox."`
	URL      string        `yaml:"url" required:"true" pattern:"^http://[^/]+(/.*)?$" doc:"What to fetch; the proxy resolves node names." example:"http://web/"`
	Status   int           `yaml:"status" min:"100" max:"599" doc:"Expected status. If zero, 200."`
	Contains string        `yaml:"contains" doc:"Text the body must contain."`
	Auth     *bool         `yaml:"auth" doc:"Send the proxy credentials. If false, the proxy must refuse. If omitted, true."`
	Within   time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

func (a *SOCKS5Fetch) check(k *checker, path string) {
	if n := k.sandbox(path+".node", a.Node, "pod"); n != nil && n.Sandbox.SOCKS5 == "off" {
		k.errorf(path+".node", "give the sandbox a socks5 address", "sandbox %s has no SOCKS5 proxy", n.Name)
	}
	k.urlHost(path+".url", a.URL)
}

// Describe implements Action.
func (a *SOCKS5Fetch) Describe() string {
	return fmt.Sprintf("%s fetches %s through its SOCKS5 proxy", a.Node, a.URL)
}

// Run implements Action.
func (a *SOCKS5Fetch) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	auth := a.Auth == nil || *a.Auth
	var body string
	err := retry(ctx, func(ctx context.Context) error {
		status, b, err := env.SOCKS5Fetch(ctx, a.Node, a.URL, auth)
		if !auth {
			if err == nil {
				return fmt.Errorf("the proxy served %s without credentials (status %d)", a.URL, status)
			}
			body = "refused: " + err.Error()
			return nil
		}
		if err != nil {
			return err
		}
		body = b
		return checkBody(status, b, a.Status, a.Contains)
	})
	return fmt.Sprintf("%q", trim(body)), nil, err
}

// Egress checks a sandbox's egress decision.
type Egress struct {
	Node   string `yaml:"node" required:"true" doc:"The pod sandbox."`
	To     string `yaml:"to" required:"true" doc:"HOST:PORT; HOST is a node name or an address." example:"203.0.113.100:80"`
	Expect string `yaml:"expect" required:"true" enum:"allowed|denied" doc:"The expected verdict."`
}

func (a *Egress) check(k *checker, path string) { k.sandbox(path+".node", a.Node, "pod") }

// Describe implements Action.
func (a *Egress) Describe() string {
	return fmt.Sprintf("%s connects to %s (want %s)", a.Node, a.To, a.Expect)
}

// Run implements Action.
func (a *Egress) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, 0, 10*time.Second)
	defer cancel()
	allowed, detail, err := env.Egress(ctx, a.Node, a.To)
	if err != nil {
		return "", nil, err
	}
	if got := map[bool]string{true: "allowed", false: "denied"}[allowed]; got != a.Expect {
		return detail, nil, fmt.Errorf("%s was %s, want %s: %s", a.To, got, a.Expect, detail)
	}
	return detail, nil, nil
}

// Forward checks a sandbox's inbound forward.
type Forward struct {
	Node   string        `yaml:"node" required:"true" doc:"The sandbox with the forward."`
	Port   uint16        `yaml:"port" required:"true" min:"1" doc:"The forwarded overlay port."`
	From   string        `yaml:"from" required:"true" doc:"The peer that connects."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Retry until this long has passed. If zero, 10s."`
}

func (a *Forward) check(k *checker, path string) {
	k.node(path+".from", a.From)
	if n := k.sandbox(path+".node", a.Node, "pod"); n != nil && !slices.ContainsFunc(n.Sandbox.Forwards, func(f string) bool {
		port, _, _ := strings.Cut(f, "=")
		return port == fmt.Sprint(a.Port)
	}) {
		k.errorf(path+".port", "add it to the sandbox's forwards", "sandbox %s forwards no port %d", n.Name, a.Port)
	}
}

// Describe implements Action.
func (a *Forward) Describe() string {
	return fmt.Sprintf("%s reaches %s's forwarded port %d", a.From, a.Node, a.Port)
}

// Run implements Action.
func (a *Forward) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	var body string
	err := retry(ctx, func(ctx context.Context) error {
		status, b, err := env.Forward(ctx, a.Node, a.Port, a.From)
		if err != nil {
			return err
		}
		body = b
		return checkBody(status, b, 200, "hello from "+a.Node+"'s host")
	})
	return fmt.Sprintf("%q", trim(body)), nil, err
}

// AgentRun runs an agent in a gvisor sandbox.
type AgentRun struct {
	Node           string        `yaml:"node" required:"true" doc:"The gvisor sandbox."`
	Argv           []string      `yaml:"argv" required:"true" doc:"The agent's command line: a program of the host (found in its PATH; /bin, /usr, /lib and /etc are mounted read-only) and its arguments. Peer names resolve through the container's /etc/hosts." example:"[curl, -sf, http://web/]"`
	ExitCode       int           `yaml:"exit_code" min:"0" max:"255" doc:"Expected exit status. If omitted, 0."`
	StdoutContains string        `yaml:"stdout_contains" doc:"Text the agent's standard output must contain."`
	Within         time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long the agent may run. If zero, 60s."`
}

func (a *AgentRun) check(k *checker, path string) {
	k.sandbox(path+".node", a.Node, "gvisor")
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		k.errorf(path+".argv", "e.g. argv: [curl, -sf, http://web/]", "no agent command")
	}
}

// Describe implements Action. (An agent run had no label of its own: it
// reads as its key.)
func (a *AgentRun) Describe() string { return "agent run" }

// Run implements Action.
func (a *AgentRun) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := env.AgentRun(ctx, a.Node, a.Argv)
	if err != nil {
		return "", nil, err
	}
	took := time.Since(start)
	detail := fmt.Sprintf("exit %d", res.Code)
	if out := strings.TrimSpace(res.Stdout); out != "" {
		detail += fmt.Sprintf(", printed %q", trim(out))
	}
	m := []report.Metric{{Name: "agent_run", Value: float64(took) / 1e6, Unit: "ms"}}
	switch {
	case res.Code != a.ExitCode:
		return detail, m, fmt.Errorf("%s, want exit %d%s", detail, a.ExitCode, stderrNote(res.Stderr))
	case !strings.Contains(res.Stdout, a.StdoutContains):
		return detail, m, fmt.Errorf("%s: its output lacks %q%s", detail, a.StdoutContains, stderrNote(res.Stderr))
	}
	return detail, m, nil
}

// stderrNote quotes what an agent wrote to stderr, if anything.
func stderrNote(s string) string {
	if s = strings.TrimSpace(s); s != "" {
		return fmt.Sprintf("; it wrote to stderr: %q", trim(s))
	}
	return ""
}
