package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/policy"
)

// Default ports.
const (
	DefaultNATSPort  = 4222
	DefaultRelayPort = 443
	DefaultSTUNPort  = 3478
	DefaultNodePort  = 51820
	DefaultDNSPort   = 53
)

// pendingService is a service waiting for its host's addresses.
type pendingService struct {
	name, kind, path string
	host             string
	att              *attach    // its own host's interface, or nil
	addr             netip.Addr // listen address asked for on a declared host
	port, httpPort   uint16
	alternate        netip.Addr
	stun             bool
	dns64            netip.Prefix
}

// pendingNode is a node waiting for its host's addresses.
type pendingNode struct {
	PlanNode
	path  string
	att   *attach
	roams []string // hosts on the networks it roams
}

// services places control, NATS, relays and STUN servers.
func (r *resolver) services() {
	t := r.t
	if t.Control != nil {
		r.service(&pendingService{name: "control", kind: "control", path: "control", port: orPort(t.Control.Port, DefaultNATSPort), httpPort: t.Control.HTTPPort}, t.Control.Service)
	}
	for _, s := range t.Relays {
		r.service(&pendingService{name: s.Name, kind: "relay", path: "relays." + s.Name, port: orPort(s.Port, DefaultRelayPort)}, s.Service)
	}
	for _, s := range t.STUN {
		r.service(&pendingService{name: s.Name, kind: "stun", path: "stun." + s.Name, port: orPort(s.Port, DefaultSTUNPort),
			alternate: s.Alternate, stun: true}, s.Service)
		if s.Alternate.IsValid() && s.Port == 65535 {
			r.errorf("stun."+s.Name+".port", "", "with alternate the server also uses port+1, which does not exist")
		}
	}
	for _, s := range t.DNS {
		r.service(&pendingService{name: s.Name, kind: "dns", path: "dns." + s.Name, port: orPort(s.Port, DefaultDNSPort),
			dns64: r.dns64(s)}, s.Service)
	}
}

func orPort(p, def uint16) uint16 {
	if p == 0 {
		return def
	}
	return p
}

// service records where a service runs.
func (r *resolver) service(ps *pendingService, sv Service) {
	switch {
	case sv.Host != "" && sv.Network != "":
		r.errorf(ps.path+".network", "host runs it on a declared host; network gives it a host of its own", "both host and network")
	case sv.Host != "":
		if !r.isHost(sv.Host) {
			r.errorf(ps.path+".host", unknownHint(sv.Host, r.hostNames(), "hosts"), "no host %q", sv.Host)
		}
		if len(sv.Aliases) > 0 || sv.Link != nil {
			r.errorf(ps.path, "set aliases and link on the host", "aliases and link belong to the host, not a service on it")
		}
		ps.host, ps.addr = sv.Host, sv.Addr
	case sv.Network != "":
		ps.host = ps.name
		ps.att = r.placed(ps.name, ps.kind+" "+ps.name, ps.path, sv.Placement)
	default:
		r.errorf(ps.path, "add host: NAME (a declared host) or network: NAME (a host of its own)", "%s %s runs nowhere", ps.kind, ps.name)
		return
	}
	r.pendingServices = append(r.pendingServices, ps)
}

func (r *resolver) isHost(name string) bool {
	return slices.ContainsFunc(r.t.Hosts, func(h Host) bool { return h.Name == name })
}

func (r *resolver) netNames() []string {
	var out []string
	for _, n := range r.t.Networks {
		out = append(out, n.Name)
	}
	return out
}

func (r *resolver) hostNames() []string {
	var out []string
	for _, h := range r.t.Hosts {
		out = append(out, h.Name)
	}
	return out
}

// nodes expands and places the nodes.
func (r *resolver) nodes() {
	t := r.t
	if len(t.Nodes) > 0 && t.Control == nil {
		r.errorf("nodes", "add control: {host: NAME} or control: {network: NAME}", "nodes need a control service to register with")
	}
	for _, n := range t.Nodes {
		path := "nodes." + n.Name
		switch {
		case n.Host != "" && n.Network != "":
			r.errorf(path+".network", "host runs it on a declared host; network gives it a host of its own", "both host and network")
			continue
		case n.Host == "" && n.Network == "":
			r.errorf(path, "add network: NAME (a host of its own) or host: NAME (a declared host)", "node %s runs nowhere", n.Name)
			continue
		case n.Host != "":
			if !r.isHost(n.Host) {
				r.errorf(path+".host", unknownHint(n.Host, r.hostNames(), "hosts"), "no host %q", n.Host)
			}
			if n.Count > 1 {
				r.errorf(path+".count", "use network: NAME so each node gets a host of its own", "count needs a host per node, not host %s", n.Host)
				continue
			}
			if n.Addr.IsValid() || len(n.Aliases) > 0 || n.Link != nil {
				r.errorf(path, "set addr, aliases and link on the host", "addr, aliases and link belong to the host, not a node on it")
			}
		case n.Count > 1 && n.Addr.IsValid():
			r.errorf(path+".addr", "omit addr: each node gets the next free address", "each of the %d nodes needs an address of its own", n.Count)
			n.Addr = netip.Addr{}
		}
		ice := mergeICE(r.t.Defaults.ICE, n.ICE)
		if ice.RetryMin > 0 && ice.RetryMax > 0 && ice.RetryMin > ice.RetryMax {
			r.errorf(path+".ice", "", "retry_min %v is longer than retry_max %v", ice.RetryMin, ice.RetryMax)
		}
		transport := n.RelayTransport
		if transport == "" {
			transport = t.Defaults.RelayTransport
		}
		if transport == "" {
			transport = "tcp"
		}
		sb := r.sandbox(path, n.Sandbox)
		if sb != nil && n.MTU != 0 {
			r.errorf(path+".mtu", "leave mtu out: a sandbox's overlay has its driver's MTU", "mtu is for regular nodes, not sandboxes")
		}
		gvisor := sb != nil && sb.Mode == "gvisor"
		if gvisor {
			r.gvisorPlacement(path, n)
			n.Roams = nil
		}
		link := n.Link
		if link == nil && n.Host == "" {
			link = t.Defaults.Link
		}
		if len(n.Roams) > 0 && (n.Host != "" || n.Count > 1) {
			r.errorf(path+".roams", "give the node network: NAME and no count", "only a single node on a host of its own can roam")
			n.Roams = nil
		}
		for i, net := range n.Roams {
			rp := fmt.Sprintf("%s.roams[%d]", path, i+1)
			switch {
			case net == n.Network || slices.Contains(n.Roams[:i], net):
				r.errorf(rp, "", "%s is listed twice", net)
			case r.nets[net] == nil:
				r.errorf(rp, unknownHint(net, r.netNames(), "networks"), "no network %q", net)
			default:
				r.claim(n.Name+"-"+net, "host", rp)
			}
		}
		for _, name := range expand(n) {
			if r.clashed[name] && r.names[name].path != path {
				continue // the second of two with one name
			}
			pn := &pendingNode{path: path, PlanNode: PlanNode{
				Name: name, Group: n.Name, Host: n.Host, Sandbox: sb,
				Start: n.Start == nil || *n.Start, ListenPort: orPort(n.ListenPort, DefaultNodePort),
				RelayTransport: transport, ICE: ice, MTU: n.MTU,
			}}
			if n.Host == "" {
				pn.Host = name
				if gvisor {
					r.kernel[name] = true
				}
				pl := n.Placement
				pl.Link = link
				pn.att = r.placed(name, "node "+name, path, pl)
				for i, net := range n.Roams {
					if r.nets[net] != nil && net != n.Network {
						host := name + "-" + net
						pn.roams = append(pn.roams, host)
						r.placed(host, "node "+name+" (roaming)", fmt.Sprintf("%s.roams[%d]", path, i+1), Placement{Network: net, Link: link})
					}
				}
			}
			r.pendingNodes = append(r.pendingNodes, pn)
		}
	}
}

// mergeICE applies a node's ICE settings over the defaults.
func mergeICE(layers ...*ICE) ICESettings {
	var s ICESettings
	for _, l := range layers {
		if l == nil {
			continue
		}
		for dst, src := range map[*time.Duration]time.Duration{
			&s.AttemptTimeout: l.AttemptTimeout, &s.RetryMin: l.RetryMin, &s.RetryMax: l.RetryMax, &s.DeadAfter: l.DeadAfter,
			&s.IdleTimeout: l.IdleTimeout,
		} {
			if src != 0 {
				*dst = src
			}
		}
		if l.RelayOnly != nil {
			s.RelayOnly = *l.RelayOnly
		}
		if l.Lazy != nil {
			s.Lazy = *l.Lazy
		}
		if l.AlwaysDirect != nil {
			s.AlwaysDirect = l.AlwaysDirect
		}
	}
	return s
}

// gvisorPlacement checks where a gvisor sandbox runs: in a network
// namespace of its own (its pod), where phase 1 creates wg0.
func (r *resolver) gvisorPlacement(path string, n Node) {
	if len(n.Roams) > 0 {
		r.errorf(path+".roams", "use a regular node or a pod sandbox to roam", "a gvisor sandbox cannot roam: its pod is a kernel namespace on one network")
	}
	if n.Host == "" {
		return
	}
	i := slices.IndexFunc(r.t.Hosts, func(h Host) bool { return h.Name == n.Host })
	switch {
	case i < 0:
		return // reported as an unknown host
	case r.t.Hosts[i].Kind != "netns":
		r.errorf(path+".host", "set kind: netns on host "+n.Host+", or give the node network: NAME (a namespace of its own)",
			"a gvisor sandbox runs in a kernel network namespace, and host %s is in-process", n.Host)
	case r.gvisorOn[n.Host] != "":
		r.errorf(path+".host", "give each gvisor sandbox a host of its own", "host %s already runs gvisor sandbox %s (each creates wg0 there)", n.Host, r.gvisorOn[n.Host])
	default:
		r.gvisorOn[n.Host] = n.Name
	}
}

// sandbox checks a node's sandbox options and resolves the policy path.
func (r *resolver) sandbox(path string, sb *Sandbox) *Sandbox {
	if sb == nil {
		return nil
	}
	out := *sb
	if out.Mode == "gvisor" {
		// The agent's own sockets route into wg0: no proxies, no forwards.
		if out.SOCKS5 != "" && out.SOCKS5 != "off" {
			r.errorf(path+".sandbox.socks5", "omit it: the agent's sockets route into wg0 by themselves", "gvisor mode has no SOCKS5 proxy")
		}
		if out.HTTPProxy != "" && out.HTTPProxy != "off" {
			r.errorf(path+".sandbox.http_proxy", "omit it: the agent's sockets route into wg0 by themselves", "gvisor mode has no HTTP proxy")
		}
		if len(out.Forwards) > 0 {
			r.errorf(path+".sandbox.forwards", "omit them: peers reach the agent's listeners on its overlay address", "gvisor mode has no inbound forwards")
		}
		out.SOCKS5, out.HTTPProxy, out.Forwards = "off", "", nil
	}
	if out.SOCKS5 == "" {
		out.SOCKS5 = "127.0.0.1:1080"
	}
	for key, addr := range map[string]string{"socks5": out.SOCKS5, "http_proxy": out.HTTPProxy} {
		if addr == "" || addr == "off" {
			continue
		}
		if _, err := netip.ParseAddrPort(addr); err != nil {
			r.errorf(path+".sandbox."+key, `write ADDRESS:PORT, e.g. 127.0.0.1:1080, or "off"`, "bad listen address %q", addr)
		}
	}
	if out.EgressPolicy != "" {
		p := out.EgressPolicy
		if !filepath.IsAbs(p) {
			p = filepath.Join(r.src.dir(), p)
		}
		out.EgressPolicy = p
		if _, err := os.Stat(p); err != nil {
			r.errorf(path+".sandbox.egress_policy", "the path is relative to the topology file", "%v", err)
		} else if _, err := policy.Load(p); err != nil {
			r.policyErrors(path+".sandbox.egress_policy", err)
		}
	}
	for i, f := range out.Forwards {
		if _, _, err := parseForward(f); err != "" && f != "" {
			r.errorf(fmt.Sprintf("%s.sandbox.forwards[%d]", path, i+1), "write PORT=HOST:PORT or PORT", "%s", err)
		}
	}
	return &out
}

// parseForward checks a PORT[=HOST:PORT] forward.
func parseForward(s string) (uint16, string, string) {
	port, target, hasTarget := strings.Cut(s, "=")
	p, ok := strictyaml.ParsePort(port)
	if !ok {
		return 0, "", fmt.Sprintf("bad port in %q", s)
	}
	if !hasTarget {
		return p, fmt.Sprintf("127.0.0.1:%d", p), ""
	}
	ap, err := netip.ParseAddrPort(target)
	if err != nil || ap.Port() == 0 {
		return 0, "", fmt.Sprintf("bad target in %q", s)
	}
	return p, target, ""
}

// policyErrors reports an egress policy's problems at their own positions
// in the policy file, and once at the topology's reference to it.
func (r *resolver) policyErrors(path string, err error) {
	var found []*policy.PosError
	var walk func(error)
	walk = func(e error) {
		var pe *policy.PosError
		switch x := e.(type) { //nolint:errorlint // walks the wrapping tree itself, one level at a time
		case interface{ Unwrap() []error }:
			for _, inner := range x.Unwrap() {
				walk(inner)
			}
			return
		case interface{ Unwrap() error }:
			if errors.As(e, &pe) && pe == e { //nolint:errorlint // this level itself, not one it wraps
				found = append(found, pe)
				return
			}
			walk(x.Unwrap())
			return
		}
		if errors.As(e, &pe) {
			found = append(found, pe)
		}
	}
	walk(err)
	if len(found) == 0 {
		r.errorf(path, "", "%v", err)
		return
	}
	r.errorf(path, "", "the egress policy has %d problem(s), listed under its own name", len(found))
	for _, pe := range found {
		r.c.Add(&strictyaml.Error{File: pe.File, Pos: strictyaml.Pos{Line: pe.Line, Col: pe.Col}, Msg: pe.Msg})
	}
}
