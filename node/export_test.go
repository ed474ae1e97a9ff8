package node

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
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
func (n *Node) SetPeerForTest(info controlapi.Peer) {
	kind := revRecord
	if info.Offline {
		kind = revPresence
	}
	n.setPeer(info, kind)
}

// PeerEventForTest applies ev as it came from control.
func (n *Node) PeerEventForTest(ev controlapi.PeerEvent) { n.onPeerEvent(ev) }

// ReconcileForTest brings the peers to l as a peer list asked for now
// would, applying what meanwhile does (events) between the ask and the
// answer.
func (n *Node) ReconcileForTest(l controlapi.PeerList, meanwhile func()) {
	mark := n.beginList()
	defer n.endList()
	if meanwhile != nil {
		meanwhile()
	}
	n.reconcile(l, mark)
}

// TrimmedCount is how many peers the TUN wrapper counts as trimmed.
func (n *Node) TrimmedCount() int32 { return n.tun.trimmed.Load() }

// RestoreForTest runs the restore hook of the peer nodeID has now, as
// the first packet to or from a trimmed peer does; it returns the hook's
// Path so that a test can run it again after the peer changed.
func (n *Node) RestoreForTest(nodeID string) func() {
	n.mu.Lock()
	p := n.peers[nodeID]
	n.mu.Unlock()
	if p == nil {
		return func() {}
	}
	return p.path.restoreWG
}

// WireGuardKeepalive is the persistent keepalive WireGuard's
// configuration holds for pk, or -1 if it does not hold pk.
func (n *Node) WireGuardKeepalive(pk key.Public) int {
	conf, err := n.dev.IpcGet()
	if err != nil {
		return -1
	}
	_, rest, ok := strings.Cut(conf, "public_key="+pk.Hex()+"\n")
	if !ok {
		return -1
	}
	if next := strings.Index(rest, "public_key="); next >= 0 {
		rest = rest[:next]
	}
	for line := range strings.Lines(rest) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "persistent_keepalive_interval="); ok {
			k, _ := strconv.Atoi(v)
			return k
		}
	}
	return 0
}

// TrimForTest trims the peer nodeID has now as its actor does once the
// peer is found idle at since; false: traffic since kept it.
func (n *Node) TrimForTest(nodeID string, since time.Time) bool {
	n.mu.Lock()
	p := n.peers[nodeID]
	n.mu.Unlock()
	return n.trimWG(p, since.UnixNano())
}

// NoteInitiationForTest records a handshake initiation to or from the
// peer nodeID has now at at, as the Bind does.
func (n *Node) NoteInitiationForTest(nodeID string, at time.Time) {
	n.mu.Lock()
	p := n.peers[nodeID]
	n.mu.Unlock()
	p.path.initAt.Store(at.UnixNano())
}

// RemovePeerForTest applies control's removal of info.
func (n *Node) RemovePeerForTest(info controlapi.Peer) { n.removePeer(info) }

// OnOnlineAgainForTest runs f as the TUN marks an offline peer's address
// online again, before its packets pass.
func (n *Node) OnOnlineAgainForTest(f func(netip.Addr)) { n.tun.onlineHook = f }

// PeerEpochForTest is the registration epoch the node names in signals to
// the peer id (0: no such running peer).
func (n *Node) PeerEpochForTest(id string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.peers[id]; p != nil {
		return p.epoch.Load()
	}
	return 0
}

// LearnPeerEpochForTest teaches the running peer id the epoch e, as a
// signal from it naming e does.
func (n *Node) LearnPeerEpochForTest(id string, e uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.peers[id]; p != nil {
		p.learnEpoch(e)
	}
}

// LeadsOnMakingForTest reports whether a path the Bind makes now for pk,
// as WireGuard's configuration does, leads; the path is then forgotten.
func (n *Node) LeadsOnMakingForTest(pk key.Public) bool {
	p := n.bind.peer(pk, true)
	defer n.bind.RemovePeer(pk)
	return p.leads.Load()
}
