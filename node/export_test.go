package node

import (
	"net/netip"
	"strings"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// AddPeerForTest adds a peer as control's announcement of it would
// (BenchmarkIdlePeers: peers without nodes behind them).
func (n *Node) AddPeerForTest(info controlapi.Peer) { n.addPeer(info) }

// ReregisterForTest runs what the node does when control refuses its
// session: register again with backoff until it works or the node closes.
func (n *Node) ReregisterForTest() { n.reregister() }

// PeerCount is how many online peers the node runs.
func (n *Node) PeerCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.peers)
}

// WireGuardPeers is how many peers WireGuard's configuration holds.
func (n *Node) WireGuardPeers() int {
	conf, err := n.dev.IpcGet()
	if err != nil {
		return -1
	}
	return strings.Count(conf, "public_key=")
}

// WireGuardEndpointIPs are the direct addresses WireGuard's endpoints
// (endpoint= in its configuration) send to, one per peer on a direct path.
func (n *Node) WireGuardEndpointIPs() []netip.Addr {
	conf, err := n.dev.IpcGet()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.Lines(conf) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint=")
		if !ok {
			continue
		}
		ep, err := n.bind.ParseEndpoint(v)
		if err != nil {
			continue
		}
		if ip := ep.DstIP(); ip.IsValid() {
			out = append(out, ip)
		}
	}
	return out
}

// LastDirectReceives is, per peer, when the Bind last matched a packet
// from the peer's direct address (zero if never).
func (n *Node) LastDirectReceives() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []time.Time
	for _, p := range n.peers {
		out = append(out, p.path.LastDirectReceive())
	}
	return out
}

// PeerMTUCounts returns what the per-peer MTU did: SYNs clamped, packets
// answered as too big, packets fragmented.
func (n *Node) PeerMTUCounts() (clamped, tooBig, fragmented uint64) {
	m := &n.tun.mtu
	return m.clamped.Load(), m.tooBig.Load(), m.fragmented.Load()
}

// SetPeerForTest applies a peer event's peer as control's announcement
// of it would: online (added or updated) or offline.
func (n *Node) SetPeerForTest(info controlapi.Peer) { n.setPeer(info) }
