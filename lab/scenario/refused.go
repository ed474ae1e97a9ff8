package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/report"
)

// StartRefused starts a node that control must refuse (start_refused).
type StartRefused struct {
	Node   string        `yaml:"node" required:"true" doc:"A stopped node (or one never started)."`
	Error  string        `yaml:"error" required:"true" doc:"Text the start's error must contain." example:"join token expired"`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"Bound on the attempt. If zero, 20s."`
}

func (a *StartRefused) check(k *checker, path string) {
	n := k.plan.Node(a.Node)
	switch {
	case n == nil:
		k.errorf(path+".node", k.nodeHint(a.Node), "no node %q", a.Node)
	case k.running[a.Node]:
		k.errorf(path+".node", "stop it first", "node %s is already running", a.Node)
	}
	if strings.TrimSpace(a.Error) == "" {
		k.errorf(path+".error", "", "say what the refusal must contain")
	}
}

// Describe implements Action.
func (a *StartRefused) Describe() string {
	return fmt.Sprintf("start node %s, refused: %s", a.Node, a.Error)
}

// Run implements Action.
func (a *StartRefused) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 20*time.Second)
	defer cancel()
	err := env.StartNodes(ctx, a.Node)
	switch {
	case err == nil:
		stopErr := env.StopNode(a.Node)
		return "", nil, errors.Join(fmt.Errorf("node %s started, want it refused (%q)", a.Node, a.Error), stopErr)
	case ctx.Err() != nil:
		return "", nil, fmt.Errorf("node %s was neither started nor refused: %w (last: %w)", a.Node, context.Cause(ctx), err)
	case !strings.Contains(err.Error(), a.Error):
		return "", nil, fmt.Errorf("node %s was refused, but the error does not say %q: %w", a.Node, a.Error, err)
	}
	return "refused: " + err.Error(), nil, nil
}
