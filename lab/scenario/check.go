package scenario

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/topology"
)

// checker walks the timeline, tracking what is running, so a step that
// names nothing, or something stopped, is reported where it is written.
type checker struct {
	f    *File
	c    *strictyaml.Collector
	plan *topology.Plan

	running  map[string]bool   // nodes
	down     map[string]bool   // stopped services
	location map[string]string // node → network it is on
	bg       map[string]bool   // background ids not joined yet
	bgSeen   map[string]bool
	blocked  map[string]bool // routers whose UDP is blocked
	holes    map[[2]string]bool
}

func (k *checker) errorf(path, hint, format string, args ...any) {
	pos := k.f.Pos[path]
	for p := path; pos.IsZero() && p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			p = ""
		} else {
			p = p[:i]
		}
		pos = k.f.Pos[p]
	}
	k.c.Add(&strictyaml.Error{File: k.f.Path, Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// check reports every step that names nothing, acts on something not
// running, or needs what the scenario does not require.
func check(f *File, c *strictyaml.Collector) {
	k := &checker{f: f, c: c, plan: f.Plan(),
		running: map[string]bool{}, down: map[string]bool{}, location: map[string]string{},
		bg: map[string]bool{}, bgSeen: map[string]bool{}, blocked: map[string]bool{}, holes: map[[2]string]bool{}}
	for _, n := range k.plan.Nodes {
		k.location[n.Name] = n.Network
	}
	if len(f.Nodes) > 0 {
		first := map[string]int{}
		for i, name := range f.Nodes {
			if j, dup := first[name]; dup {
				k.errorf(fmt.Sprintf("nodes[%d]", i+1), "list each node once",
					"node %q is listed twice (first as nodes[%d])", name, j)
				continue
			}
			first[name] = i + 1
			members := k.plan.Group(name)
			if len(members) == 0 {
				k.errorf(fmt.Sprintf("nodes[%d]", i+1), k.nodeHint(name), "no node %q in the topology", name)
			}
			for _, n := range members {
				k.running[n.Name] = true
			}
		}
	} else {
		for _, n := range k.plan.Nodes {
			k.running[n.Name] = n.Start
		}
	}
	k.requirements()
	k.checkClock()
	if len(f.Steps) == 0 {
		k.errorf("steps", "add steps, e.g. - wait_path: {from: a, to: b, path: direct}", "a scenario needs at least one step")
	}
	for i := range f.Steps {
		k.step(fmt.Sprintf("steps[%d]", i+1), &f.Steps[i])
	}
}

// requirements checks that what the topology runs is in requires.
func (k *checker) requirements() {
	needs := func(what, why string) {
		if !slices.Contains(k.f.Requires, what) {
			k.errorf("requires", fmt.Sprintf("add requires: [%s], so the scenario is skipped where it cannot run", what), "%s", why)
		}
	}
	for _, n := range k.plan.Nodes {
		sb := n.Sandbox
		if sb == nil {
			continue
		}
		if sb.Mode == "gvisor" {
			needs("gvisor", fmt.Sprintf("sandbox %s runs in gvisor mode", n.Name))
			return
		}
		if sb.EgressPolicy != "" || len(sb.Forwards) > 0 {
			needs("pro", fmt.Sprintf("sandbox %s has an egress policy or forwards, which are Pro features", n.Name))
			return
		}
	}
	for _, h := range k.plan.Hosts {
		if h.Kind == "netns" {
			needs("root", fmt.Sprintf("host %s is a network namespace", h.Config.Name))
			return
		}
	}
}

func (k *checker) nodeHint(name string) string {
	names := make([]string, 0, len(k.plan.Nodes))
	for _, n := range k.plan.Nodes {
		names = append(names, n.Name)
	}
	if s := strictyaml.Suggest(name, names); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	if len(names) > 12 {
		names = append(names[:12:12], "…")
	}
	return "nodes: " + strings.Join(names, ", ")
}

// node checks that name is a node and is running at this step.
func (k *checker) node(path, name string) bool {
	if k.plan.Node(name) == nil {
		hint := k.nodeHint(name)
		if len(k.plan.Group(name)) > 0 {
			hint = fmt.Sprintf("%s is a count of nodes; name one, e.g. %s", name, k.plan.Group(name)[0].Name)
		}
		k.errorf(path, hint, "no node %q", name)
		return false
	}
	if !k.running[name] {
		k.errorf(path, "start it with a start step first, or list it in nodes", "node %s is not running at this step", name)
		return false
	}
	return true
}

// pair checks two distinct running nodes.
func (k *checker) pair(path, from, to string) {
	okA := k.node(path+".from", from)
	okB := k.node(path+".to", to)
	if okA && okB && from == to {
		k.errorf(path+".to", "", "from and to are both %s", from)
	}
}

// sandbox checks a running pod sandbox.
func (k *checker) sandbox(path, name, mode string) *topology.PlanNode {
	if !k.node(path, name) {
		return nil
	}
	n := k.plan.Node(name)
	if n.Sandbox == nil || n.Sandbox.Mode != mode {
		k.errorf(path, fmt.Sprintf("give the node sandbox: %s in the topology", mode), "node %s is not a %s sandbox", name, mode)
		return nil
	}
	return n
}

// host checks a URL's host: a node name or an address.
func (k *checker) urlHost(path, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		k.errorf(path, "", "bad URL: %v", err)
		return
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return
	}
	host = strings.TrimSuffix(host, ".lattice")
	if k.plan.Node(host) == nil {
		k.errorf(path, k.nodeHint(host), "URL host %q is no node", host)
	}
}

func unknownHint(name string, names []string, what string) string {
	if s := strictyaml.Suggest(name, names); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	if len(names) == 0 {
		return "there are no " + what
	}
	return what + ": " + strings.Join(names, ", ")
}

// step checks one step and updates the timeline's state.
func (k *checker) step(path string, s *Step) {
	action, a := s.Action()
	if a == nil {
		return // reported by the decoder
	}
	if s.Background != "" {
		switch {
		case k.bgSeen[s.Background]:
			k.errorf(path+".background", "give each background step its own id", "background id %q is used twice", s.Background)
		case action == "join":
			k.errorf(path+".background", "", "a join cannot run in the background")
		}
		k.bgSeen[s.Background], k.bg[s.Background] = true, true
	}
	a.check(k, path+"."+action)
}
