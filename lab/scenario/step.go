package scenario

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/topology"
)

// Action is what a step does. Every field of Step tagged oneof:"action"
// is a type implementing it.
type Action interface {
	// check reports what is wrong with the step at this point of the
	// timeline (path is "steps[N].KEY") and updates the timeline's state.
	check(k *checker, path string)
	// Describe is the step's label when the file gives it no name.
	Describe() string
	// Run carries the step out and returns a line for the report, its
	// measurements, and why it failed.
	Run(ctx context.Context, env Env) (detail string, metrics []report.Metric, err error)
}

// Env is the lab a step runs against. lab/runner implements it; each
// step family declares what it needs in its own interface.
type Env interface {
	// Within bounds ctx by a step's own limit d, or def if d is zero,
	// times the run's slowdown; the context's cause says "not within D".
	Within(ctx context.Context, d, def time.Duration) (context.Context, context.CancelFunc)
	// Say prints a line of progress.
	Say(format string, args ...any)
	// Plan is the topology the lab runs.
	Plan() *topology.Plan

	PathEnv
	TrafficEnv
	StreamEnv
	LifecycleEnv
	FaultEnv
	TimelineEnv
	SandboxEnv
	ExecEnv
	MetricEnv
}

// actionField is a field of Step that holds an action.
type actionField struct {
	key   string // the step's YAML key
	index int
}

var actionFields = sync.OnceValue(func() []actionField {
	t := reflect.TypeFor[Step]()
	act := reflect.TypeFor[Action]()
	var out []actionField
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Tag.Get("oneof") != "action" {
			continue
		}
		if !sf.Type.Implements(act) {
			panic(fmt.Sprintf("scenario: Step.%s: %s is no Action", sf.Name, sf.Type))
		}
		key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		out = append(out, actionField{key: key, index: i})
	}
	return out
})

// Action returns the step's action name ("wait_path") and the action, or
// "" and nil if none is set.
func (s *Step) Action() (string, Action) {
	v := reflect.ValueOf(s).Elem()
	for _, f := range actionFields() {
		if fv := v.Field(f.index); !fv.IsZero() {
			return f.key, fv.Interface().(Action)
		}
	}
	return "", nil
}

// schemaOf is T's JSON Schema, for a step type that is T under another
// name (so the schema defines T once).
func schemaOf[T any](g *strictyaml.Generator) map[string]any { return g.Type(reflect.TypeFor[T]()) }

// retry runs f until it succeeds or ctx ends, returning its last error.
func retry(ctx context.Context, f func(context.Context) error) error {
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(attempt)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return last
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkBody compares an HTTP answer with what a step expects.
func checkBody(status int, body string, wantStatus int, contains string) error {
	if wantStatus == 0 {
		wantStatus = http.StatusOK
	}
	if status != wantStatus {
		return fmt.Errorf("status %d, want %d (body %q)", status, wantStatus, trim(body))
	}
	if contains != "" && !strings.Contains(body, contains) {
		return fmt.Errorf("body %q does not contain %q", trim(body), contains)
	}
	return nil
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// FormatDuration prints d with the precision a reader wants at its scale,
// as step details and the lab's progress lines show it.
func FormatDuration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < 100*time.Microsecond:
		return fmt.Sprintf("%.2fms", ms)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", ms)
	case d < time.Second:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
