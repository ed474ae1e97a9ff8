package scenario

import (
	"errors"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/topology"
)

// LiveState is what a running lab says about itself, so ParseStep checks a
// step against the lab as it is rather than as the topology starts.
type LiveState struct {
	// Running are the nodes that run now.
	Running []string
	// Stopped are the services stopped by earlier steps.
	Stopped []string
	// Location is where each roaming node is now, if not its own network.
	Location map[string]string
	// Blocked are the NAT routers whose outbound UDP is blocked.
	Blocked []string
	// Holes are the node pairs whose direct path is blackholed.
	Holes [][2]string
}

// ParseStep decodes one step, as written in a scenario's steps list (a
// mapping such as "link_down: {link: home}"), and checks it against plan
// and the lab's state, with the decoder and checks a scenario file gets.
// name names the text in errors ("do:1:12: link_down.link: ..."). A
// background step or a join is refused: they need a timeline.
func ParseStep(name string, data []byte, plan *topology.Plan, st LiveState) (*Step, error) {
	var s Step
	pos, err := strictyaml.Decode(name, data, &s)
	if err != nil {
		return nil, err
	}
	action, a := s.Action()
	if a == nil {
		return nil, &strictyaml.Error{File: name, Pos: pos[""], Msg: "no step action",
			Hint: "write one step, e.g. link_down: {link: NAME}, or ping: {from: a, to: b}"}
	}
	const prefix = "steps[1]"
	f := &File{Path: name, Pos: strictyaml.Positions{}}
	f.Topology.Plan = plan
	for k, p := range pos {
		if k == "" {
			f.Pos[prefix] = p
		} else {
			f.Pos[prefix+"."+k] = p
		}
	}
	var c strictyaml.Collector
	k := &checker{f: f, c: &c, plan: plan,
		running: map[string]bool{}, down: map[string]bool{}, location: map[string]string{},
		bg: map[string]bool{}, bgSeen: map[string]bool{}, blocked: map[string]bool{}, holes: map[[2]string]bool{}}
	for _, n := range plan.Nodes {
		k.location[n.Name] = n.Network
	}
	for n, net := range st.Location {
		k.location[n] = net
	}
	for _, n := range st.Running {
		k.running[n] = true
	}
	for _, s := range st.Stopped {
		k.down[s] = true
	}
	for _, r := range st.Blocked {
		k.blocked[r] = true
	}
	for _, h := range st.Holes {
		k.holes[[2]string{min(h[0], h[1]), max(h[0], h[1])}] = true
	}
	switch {
	case s.Background != "":
		k.errorf(prefix+".background", "run it without background", "a live lab runs one step at a time")
	case action == "join":
		k.errorf(prefix+"."+action, "", "a live lab has no background steps to join")
	default:
		k.step(prefix, &s)
	}
	err = c.Err()
	var es *strictyaml.Errors
	if errors.As(err, &es) {
		for _, e := range es.List {
			e.Path = strings.TrimPrefix(strings.TrimPrefix(e.Path, prefix), ".")
		}
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}
