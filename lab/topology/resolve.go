package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/fabric"
)

// DefaultToken is control's join token when the topology names none.
const DefaultToken = "lattice-lab-join-token" //nolint:gosec // the emulation's, in-process only

// resolver turns a Topology into a Plan, reporting every problem.
type resolver struct {
	t   *Topology
	src Source
	c   *strictyaml.Collector
	p   *Plan

	names    map[string]decl // every name in the topology's one namespace
	clashed  map[string]bool // names declared twice: the second is skipped
	nets     map[string]*netInfo
	attaches []*attach // every interface, in declaration order

	pendingServices []*pendingService
	pendingNodes    []*pendingNode
	bindings        []binding
	explicit        bool // explicit routers exist: reachability is the user's
	// kernel are the implicit hosts that must be network namespaces: those
	// of gvisor sandboxes.
	kernel map[string]bool
	// gvisorOn maps a declared host to the gvisor sandbox on it.
	gvisorOn map[string]string
}

// decl is where a name was declared.
type decl struct {
	kind string // "network", "router", "host", "service", "node"
	path string
}

// netInfo is a network being resolved.
type netInfo struct {
	decl   *Network
	path   string
	prefix netip.Prefix // invalid if the file's was; IPv6 on an IPv6-only network
	// prefix6 is a dual-stack network's IPv6 prefix (see ipv6.go); invalid
	// on single-stack networks.
	prefix6 netip.Prefix
	parent  string
	broken  bool       // its uplink is wrong: reachability is not judged
	gw      netip.Addr // the gateway router's address here
	gwName  string
	nat     bool
	used    map[netip.Addr]string // address → its holder, for messages
	cursor  netip.Addr
	members []*attach
}

// attach is one interface of a host or router being resolved.
type attach struct {
	owner   string // host or router name
	router  bool
	net     string
	addr    netip.Addr // zero until allocated
	aliases []netip.Addr
	link    *Link
	mtu     int
	ifName  string
	path    string // where the attachment was declared
	holder  string // for messages: "node alice", "gateway home-nat"
	routes  []fabric.Route
}

func (r *resolver) errorf(path, hint, format string, args ...any) {
	r.c.Add(&strictyaml.Error{
		File: r.src.File, Pos: r.src.at(path), Path: r.src.full(path),
		Msg: fmt.Sprintf(format, args...), Hint: hint,
	})
}

func resolve(t *Topology, src Source, c *strictyaml.Collector) *Plan {
	r := &resolver{
		t: t, src: src, c: c,
		p:       &Plan{Name: t.Name, Description: t.Description, Seed: t.Seed, Token: t.tokenOrDefault()},
		names:   map[string]decl{},
		clashed: map[string]bool{}, kernel: map[string]bool{}, gvisorOn: map[string]string{},
		nets: map[string]*netInfo{},
	}
	if t.Control != nil {
		r.p.TokenTTL, r.p.RelayTokenTTL = t.Control.TokenTTL, t.Control.RelayTokenTTL
	}
	if r.p.Seed == 0 {
		r.p.Seed = 1
	}
	r.explicit = len(t.Routers) > 0
	r.networks()
	r.claimNames()
	r.gateways()
	r.explicitRouters()
	r.hosts()
	r.services()
	r.nodes()
	r.allocate()
	r.build()
	r.overlaps()
	r.overlaps6()
	r.families()
	r.kernelIPv4()
	r.dnsRecords()
	r.reachability()
	return r.p
}

func (t *Topology) tokenOrDefault() string {
	if t.Control != nil && t.Control.Token != "" {
		return t.Control.Token
	}
	return DefaultToken
}

// claim records a name, reporting it if taken.
func (r *resolver) claim(name, kind, path string) {
	if name == "" {
		return
	}
	if prev, ok := r.names[name]; ok {
		r.clashed[name] = true
		p := r.src.at(prev.path)
		r.errorf(path, "networks, routers, hosts, services and nodes share one namespace",
			"name %q is already the %s declared at %d:%d", name, prev.kind, p.Line, p.Col)
		return
	}
	r.names[name] = decl{kind: kind, path: path}
}

// claimNames claims every name but networks' (claimed by networks).
func (r *resolver) claimNames() {
	t := r.t
	for _, n := range t.Networks {
		if info := r.nets[n.Name]; info != nil && info.gwName != "" {
			path := "networks." + n.Name
			if n.Router != "" {
				path += ".router"
			}
			r.claim(info.gwName, "router", path)
		}
	}
	for _, rt := range t.Routers {
		r.claim(rt.Name, "router", "routers."+rt.Name)
	}
	for _, h := range t.Hosts {
		r.claim(h.Name, "host", "hosts."+h.Name)
	}
	if t.Control != nil {
		r.claim("control", "service", "control")
	}
	for _, s := range t.Relays {
		r.claim(s.Name, "service", "relays."+s.Name)
	}
	for _, s := range t.STUN {
		r.claim(s.Name, "service", "stun."+s.Name)
	}
	for _, s := range t.DNS {
		r.claim(s.Name, "service", "dns."+s.Name)
	}
	for _, n := range t.Nodes {
		for _, name := range expand(n) {
			r.claim(name, "node", "nodes."+n.Name)
		}
	}
}

// expand returns the names of the nodes n declares.
func expand(n Node) []string {
	if n.Count <= 1 {
		return []string{n.Name}
	}
	width := len(fmt.Sprint(n.Count))
	out := make([]string, n.Count)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%0*d", n.Name, width, i+1)
	}
	return out
}

// networks checks networks and their uplink tree.
func (r *resolver) networks() {
	t := r.t
	names := make([]string, 0, len(t.Networks))
	for _, n := range t.Networks {
		names = append(names, n.Name)
	}
	for i := range t.Networks {
		n := &t.Networks[i]
		path := "networks." + n.Name
		r.claim(n.Name, "network", path)
		info := &netInfo{decl: n, path: path, used: map[netip.Addr]string{}}
		if _, dup := r.nets[n.Name]; dup {
			continue // reported by claim
		}
		r.nets[n.Name] = info
		if n.CIDR.IsValid() {
			info.prefix = n.CIDR
			if n.CIDR.Addr().Is6() {
				r.errorf(path+".cidr", "put IPv6 prefixes in cidr6", "cidr %v is not an IPv4 prefix", n.CIDR)
				info.prefix = netip.Prefix{}
			} else if n.CIDR.Bits() > 30 {
				r.errorf(path+".cidr", "use /30 or shorter", "%v leaves no room for hosts", n.CIDR)
				info.prefix = netip.Prefix{}
			}
		}
		r.network6(n, info, path)
		if n.Uplink == "" {
			for key, set := range map[string]bool{
				"nat": n.NAT != nil, "firewall": n.Firewall != nil, "gateway": n.Gateway.IsValid(),
				"public": n.Public.IsValid(), "router": n.Router != "", "link": n.Link != nil,
			} {
				if set {
					r.errorf(path+"."+key, "add uplink: NETWORK (the network the gateway router joins this one to)",
						"%s needs an uplink: it configures the gateway router between %s and its uplink", key, n.Name)
				}
			}
			continue
		}
		switch {
		case n.Uplink == n.Name:
			r.errorf(path+".uplink", "", "a network cannot be its own uplink")
			info.broken = true
		case !slices.Contains(names, n.Uplink):
			r.errorf(path+".uplink", unknownHint(n.Uplink, names, "networks"), "no network %q", n.Uplink)
			info.broken = true
		default:
			info.parent = n.Uplink
			info.nat = n.NAT != nil && n.NAT.Profile != firewall6Profile
			info.gwName = n.Router
			if info.gwName == "" {
				info.gwName = n.Name + "-gw"
				if info.nat {
					info.gwName = n.Name + "-nat"
				}
			}
		}
	}
	// Uplinks must form a tree: follow each chain; revisiting a network
	// is a loop, reported once at the first network on it.
	reported := map[string]bool{}
	for _, n := range t.Networks {
		seen := []string{n.Name}
		for cur := r.nets[n.Name]; cur != nil && cur.parent != ""; cur = r.nets[cur.parent] {
			if i := slices.Index(seen, cur.parent); i >= 0 {
				loop := append(seen[i:], cur.parent)
				slices.Sort(seen[i:])
				if !reported[seen[i]] {
					reported[seen[i]] = true
					r.errorf("networks."+n.Name+".uplink", "one network at the top has no uplink",
						"uplinks form a loop: %s", strings.Join(loop, " → "))
				}
				for _, name := range loop {
					if info := r.nets[name]; info != nil {
						info.parent, info.broken = "", true
					}
				}
				break
			}
			seen = append(seen, cur.parent)
		}
	}
	for _, n := range t.Networks {
		info := r.nets[n.Name]
		if info == nil || info.parent == "" || !info.prefix.IsValid() {
			continue
		}
		info.gw = n.Gateway
		if !info.gw.IsValid() {
			info.gw = info.prefix.Addr().Next()
		}
	}
}

// unknownHint suggests the closest of names, or lists them.
func unknownHint(name string, names []string, what string) string {
	if s := strictyaml.Suggest(name, names); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	if len(names) == 0 {
		return "there are no " + what
	}
	if len(names) > 12 {
		names = append(names[:12:12], "…")
	}
	return what + ": " + strings.Join(names, ", ")
}

// gateways adds each uplinked network's gateway router's attachments.
func (r *resolver) gateways() {
	for _, n := range r.t.Networks {
		info := r.nets[n.Name]
		if info == nil || info.parent == "" {
			continue
		}
		path := "networks." + n.Name
		holder := "gateway " + info.gwName
		gwPath := path
		if n.Gateway.IsValid() {
			gwPath += ".gateway"
		}
		r.attaches = append(r.attaches,
			&attach{owner: info.gwName, router: true, net: n.Name, addr: info.gw, ifName: "lan", path: gwPath, holder: holder},
			&attach{owner: info.gwName, router: true, net: info.parent, addr: n.Public, ifName: "wan", path: path + ".public", holder: holder, link: n.Link})
	}
}

// explicitRouters adds explicit routers' attachments.
func (r *resolver) explicitRouters() {
	for _, rt := range r.t.Routers {
		path := "routers." + rt.Name
		if len(rt.Interfaces) < 2 {
			r.errorf(path+".interfaces", "", "a router needs at least two interfaces, got %d", len(rt.Interfaces))
		}
		for i, ifc := range rt.Interfaces {
			r.attaches = append(r.attaches, &attach{owner: rt.Name, router: true, net: ifc.Network, addr: ifc.Addr,
				aliases: ifc.Aliases, link: ifc.Link, mtu: ifc.MTU, ifName: fmt.Sprintf("eth%d", i),
				path: fmt.Sprintf("%s.interfaces[%d]", path, i+1), holder: "router " + rt.Name})
		}
	}
}

// hosts adds explicit hosts' attachments.
func (r *resolver) hosts() {
	for _, h := range r.t.Hosts {
		path := "hosts." + h.Name
		if h.Kind == "netns" {
			if len(h.Routes) > 0 {
				r.errorf(path+".routes", "give it a gateway instead", "a netns host has a default route only")
			}
		}
		switch {
		case h.Network != "" && len(h.Interfaces) > 0:
			r.errorf(path+".interfaces", "use network (one interface) or interfaces (several), not both", "both network and interfaces")
		case h.Network == "" && len(h.Interfaces) == 0:
			r.errorf(path, "add network: NAME, or interfaces: [{network: NAME}]", "host %s is attached to no network", h.Name)
		case h.Kind == "netns" && len(h.Interfaces) > 1:
			r.errorf(path+".interfaces", "use network: NAME", "a netns host has one interface (its TUN into the fabric), not %d", len(h.Interfaces))
		case h.Network != "":
			r.placed(h.Name, "host "+h.Name, path, h.Placement)
		default:
			if h.Addr.IsValid() || len(h.Aliases) > 0 || h.Link != nil {
				r.errorf(path, "with interfaces, give addr, aliases and link per interface", "addr, aliases and link belong to an interface")
			}
			for i, ifc := range h.Interfaces {
				r.attaches = append(r.attaches, &attach{owner: h.Name, net: ifc.Network, addr: ifc.Addr, aliases: ifc.Aliases,
					link: ifc.Link, mtu: ifc.MTU, ifName: fmt.Sprintf("eth%d", i),
					path: fmt.Sprintf("%s.interfaces[%d]", path, i+1), holder: "host " + h.Name})
			}
		}
	}
}

// placed adds the one interface of a host placed by a Placement.
func (r *resolver) placed(owner, holder, path string, pl Placement) *attach {
	a := &attach{owner: owner, net: pl.Network, addr: pl.Addr, aliases: pl.Aliases, link: pl.Link,
		ifName: "eth0", path: path, holder: holder}
	r.attaches = append(r.attaches, a)
	return a
}
