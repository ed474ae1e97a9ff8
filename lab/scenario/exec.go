package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/report"
)

// ExecEnv is what the exec step asks of the lab.
type ExecEnv interface {
	// Exec runs argv in a kernel host's network namespace with an empty
	// stdin until it exits or ctx ends (then it is killed), and returns
	// its exit status and its output, each cut at MaxExecOutput bytes. An
	// error means it could not run, not that it failed.
	Exec(ctx context.Context, host string, argv []string) (ExecResult, error)
}

// MaxExecOutput bounds what an exec step keeps of a program's stdout and
// of its stderr.
const MaxExecOutput = 1 << 20

// ExecResult is how a program run by Exec ended.
type ExecResult struct {
	ExitCode       int // -1 when killed by a signal
	Stdout, Stderr string
}

// Exec runs a real program in a kernel host and checks how it ends.
type Exec struct {
	Host           string        `yaml:"host" required:"true" doc:"A kernel host (kind: netns); the program runs in its network namespace."`
	Argv           []string      `yaml:"argv" required:"true" doc:"The program and its arguments, run without a shell (write [sh, -c, '...'] for one)." example:"[ping, -c, '1', 203.0.113.100]"`
	ExitCode       int           `yaml:"exit_code" min:"0" max:"255" doc:"The exit status the program must end with. If zero, 0."`
	StdoutContains string        `yaml:"stdout_contains" doc:"Text its standard output must contain."`
	StderrContains string        `yaml:"stderr_contains" doc:"Text its standard error must contain."`
	Within         time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Kill the program and fail if it runs longer. If zero, 30s."`
}

func (a *Exec) check(k *checker, path string) {
	var kernel []string
	for _, h := range k.plan.Hosts {
		if h.Kind == "netns" {
			kernel = append(kernel, h.Config.Name)
		}
	}
	found := false
	for _, h := range k.plan.Hosts {
		if h.Config.Name != a.Host {
			continue
		}
		found = true
		if h.Kind != "netns" {
			k.errorf(path+".host", fmt.Sprintf("set kind: netns on host %s to run real programs in it", a.Host),
				"host %s is in-process (a gVisor stack), not a kernel host", a.Host)
		}
	}
	if !found {
		k.errorf(path+".host", unknownHint(a.Host, kernel, "kernel hosts"), "no host %q", a.Host)
	}
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		k.errorf(path+".argv", "write argv: [PROGRAM, ARG...]", "no program to run")
	}
}

// Describe implements Action.
func (a *Exec) Describe() string {
	return fmt.Sprintf("exec on %s: %s", a.Host, strings.Join(a.Argv, " "))
}

// Run implements Action.
func (a *Exec) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 30*time.Second)
	defer cancel()
	res, err := env.Exec(ctx, a.Host, a.Argv)
	if err != nil {
		return "", nil, err
	}
	if ctx.Err() != nil {
		return "", nil, fmt.Errorf("%s: %w", a.Argv[0], context.Cause(ctx))
	}
	var problems []string
	if res.ExitCode != a.ExitCode {
		problems = append(problems, fmt.Sprintf("exit status %d, want %d", res.ExitCode, a.ExitCode))
	}
	if a.StdoutContains != "" && !strings.Contains(res.Stdout, a.StdoutContains) {
		problems = append(problems, fmt.Sprintf("stdout does not contain %q", a.StdoutContains))
	}
	if a.StderrContains != "" && !strings.Contains(res.Stderr, a.StderrContains) {
		problems = append(problems, fmt.Sprintf("stderr does not contain %q", a.StderrContains))
	}
	if len(problems) > 0 {
		return "", nil, fmt.Errorf("%s: %s (stdout %q, stderr %q)", a.Argv[0], strings.Join(problems, "; "),
			trim(res.Stdout), trim(res.Stderr))
	}
	return fmt.Sprintf("exit status %d", res.ExitCode), nil, nil
}
