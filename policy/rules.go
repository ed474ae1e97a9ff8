package policy

import "net/netip"

// Target kinds of a RuleView.
const (
	TargetPrefix   = "prefix"    // a CIDR or a single address
	TargetAny      = "any"       // every destination outside the overlay
	TargetPeer     = "peer"      // one overlay peer by name
	TargetAllPeers = "all-peers" // every overlay peer
)

// RuleView is one rule as an enforcer outside Decide (the pod's iptables
// in gvisor mode) needs it. A file rule listing several destinations is
// several RuleViews with the same Label's line.
type RuleView struct {
	Allow  bool
	Target string       // one of the Target constants
	Prefix netip.Prefix // TargetPrefix
	Peer   string       // TargetPeer
	Proto  Proto        // ProtoAny for every protocol
	// Ports are inclusive ranges; empty means every port.
	Ports [][2]uint16
	// NamesOverlay says a TargetPrefix lies within the overlay, so it
	// can match overlay peers.
	NamesOverlay bool
	// Label is what Decision.Rule says for it.
	Label string
}

// Rules returns the policy's rules in order.
func (p *Policy) Rules() []RuleView {
	if p == nil {
		return nil
	}
	out := make([]RuleView, 0, len(p.rules))
	for _, r := range p.rules {
		v := RuleView{Allow: r.allow, Prefix: r.prefix, Peer: r.peer, Proto: r.proto, NamesOverlay: r.namesOverlay, Label: r.decision.Rule}
		switch r.kind {
		case targetPrefix:
			v.Target = TargetPrefix
		case targetAny:
			v.Target = TargetAny
		case targetPeer:
			v.Target = TargetPeer
		case targetAllPeers:
			v.Target = TargetAllPeers
		}
		for _, pr := range r.ports {
			v.Ports = append(v.Ports, [2]uint16{pr.lo, pr.hi})
		}
		out = append(out, v)
	}
	return out
}

// AllowsMetadata reports whether the policy lets the metadata addresses
// through to its rules.
func (p *Policy) AllowsMetadata() bool { return p != nil && p.allowMetadata }

// DefaultAllows reports the default for destinations outside the overlay.
func (p *Policy) DefaultAllows() bool { return p != nil && p.defaultAllow }

// MetadataAddrs returns the cloud metadata addresses IsMetadata knows.
func MetadataAddrs() []netip.Addr { return append([]netip.Addr(nil), metadata[:]...) }
