package topology

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
)

// graph is a plan as boxes and lines, ready to print in either syntax.
type graph struct {
	name  string
	nodes []gnode
	edges []gedge
}

type gnode struct {
	id, kind string // kind: network, router, host
	lines    []string
}

type gedge struct {
	from, to, label string
}

// build collects the plan's networks, routers and hosts; the nodes a
// count expanded collapse into one box.
func (p *Plan) graph() *graph {
	g := &graph{name: p.Name}
	for _, n := range p.Networks {
		lines := []string{n.Config.Name}
		for _, pfx := range []netip.Prefix{n.Config.Prefix, n.Config.Prefix6} {
			if pfx.IsValid() {
				lines = append(lines, pfx.String())
			}
		}
		g.nodes = append(g.nodes, gnode{id: "net_" + n.Config.Name, kind: "network", lines: lines})
	}
	for _, r := range p.Routers {
		lines := []string{r.Config.Name}
		if r.Config.NAT == nil && r.Config.NAT64 == nil && r.Config.Stateful != nil {
			lines = append(lines, "filter "+r.Profile) // ipv6-firewall translates nothing
		} else if r.Profile != "" {
			lines = append(lines, "NAT "+r.Profile)
		} else if r.Config.Firewall != nil {
			lines = append(lines, "firewall")
		}
		g.nodes = append(g.nodes, gnode{id: "rt_" + r.Config.Name, kind: "router", lines: lines})
		for _, ifc := range r.Config.Interfaces {
			g.edges = append(g.edges, gedge{"rt_" + r.Config.Name, "net_" + ifc.Network, edgeLabel(ifc)})
		}
	}
	roles := p.roles()
	groups := map[string][]*PlanNode{}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		if n.Group != n.Name {
			groups[n.Group] = append(groups[n.Group], n)
		}
	}
	drawn := map[string]bool{}
	for _, h := range p.Hosts {
		name := h.Config.Name
		id := "host_" + name
		lines := append([]string{name}, roles[name]...)
		addrs := make([]string, 0, len(h.Config.Interfaces))
		for _, ifc := range h.Config.Interfaces {
			addrs = append(addrs, ifc.Addr.String())
			for _, a := range ifc.Aliases {
				addrs = append(addrs, a.String())
			}
		}
		lines = append(lines, strings.Join(addrs, ", "))
		label := func(ifc fabric.InterfaceConfig) string { return edgeLabel(ifc) }
		if n := p.Node(name); n != nil && n.Group != n.Name {
			// A count's nodes are one box: a hundred alike boxes say less.
			if drawn[n.Group] {
				continue
			}
			drawn[n.Group] = true
			members := groups[n.Group]
			id = "host_" + n.Group
			lines = append([]string{fmt.Sprintf("%s ×%d", n.Group, len(members)),
				fmt.Sprintf("%s … %s", members[0].Name, members[len(members)-1].Name)}, roles[name]...)
			label = func(ifc fabric.InterfaceConfig) string {
				return strings.TrimSpace(describeImpairments(ifc.Egress, ifc.Ingress))
			}
		}
		if h.Kind == "netns" {
			lines = append(lines, "netns")
		}
		g.nodes = append(g.nodes, gnode{id: id, kind: "host", lines: lines})
		for _, ifc := range h.Config.Interfaces {
			g.edges = append(g.edges, gedge{id, "net_" + ifc.Network, label(ifc)})
		}
	}
	return g
}

// roles says what runs on each host: "node (pod sandbox)", "relay :443".
func (p *Plan) roles() map[string][]string {
	out := map[string][]string{}
	add := func(host, role string) { out[host] = append(out[host], role) }
	if p.Control != nil {
		add(p.Control.Host, fmt.Sprintf("control :%d", p.Control.Addr.Port()))
	}
	named := func(kind, name string) string {
		if kind == name {
			return kind
		}
		return kind + " " + name
	}
	for _, r := range p.Relays {
		add(r.Host, fmt.Sprintf("%s :%d", named("relay", r.Name), r.Addr.Port()))
	}
	for _, s := range p.STUN {
		add(s.Host, fmt.Sprintf("%s :%d", named("stun", s.Name), s.Addr.Port()))
	}
	for _, d := range p.DNS {
		role := fmt.Sprintf("%s :%d", named("dns", d.Name), d.Addr.Port())
		if d.DNS64.IsValid() {
			role += " (DNS64)"
		}
		add(d.Host, role)
	}
	for _, n := range p.Nodes {
		role := "node " + n.Name
		switch {
		case n.Group != n.Name:
			role = "nodes"
		case n.Host == n.Name:
			role = "node"
		}
		if n.Sandbox != nil {
			role += " (" + n.Sandbox.Mode + " sandbox)"
		}
		add(n.Host, role)
	}
	return out
}

// edgeLabel is an interface's address and impairments.
func edgeLabel(ifc fabric.InterfaceConfig) string {
	parts := []string{ifc.Addr.String()}
	if im := describeImpairments(ifc.Egress, ifc.Ingress); im != "" {
		parts = append(parts, im)
	}
	return strings.Join(parts, " ")
}

// describeImpairments summarises both directions: "10ms 1% loss".
func describeImpairments(eg, in link.Impairments) string {
	one := func(im link.Impairments) string {
		var out []string
		if im.Down {
			out = append(out, "down")
		}
		if im.Latency > 0 {
			out = append(out, im.Latency.String())
		}
		if im.Jitter > 0 {
			out = append(out, "±"+im.Jitter.String())
		}
		if im.Loss > 0 {
			out = append(out, fmt.Sprintf("%g%% loss", im.Loss*100))
		}
		if im.Rate > 0 {
			out = append(out, Rate(im.Rate).String())
		}
		return strings.Join(out, " ")
	}
	e, i := one(eg), one(in)
	switch {
	case e == i:
		return e
	case i == "":
		return "out: " + e
	case e == "":
		return "in: " + i
	}
	return "out: " + e + ", in: " + i
}

// WriteDOT writes the plan as a Graphviz graph: dot -Tsvg renders it.
func (p *Plan) WriteDOT(w io.Writer) error {
	g := p.graph()
	var b strings.Builder
	fmt.Fprintf(&b, "graph %q {\n", g.name)
	b.WriteString("  layout=dot; rankdir=BT; node [fontname=\"Helvetica\" fontsize=10]; edge [fontname=\"Helvetica\" fontsize=9];\n")
	shapes := map[string]string{
		"network": `shape=ellipse style=filled fillcolor="#dbeafe"`,
		"router":  `shape=box style="rounded,filled" fillcolor="#fde68a"`,
		"host":    `shape=box style=filled fillcolor="#dcfce7"`,
	}
	for _, n := range g.nodes {
		fmt.Fprintf(&b, "  %q [%s label=%q];\n", n.id, shapes[n.kind], strings.Join(n.lines, "\n"))
	}
	for _, e := range g.edges {
		fmt.Fprintf(&b, "  %q -- %q [label=%q];\n", e.from, e.to, e.label)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMermaid writes the plan as a Mermaid flowchart, which GitHub
// renders in Markdown inside ```mermaid fences.
func (p *Plan) WriteMermaid(w io.Writer) error {
	g := p.graph()
	var b strings.Builder
	b.WriteString("flowchart BT\n")
	open, close := map[string]string{"network": "([", "router": "{{", "host": "["}, map[string]string{"network": "])", "router": "}}", "host": "]"}
	for _, n := range g.nodes {
		fmt.Fprintf(&b, "  %s%s\"%s\"%s\n", mermaidID(n.id), open[n.kind], mermaidText(strings.Join(n.lines, "<br/>")), close[n.kind])
	}
	for _, e := range g.edges {
		if e.label == "" {
			fmt.Fprintf(&b, "  %s --- %s\n", mermaidID(e.from), mermaidID(e.to))
			continue
		}
		fmt.Fprintf(&b, "  %s ---|\"%s\"| %s\n", mermaidID(e.from), mermaidText(e.label), mermaidID(e.to))
	}
	for kind, style := range map[string]string{"network": "fill:#dbeafe", "router": "fill:#fde68a", "host": "fill:#dcfce7"} {
		var ids []string
		for _, n := range g.nodes {
			if n.kind == kind {
				ids = append(ids, mermaidID(n.id))
			}
		}
		if len(ids) > 0 {
			fmt.Fprintf(&b, "  classDef %s %s\n  class %s %s\n", kind, style, strings.Join(ids, ","), kind)
		}
	}
	_, err := io.WriteString(w, sortClassDefs(b.String()))
	return err
}

func mermaidID(id string) string { return strings.ReplaceAll(id, "-", "_") }

// mermaidText escapes what Mermaid labels cannot hold.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "|", "#124;").Replace(s)
}

// sortClassDefs makes the map-ordered class lines deterministic.
func sortClassDefs(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	i := len(lines)
	for i > 0 && (strings.HasPrefix(lines[i-1], "  classDef ") || strings.HasPrefix(lines[i-1], "  class ")) {
		i--
	}
	tail := lines[i:]
	var pairs []string
	for j := 0; j+1 < len(tail); j += 2 {
		pairs = append(pairs, tail[j]+"\n"+tail[j+1])
	}
	sort.Strings(pairs)
	return strings.Join(append(lines[:i], pairs...), "\n") + "\n"
}
