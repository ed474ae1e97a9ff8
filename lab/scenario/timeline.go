package scenario

import (
	"context"
	"reflect"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
)

// TimelineEnv is what the steps about the timeline itself ask of the run.
type TimelineEnv interface {
	// Join waits for the background step with this id and returns its
	// detail, or an error naming it if it failed.
	Join(ctx context.Context, id string) (string, error)
	// Resources samples the lab's goroutines and the heap (live and in use), after
	// a garbage collection (steady).
	Resources() Resources
}

// Sleep waits (sleep: 2s).
type Sleep time.Duration

// UnmarshalStrictYAML implements strictyaml.Unmarshaler: a sleep is a
// bare duration.
func (s *Sleep) UnmarshalStrictYAML(d *strictyaml.Decoder, n strictyaml.Node, path string) {
	d.Decode(n, reflect.ValueOf((*time.Duration)(s)).Elem(), path)
}

// JSONSchema implements strictyaml.Schemer.
func (*Sleep) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[time.Duration](g) }

func (s *Sleep) check(*checker, string) {}

// Describe implements Action.
func (s *Sleep) Describe() string { return "sleep " + time.Duration(*s).String() }

// Run implements Action.
func (s *Sleep) Run(ctx context.Context, _ Env) (string, []report.Metric, error) {
	return "", nil, sleep(ctx, time.Duration(*s))
}

// Join waits for a background step (join: ID).
type Join string

func (j Join) check(k *checker, path string) {
	id := string(j)
	if !k.bg[id] {
		hint := "name the background id of an earlier step"
		if k.bgSeen[id] {
			hint = "it was joined already"
		}
		k.errorf(path, hint, "no background step %q to join", id)
	}
	delete(k.bg, id)
}

// Describe implements Action.
func (j Join) Describe() string { return "join " + string(j) }

// Run implements Action.
func (j Join) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	detail, err := env.Join(ctx, string(j))
	return detail, nil, err
}
