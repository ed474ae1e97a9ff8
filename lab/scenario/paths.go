package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/node"
)

// PathEnv is what the path steps ask of the lab.
type PathEnv interface {
	// WaitPath waits until from's path to to is want ("direct" or
	// "relay") and returns from's view of to.
	WaitPath(ctx context.Context, from, to, want string) (node.PeerStatus, error)
	// CheckPath returns from's view of to now, or an error saying how it
	// differs from want.
	CheckPath(from, to, want string) (node.PeerStatus, error)
	// TimeToDirect waits for the pair's direct path and says how long
	// after both nodes were up it came.
	TimeToDirect(ctx context.Context, from, to string) (time.Duration, error)
	// WaitMesh waits until every pair of running nodes has a path.
	WaitMesh(ctx context.Context) (MeshState, error)
	// MeshTable is every running pair's path, as a table to print.
	MeshTable() string
	// Running lists the running nodes in plan order.
	Running() []string
	// WaitPresence waits until from shows peer online (or offline) and
	// returns from's view of it.
	WaitPresence(ctx context.Context, from, peer string, online bool) (node.PeerStatus, error)
}

// MeshState counts the ordered pairs of running nodes: all of them, those
// that know each other and completed a WireGuard handshake, and those of
// these that are direct.
type MeshState struct {
	Nodes, Pairs, Connected, Direct int
}

// PathCheck waits for a path (wait_path).
type PathCheck struct {
	From   string        `yaml:"from" required:"true" doc:"The node whose view is checked."`
	To     string        `yaml:"to" required:"true" doc:"The peer."`
	Path   string        `yaml:"path" required:"true" enum:"direct|relay" doc:"The expected path."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait. If zero, 10s."`
}

func (a *PathCheck) check(k *checker, path string) { k.pair(path, a.From, a.To) }

// Describe implements Action.
func (a *PathCheck) Describe() string {
	return fmt.Sprintf("wait until %s → %s is %s", a.From, a.To, a.Path)
}

// Run implements Action.
func (a *PathCheck) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	st, err := env.WaitPath(ctx, a.From, a.To, a.Path)
	if err != nil {
		return "", nil, err
	}
	return PathDetail(st), nil, nil
}

// PathHold checks a path now and over time (assert_path).
type PathHold struct {
	From string        `yaml:"from" required:"true" doc:"The node whose view is checked."`
	To   string        `yaml:"to" required:"true" doc:"The peer."`
	Path string        `yaml:"path" required:"true" enum:"direct|relay" doc:"The expected path."`
	For  time.Duration `yaml:"for" max:"1h" doc:"How long it must hold. If zero, checked once."`
}

func (a *PathHold) check(k *checker, path string) { k.pair(path, a.From, a.To) }

// Describe implements Action.
func (a *PathHold) Describe() string { return fmt.Sprintf("%s → %s is %s", a.From, a.To, a.Path) }

// Run implements Action.
func (a *PathHold) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	deadline := time.Now().Add(a.For)
	for {
		st, err := env.CheckPath(a.From, a.To, a.Path)
		if err != nil {
			return "", nil, err
		}
		if !time.Now().Before(deadline) {
			return PathDetail(st), nil, nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return "", nil, err
		}
	}
}

// TimeToDirect measures a pair's upgrade to a direct path.
type TimeToDirect struct {
	From   string        `yaml:"from" required:"true" doc:"One node."`
	To     string        `yaml:"to" required:"true" doc:"The other."`
	Max    time.Duration `yaml:"max" max:"1h" doc:"Fail if it took longer."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait for the direct path. If zero, 10s."`
}

func (a *TimeToDirect) check(k *checker, path string) { k.pair(path, a.From, a.To) }

// Describe implements Action.
func (a *TimeToDirect) Describe() string {
	return fmt.Sprintf("time to direct %s → %s", a.From, a.To)
}

// Run implements Action.
func (a *TimeToDirect) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 10*time.Second)
	defer cancel()
	d, err := env.TimeToDirect(ctx, a.From, a.To)
	if err != nil {
		return "", nil, err
	}
	m := []report.Metric{{Name: "time_to_direct", Value: float64(d) / 1e6, Unit: "ms"}}
	detail := fmt.Sprintf("direct %s after both were up", FormatDuration(d))
	if a.Max > 0 && d > a.Max {
		return detail, m, fmt.Errorf("%s: more than %v", detail, a.Max)
	}
	return detail, m, nil
}

// FullMesh waits for every pair to have a path.
type FullMesh struct {
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait. If zero, 60s."`
	Ping   bool          `yaml:"ping" doc:"Also ping every pair over the overlay once."`
}

func (a *FullMesh) check(k *checker, path string) {
	n := 0
	for _, up := range k.running {
		if up {
			n++
		}
	}
	if n < 2 {
		k.errorf(path, "", "a mesh needs two running nodes, %d are running", n)
	}
}

// Describe implements Action.
func (a *FullMesh) Describe() string { return "full mesh" }

// Run implements Action.
func (a *FullMesh) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 60*time.Second)
	defer cancel()
	start := time.Now()
	ms, err := env.WaitMesh(ctx)
	if err != nil {
		return "", nil, err
	}
	took := time.Since(start)
	if a.Ping {
		if err := pingAll(ctx, env); err != nil {
			return "", nil, err
		}
	}
	env.Say("%s", strings.TrimRight(indent(env.MeshTable(), "    "), "\n"))
	return fmt.Sprintf("%d nodes, %d pairs connected, %d direct", ms.Nodes, ms.Connected/2, ms.Direct/2),
		[]report.Metric{{Name: "time_to_full_mesh", Value: float64(took) / 1e6, Unit: "ms"}}, nil
}

// pingAll pings every ordered pair of running nodes once.
func pingAll(ctx context.Context, env Env) error {
	names := env.Running()
	for _, a := range names {
		for _, b := range names {
			if a == b {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := env.Ping(pctx, a, b, 1)
			cancel()
			if err != nil {
				return fmt.Errorf("ping %s → %s: %w", a, b, err)
			}
		}
	}
	return nil
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

// PathDetail says where a peer's traffic goes and, for the relay, why in
// the node's words (PeerStatus.Why), never a library's error string.
func PathDetail(st node.PeerStatus) string {
	if st.Path == node.PathDirect {
		return "direct to " + st.Endpoint
	}
	if st.Why != "" {
		return "relay (" + st.Why + ")"
	}
	if n := len(st.History); n > 0 {
		return "relay (" + st.History[n-1].Reason + ")"
	}
	return "relay"
}

// Presence waits for a peer's presence in a node's view (wait_presence).
type Presence struct {
	From   string        `yaml:"from" required:"true" doc:"The node whose view is checked."`
	Peer   string        `yaml:"peer" required:"true" doc:"The peer; it may be stopped."`
	Status string        `yaml:"status" required:"true" enum:"online|offline" doc:"online: control says the peer runs; offline: it left, or its heartbeats stopped for the presence TTL."`
	Within time.Duration `yaml:"within" min:"10ms" max:"1h" doc:"How long to wait. If zero, 30s (twice the default presence TTL)."`
}

func (a *Presence) check(k *checker, path string) {
	k.node(path+".from", a.From)
	switch {
	case k.plan.Node(a.Peer) == nil:
		k.errorf(path+".peer", k.nodeHint(a.Peer), "no node %q", a.Peer)
	case a.Peer == a.From:
		k.errorf(path+".peer", "", "from and peer are both %s", a.From)
	}
}

// Describe implements Action.
func (a *Presence) Describe() string {
	return fmt.Sprintf("wait until %s shows %s %s", a.From, a.Peer, a.Status)
}

// Run implements Action.
func (a *Presence) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	ctx, cancel := env.Within(ctx, a.Within, 30*time.Second)
	defer cancel()
	st, err := env.WaitPresence(ctx, a.From, a.Peer, a.Status == "online")
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s: %s", a.Peer, st.Path), nil, nil
}
