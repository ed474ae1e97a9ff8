package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/report"
)

// LifecycleEnv is what start, stop and restart ask of the lab.
type LifecycleEnv interface {
	// StartNodes starts the named nodes and returns when each serves.
	StartNodes(ctx context.Context, names ...string) error
	// StopNode stops a node; its identity stays for a later start.
	StopNode(name string) error
	// StartService starts control, a relay or a STUN server.
	StartService(ctx context.Context, name string) error
	// StopService stops one.
	StopService(name string) error
	// NodeIdentity is a running node's ID at control and overlay address.
	NodeIdentity(name string) (id string, addr netip.Addr, err error)
	// LastIdentity is a stopped node's ID and overlay address in its last
	// run; ok is false for a node that never ran.
	LastIdentity(name string) (id string, addr netip.Addr, ok bool)
}

// Target names a node or a service.
type Target struct {
	Node    string `yaml:"node" oneof:"target" doc:"A node."`
	Service string `yaml:"service" oneof:"target" doc:"A service: control (with its embedded NATS), or a relay's or STUN server's name."`
}

// Start starts a node or service.
type Start Target

// Stop stops a node or service.
type Stop Target

// Restart stops and starts a node or service.
type Restart Target

// JSONSchema implements strictyaml.Schemer: a start is a Target.
func (*Start) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[Target](g) }

// JSONSchema implements strictyaml.Schemer: a stop is a Target.
func (*Stop) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[Target](g) }

// JSONSchema implements strictyaml.Schemer: a restart is a Target.
func (*Restart) JSONSchema(g *strictyaml.Generator) map[string]any { return schemaOf[Target](g) }

func (a *Start) check(k *checker, path string)   { k.target(path, (*Target)(a), "start") }
func (a *Stop) check(k *checker, path string)    { k.target(path, (*Target)(a), "stop") }
func (a *Restart) check(k *checker, path string) { k.target(path, (*Target)(a), "restart") }

// Describe implements Action.
func (a *Start) Describe() string { return (*Target)(a).describe("start") }

// Describe implements Action.
func (a *Stop) Describe() string { return (*Target)(a).describe("stop") }

// Describe implements Action.
func (a *Restart) Describe() string { return (*Target)(a).describe("restart") }

// Run implements Action.
func (a *Start) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	return (*Target)(a).run(ctx, env, "start")
}

// Run implements Action.
func (a *Stop) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	return (*Target)(a).run(ctx, env, "stop")
}

// Run implements Action.
func (a *Restart) Run(ctx context.Context, env Env) (string, []report.Metric, error) {
	return (*Target)(a).run(ctx, env, "restart")
}

func (t *Target) describe(action string) string {
	if t.Node != "" {
		return action + " node " + t.Node
	}
	return action + " service " + t.Service
}

// run starts, stops or restarts a node (or a count of them) or a
// service. A restarted node, or one started again after a stop, must come
// back with its identity.
func (t *Target) run(ctx context.Context, env Env, action string) (string, []report.Metric, error) {
	if t.Service != "" {
		if action != "start" {
			if err := env.StopService(t.Service); err != nil {
				return "", nil, err
			}
		}
		if action != "stop" {
			return "", nil, env.StartService(ctx, t.Service)
		}
		return "", nil, nil
	}
	var names []string
	for _, n := range env.Plan().Group(t.Node) {
		names = append(names, n.Name)
	}
	var ids []string
	if action != "start" {
		for _, name := range names {
			if id, _, err := env.NodeIdentity(name); err == nil {
				ids = append(ids, id)
			}
			if err := env.StopNode(name); err != nil {
				return "", nil, err
			}
		}
	}
	if action == "stop" {
		return "", nil, nil
	}
	if action == "start" && len(names) == 1 {
		if id, _, ok := env.LastIdentity(names[0]); ok {
			ids = append(ids, id)
		}
	}
	if err := env.StartNodes(ctx, names...); err != nil {
		return "", nil, err
	}
	if len(names) == 1 && (action == "restart" || len(ids) == 1) {
		id, addr, err := env.NodeIdentity(names[0])
		if err != nil {
			return "", nil, err
		}
		if len(ids) == 1 && id != ids[0] {
			return "", nil, fmt.Errorf("%s came back as %s, was %s", names[0], id, ids[0])
		}
		return fmt.Sprintf("same identity %s, %v", id, addr), nil, nil
	}
	return "", nil, nil
}

// target checks a start, stop or restart against what runs at this step
// and records what will.
func (k *checker) target(path string, t *Target, action string) {
	if t.Node != "" {
		members := k.plan.Group(t.Node)
		if len(members) == 0 {
			k.errorf(path+".node", k.nodeHint(t.Node), "no node %q", t.Node)
			return
		}
		for _, n := range members {
			switch {
			case action == "start" && k.running[n.Name]:
				k.errorf(path+".node", "stop it first, or use restart", "node %s is already running", n.Name)
				return
			case action != "start" && !k.running[n.Name]:
				k.errorf(path+".node", "start it first", "node %s is not running", n.Name)
				return
			}
			k.running[n.Name] = action != "stop"
		}
		return
	}
	services := k.services()
	if !slices.Contains(services, t.Service) {
		k.errorf(path+".service", unknownHint(t.Service, services, "services"), "no service %q", t.Service)
		return
	}
	switch {
	case action == "start" && !k.down[t.Service]:
		k.errorf(path+".service", "stop it first, or use restart", "service %s is already running", t.Service)
	case action != "start" && k.down[t.Service]:
		k.errorf(path+".service", "start it first", "service %s is not running", t.Service)
	}
	k.down[t.Service] = action == "stop"
}

func (k *checker) services() []string {
	var out []string
	if k.plan.Control != nil {
		out = append(out, "control")
	}
	for _, r := range k.plan.Relays {
		out = append(out, r.Name)
	}
	for _, s := range k.plan.STUN {
		out = append(out, s.Name)
	}
	return out
}
