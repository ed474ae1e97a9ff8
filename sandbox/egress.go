package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/policy"
	"github.com/latticelab/lattice/proxy"
)

// Errors.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("sandbox: closed")
	// ErrDenied is wrapped by every egress refusal; it is proxy.ErrDenied,
	// so the proxies answer it as "not allowed by ruleset".
	ErrDenied = proxy.ErrDenied
	// ErrAuditFailed is wrapped when an event could not be written to the
	// audit log; the flow it was about is refused (fail-closed).
	ErrAuditFailed = errors.New("sandbox: audit log write failed")
)

// DeniedError says which destination the policy refused and by which rule.
type DeniedError struct {
	Network string
	Dest    string
	Rule    string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("egress to %s/%s denied by %s", e.Dest, e.Network, e.Rule)
}

// Is makes errors.Is(err, ErrDenied) hold.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

type nodePeer struct {
	name string
	addr netip.Addr
}

// egress decides and makes the agent's outbound connections.
type egress struct {
	policy func() *policy.Policy
	// record audits; an error means the event was not recorded and the
	// flow must not proceed (fail-closed).
	record func(audit.Event) error
	peers  func() []nodePeer
	// isHost says an address is one of the host's own; nil for none.
	isHost func(netip.Addr) bool

	// Set once the node is up, before any proxy serves.
	overlay  netip.Prefix
	stackNet netx.Network
	host     netx.Network
}

// Resolution is what a host name means to the sandbox.
type Resolution struct {
	Addr netip.Addr `json:"addr"`
	// Peer is the overlay peer's name when Addr is one.
	Peer string `json:"peer,omitempty"`
	// Overlay says whether Addr is in the overlay (reached through the
	// netstack) rather than through the host network.
	Overlay bool `json:"overlay"`
}

// peerSuffix may end a peer's name, as in web-1.lattice.
const peerSuffix = ".lattice"

// resolve maps host to an address: an IP literal, a peer's name (with or
// without ".lattice"), or, through the host's resolver, any other name.
func (e *egress) resolve(ctx context.Context, host string) (Resolution, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap().WithZone("")
		r := Resolution{Addr: a, Overlay: e.overlay.Contains(a)}
		if r.Overlay {
			r.Peer = e.peerName(a)
		}
		return r, nil
	}
	name := strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), peerSuffix)
	for _, p := range e.peers() {
		if p.name == name {
			return Resolution{Addr: p.addr, Peer: p.name, Overlay: true}, nil
		}
	}
	if strings.HasSuffix(strings.ToLower(host), peerSuffix) {
		return Resolution{}, fmt.Errorf("%w: no peer named %q", proxy.ErrNoHost, name)
	}
	if e.host != netx.OS {
		return Resolution{}, fmt.Errorf("%w: %q is no peer and this network has no resolver", proxy.ErrNoHost, host)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return Resolution{}, fmt.Errorf("%w: %q: %w", proxy.ErrNoHost, host, err)
	}
	a := addrs[0].Unmap()
	return Resolution{Addr: a, Overlay: e.overlay.Contains(a)}, nil
}

func (e *egress) peerName(a netip.Addr) string {
	for _, p := range e.peers() {
		if p.addr == a {
			return p.name
		}
	}
	return ""
}

// decide asks the policy about one flow and audits the answer.
func (e *egress) decide(network string, dst netip.AddrPort, r Resolution) error {
	proto := policy.TCP
	switch network {
	case "udp":
		proto = policy.UDP
	case "icmp":
		proto = policy.ICMP
	}
	host := !r.Overlay && e.isHost != nil && e.isHost(dst.Addr().Unmap())
	dec := e.policy().Decide(policy.Dest{Addr: dst.Addr(), Port: dst.Port(), Proto: proto, Overlay: r.Overlay, Peer: r.Peer, Host: host})
	ev := audit.Event{Kind: "egress", Proto: network, Dst: dst.String(), Rule: dec.Rule, Decision: "allow"}
	if r.Peer != "" {
		ev.Detail = "peer " + r.Peer
	}
	if !dec.Allow {
		ev.Decision = "deny"
	}
	if err := e.record(ev); err != nil {
		// Unaudited, a flow does not happen.
		return &DeniedError{Network: network, Dest: dst.String(), Rule: ruleAuditFailed}
	}
	if !dec.Allow {
		return &DeniedError{Network: network, Dest: dst.String(), Rule: dec.Rule}
	}
	return nil
}

// ruleAuditFailed is the rule a flow is denied by when its audit event
// could not be written.
const ruleAuditFailed = "audit log unavailable (fail-closed; see --audit-fail-open)"

// stack is the netstack's egress hook: every flow the overlay stack opens.
func (e *egress) stack(network string, dst netip.AddrPort) error {
	if dst.Addr().IsLoopback() {
		return nil // the stack's own loopback never leaves it
	}
	r := Resolution{Addr: dst.Addr(), Overlay: e.overlay.Contains(dst.Addr())}
	if r.Overlay {
		r.Peer = e.peerName(dst.Addr())
	}
	return e.decide(network, dst, r)
}

// dial connects on behalf of the agent. Names are resolved first and the
// address dialled, so the decision and the connection agree.
func (e *egress) dial(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		network = "tcp"
	case "udp", "udp4", "udp6":
		network = "udp"
	default:
		return nil, fmt.Errorf("sandbox: dial: network %q: want tcp or udp", network)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %q: bad port", address)
	}
	r, err := e.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("sandbox: dial %s: %w", address, err)
	}
	dst := netip.AddrPortFrom(r.Addr, uint16(port))
	if r.Overlay {
		// The netstack's egress hook decides and audits.
		return e.stackNet.Dial(ctx, network, dst.String())
	}
	if err := e.decide(network, dst, r); err != nil {
		return nil, err
	}
	return e.host.Dial(ctx, network, dst.String())
}
