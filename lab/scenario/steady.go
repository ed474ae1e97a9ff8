package scenario

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
)

// Resources is a sample of what the lab holds.
type Resources struct {
	// Goroutines counts the lab's goroutines; Scope says which: "bubble"
	// (the synctest bubble the lab runs in, nothing else) or "process"
	// (every goroutine of the process, on the wall clock, where other
	// work in the process counts too).
	Goroutines int
	Scope      string
	// HeapLive is the process's live heap after a collection: the bytes
	// of objects still reachable (runtime.MemStats.HeapAlloc right after
	// runtime.GC). A leak grows it. The heap has no notion of a bubble:
	// other work in the process counts.
	HeapLive uint64
	// HeapInuse is the process's heap spans in use at the same moment
	// (runtime.MemStats.HeapInuse): HeapLive plus the free slots of
	// spans that still hold a live object. Go's collector does not move
	// objects, so after churn it stays above HeapLive (fragmentation)
	// without any object leaking; steady reports it and checks HeapLive.
	HeapInuse uint64
}

// Steady runs a block of steps and checks that the lab's goroutines and
// live heap end where they began, within stated tolerances: a soak's leak
// check. The heap in use (spans) is reported beside the live heap, not
// checked: it also counts fragmentation, which grows with churn while no
// object leaks (docs/VIRTUAL_TIME.md, "The 20-node soak").
type Steady struct {
	Goroutines int             `yaml:"goroutines" required:"true" min:"0" doc:"How many more goroutines the lab may have after the block than before it."`
	Heap       strictyaml.Size `yaml:"heap" required:"true" doc:"How much more live heap (reachable objects) there may be after the block than before it, each sampled after a collection." example:"32MiB"`
	Settle     time.Duration   `yaml:"settle" max:"10m" doc:"How long to let the lab quiet down before each sample (stopped nodes' goroutines exit, handshakes finish). If zero, 10s."`
	Steps      []Step          `yaml:"steps" required:"true" doc:"The steps between the two samples, run in order. None may run in the background, and the block must end with the nodes running that ran at its start, so the samples compare like with like."`
}

func (a *Steady) check(k *checker, path string) {
	if a.Heap < 0 {
		k.errorf(path+".heap", "", "heap tolerance %d is negative", a.Heap)
	}
	before := maps.Clone(k.running)
	k.block(path, a.Steps, 1)
	var differ []string
	for name := range k.running {
		if k.running[name] != before[name] {
			differ = append(differ, name)
		}
	}
	for name := range before {
		if _, ok := k.running[name]; !ok && before[name] {
			differ = append(differ, name)
		}
	}
	if len(differ) > 0 {
		slices.Sort(differ)
		k.errorf(path+".steps", "start or stop them again before the block ends",
			"the block ends with other nodes running than at its start (%s), so its samples would not compare", strings.Join(differ, ", "))
	}
}

// Describe implements Action.
func (a *Steady) Describe() string {
	return fmt.Sprintf("steady over %s (goroutines +%d, heap +%s)", plural(len(a.Steps), "step"), a.Goroutines, sizeString(int64(a.Heap)))
}

// Run implements Action.
func (a *Steady) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	settle := a.Settle
	if settle == 0 {
		settle = 10 * time.Second
	}
	sample := func() (Resources, error) {
		if err := sleep(ctx, settle); err != nil {
			return Resources{}, err
		}
		return env.Resources(), nil
	}
	start, err := sample()
	if err != nil {
		return "", nil, err
	}
	env.Say("    at the start: %d goroutines (%s), %s live heap (%s in use)", start.Goroutines, start.Scope,
		sizeString(int64(start.HeapLive)), sizeString(int64(start.HeapInuse)))
	if err := runBlock(ctx, env, a.Steps, "steady"); err != nil {
		return "", nil, err
	}
	end, err := sample()
	if err != nil {
		return "", nil, err
	}
	dg := end.Goroutines - start.Goroutines
	dh := int64(end.HeapLive) - int64(start.HeapLive)
	detail := fmt.Sprintf("goroutines %d → %d (%+d, %s), live heap %s → %s (%s), heap in use %s → %s (%s)", start.Goroutines, end.Goroutines, dg,
		end.Scope, sizeString(int64(start.HeapLive)), sizeString(int64(end.HeapLive)), signedSize(dh),
		sizeString(int64(start.HeapInuse)), sizeString(int64(end.HeapInuse)), signedSize(int64(end.HeapInuse)-int64(start.HeapInuse)))
	metrics := []report.Metric{
		{Name: "goroutines_start", Value: float64(start.Goroutines)},
		{Name: "goroutines_end", Value: float64(end.Goroutines)},
		{Name: "heap_live_start", Value: float64(start.HeapLive) / (1 << 20), Unit: "MiB"},
		{Name: "heap_live_end", Value: float64(end.HeapLive) / (1 << 20), Unit: "MiB"},
		{Name: "heap_inuse_start", Value: float64(start.HeapInuse) / (1 << 20), Unit: "MiB"},
		{Name: "heap_inuse_end", Value: float64(end.HeapInuse) / (1 << 20), Unit: "MiB"},
	}
	var over []string
	if dg > a.Goroutines {
		over = append(over, fmt.Sprintf("%d more goroutines, more than %d", dg, a.Goroutines))
	}
	if dh > int64(a.Heap) {
		over = append(over, fmt.Sprintf("%s more live heap, more than %s", sizeString(dh), sizeString(int64(a.Heap))))
	}
	if len(over) > 0 {
		return detail, metrics, fmt.Errorf("%s: %s", detail, strings.Join(over, "; "))
	}
	return detail, metrics, nil
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30 || n <= -1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	case n >= 1<<20 || n <= -1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10 || n <= -1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%dB", n)
	}
}

func signedSize(n int64) string {
	if n >= 0 {
		return "+" + sizeString(n)
	}
	return sizeString(n)
}
