package scenario

import (
	"context"
	"errors"
	"fmt"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
)

// Repeat runs a block of steps several times (repeat: {times: 12,
// steps: [...]}), so a soak's churn is written once.
type Repeat struct {
	Times int    `yaml:"times" required:"true" min:"1" max:"100000" doc:"How many rounds."`
	Steps []Step `yaml:"steps" required:"true" doc:"One round's steps, run in order. None may run in the background: a round ends when its last step does."`
}

func (a *Repeat) check(k *checker, path string) { k.block(path, a.Steps, a.Times) }

// Describe implements Action.
func (a *Repeat) Describe() string {
	return fmt.Sprintf("repeat %d × %s", a.Times, plural(len(a.Steps), "step"))
}

// Run implements Action.
func (a *Repeat) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	for round := 1; round <= a.Times; round++ {
		if err := runBlock(ctx, env, a.Steps, fmt.Sprintf("round %d/%d", round, a.Times)); err != nil {
			return fmt.Sprintf("%d of %d rounds passed", round-1, a.Times), nil, err
		}
	}
	return fmt.Sprintf("%d rounds of %s", a.Times, plural(len(a.Steps), "step")), nil, nil
}

// runBlock runs steps in order on this goroutine, labelling each with
// where (a round), and returns the first failure naming its step.
func runBlock(ctx context.Context, env Env, steps []Step, where string) error {
	for i := range steps {
		s := &steps[i]
		_, act := s.Action()
		if act == nil {
			return fmt.Errorf("%s, step %d: no action", where, i+1)
		}
		label := s.Name
		if label == "" {
			label = act.Describe()
		}
		env.Say("  [%s, %d/%d] %s", where, i+1, len(steps), label)
		detail, _, err := act.Run(ctx, env)
		if err != nil {
			return fmt.Errorf("%s, step %d (%s): %w", where, i+1, label, err)
		}
		if detail != "" {
			env.Say("    ✓ %s", detail)
		}
	}
	return nil
}

// block checks a nested block of steps (path is "steps[N].KEY") that
// runs times times. A block whose state differs after a round (a node
// started and not stopped again) is checked a second time, and what is
// wrong only then is reported as "in round 2".
func (k *checker) block(path string, steps []Step, times int) {
	if len(steps) == 0 {
		k.errorf(path+".steps", "", "the block has no steps")
		return
	}
	pass := func() {
		for i := range steps {
			p := fmt.Sprintf("%s.steps[%d]", path, i+1)
			if steps[i].Background != "" {
				k.errorf(p+".background", "run it before the block and join it after, or leave background out",
					"a step in a block cannot run in the background")
				continue
			}
			k.step(p, &steps[i])
		}
	}
	before := k.c.Len()
	pass()
	if times < 2 || k.c.Len() > before {
		return
	}
	outer := k.c
	k.c = &strictyaml.Collector{}
	pass()
	second := k.c.Err()
	k.c = outer
	var es *strictyaml.Errors
	if errors.As(second, &es) {
		for _, e := range es.List {
			e.Msg = "in round 2: " + e.Msg
			outer.Add(e)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
