package runner

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// LiveInfo is what `lattice-lab inspect` shows of a running lab.
type LiveInfo struct {
	Topology string       `json:"topology"`
	PID      int          `json:"pid"`
	StateDir string       `json:"state_dir"`
	Socket   string       `json:"socket"`
	Up       time.Time    `json:"up"`
	Hosts    []LiveHost   `json:"hosts"`
	Routers  []LiveRouter `json:"routers"`
	Nodes    []LiveNode   `json:"nodes"`
	// Mesh is the running nodes' path matrix (D direct, R relay).
	Mesh string `json:"mesh"`
}

// LiveHost is one host of a live lab.
type LiveHost struct {
	Name       string          `json:"name"`
	Kind       string          `json:"kind"` // inprocess or netns
	Interfaces []LiveInterface `json:"interfaces"`
	Gateway    netip.Addr      `json:"gateway,omitzero"`
	// Netns and NetnsPath name a kernel host's network namespace.
	Netns     string   `json:"netns,omitempty"`
	NetnsPath string   `json:"netns_path,omitempty"`
	Nodes     []string `json:"nodes,omitempty"`
	Services  []string `json:"services,omitempty"`
}

// LiveInterface is a host's or router's interface.
type LiveInterface struct {
	Name    string       `json:"name"`
	Network string       `json:"network"`
	Addrs   []netip.Addr `json:"addrs"`
	MTU     int          `json:"mtu"`
}

// LiveRouter is a router and, for a NAT, its live mappings.
type LiveRouter struct {
	Name       string          `json:"name"`
	NAT        string          `json:"nat,omitempty"` // the profile, "custom", or "" without NAT
	Interfaces []LiveInterface `json:"interfaces"`
	Mappings   []LiveMapping   `json:"mappings,omitempty"`
}

// LiveMapping is one NAT mapping.
type LiveMapping struct {
	Proto     string           `json:"proto"`
	Inside    netip.AddrPort   `json:"inside"`
	External  netip.AddrPort   `json:"external"`
	Remote    netip.AddrPort   `json:"remote,omitzero"`
	Peers     []netip.AddrPort `json:"peers,omitempty"`
	TCPState  string           `json:"tcp_state,omitempty"`
	Age       time.Duration    `json:"age_ns"`
	ExpiresIn time.Duration    `json:"expires_in_ns"`
}

// LiveNode is a node and its view of its peers.
type LiveNode struct {
	Name    string     `json:"name"`
	Host    string     `json:"host"`
	Running bool       `json:"running"`
	Overlay netip.Addr `json:"overlay,omitzero"`
	Paths   []LivePath `json:"paths,omitempty"`
}

// LivePath is a node's path to one peer.
type LivePath struct {
	Peer     string `json:"peer"`
	Path     string `json:"path"`
	Endpoint string `json:"endpoint,omitempty"`
	Online   bool   `json:"online"`
}

func liveIfaces(ifcs []*fabric.Interface) []LiveInterface {
	out := make([]LiveInterface, 0, len(ifcs))
	for _, ifc := range ifcs {
		out = append(out, LiveInterface{Name: ifc.Name(), Network: ifc.Network().Name(), Addrs: ifc.Addrs(), MTU: ifc.MTU()})
	}
	return out
}

// Info describes the lab as it runs now: hosts, routers with their NAT
// mappings, nodes with their paths.
func (l *Lab) Info() LiveInfo {
	info := LiveInfo{Topology: l.plan.Name, Up: l.start, Mesh: l.MeshTable()}
	on := map[string][]string{}
	for _, n := range l.plan.Nodes {
		on[n.Host] = append(on[n.Host], n.Name)
	}
	svc := map[string][]string{}
	if c := l.plan.Control; c != nil {
		svc[c.Host] = append(svc[c.Host], "control "+addrList(c.Addrs()))
	}
	for _, r := range l.plan.Relays {
		svc[r.Host] = append(svc[r.Host], "relay "+r.Name+" "+addrList(r.Addrs()))
	}
	for _, s := range l.plan.STUN {
		svc[s.Host] = append(svc[s.Host], "stun "+s.Name+" "+addrList(s.Addrs()))
	}
	for _, d := range l.plan.DNS {
		svc[d.Host] = append(svc[d.Host], "dns "+d.Name+" "+addrList(d.Addrs()))
	}
	for _, ph := range l.plan.Hosts {
		name := ph.Config.Name
		h := LiveHost{Name: name, Kind: ph.Kind, Gateway: ph.Config.Gateway, Nodes: on[name], Services: svc[name]}
		switch {
		case l.f.KernelHost(name) != nil:
			k := l.f.KernelHost(name)
			h.Interfaces = liveIfaces([]*fabric.Interface{k.Interface()})
			h.Netns, h.NetnsPath = k.Netns(), k.NetnsPath()
		case l.f.Host(name) != nil:
			h.Interfaces = liveIfaces(l.f.Host(name).FabricInterfaces())
		}
		info.Hosts = append(info.Hosts, h)
	}
	now := l.clock.Now()
	for _, pr := range l.plan.Routers {
		r := l.f.Router(pr.Config.Name)
		if r == nil {
			continue
		}
		lr := LiveRouter{Name: r.Name(), NAT: pr.Profile, Interfaces: liveIfaces(r.Interfaces())}
		for _, m := range routerMappings(r, now) {
			lr.Mappings = append(lr.Mappings, LiveMapping{Proto: strings.ToLower(m.Proto.String()), Inside: m.Inside,
				External: m.External, Remote: m.Remote, Peers: m.Peers, TCPState: m.TCPState,
				Age: now.Sub(m.Created), ExpiresIn: m.Expires.Sub(now)})
		}
		info.Routers = append(info.Routers, lr)
	}
	running := l.Running()
	for _, pn := range l.plan.Nodes {
		n := LiveNode{Name: pn.Name, Host: pn.Host, Running: slices.Contains(running, pn.Name)}
		if rn, err := l.node(pn.Name); err == nil {
			n.Overlay = rn.addr()
			for _, st := range rn.status() {
				n.Paths = append(n.Paths, LivePath{Peer: st.Peer.Name, Path: string(st.Path), Endpoint: st.Endpoint, Online: st.Online})
			}
		}
		info.Nodes = append(info.Nodes, n)
	}
	return info
}

// routerMappings are a router's live mappings: its NAT44's, or its
// NAT64's (inside endpoints IPv6, external ones the uplink's IPv4), or
// none.
func routerMappings(r *fabric.Router, now time.Time) []nat.MappingInfo {
	if n := r.NAT(); n != nil {
		return n.Mappings(now)
	}
	if n := r.NAT64(); n != nil {
		return n.Mappings(now)
	}
	return nil
}
