package node

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// PeerStatus is what `lattice status` shows for a peer. Its JSON shape
// is in statusjson.go.
type PeerStatus struct {
	Peer controlapi.Peer
	// Online: control says the peer is running. An offline peer has
	// Path PathOffline and no endpoint.
	Online                               bool
	Path                                 PathKind
	Endpoint                             string
	RTT                                  time.Duration // the direct path's, as ICE measures it
	LastHandshake                        time.Time     // WireGuard's last completed handshake
	TxDirect, TxRelay, RxDirect, RxRelay uint64
	History                              []PathEvent
	ICE                                  ICEReport
	// Why says, in words, why a relayed peer is relayed ("idle (lazy):
	// direct path negotiated on first traffic", "attempt timed out after
	// 10s: …, next in 8s"); empty on a direct path.
	Why string
	// MTU is the overlay MTU toward the peer now, and MTUReason why:
	// QUICRelayMTU while its packets go through a QUIC relay connection
	// (mtu.go), the interface's MTU otherwise; zero while offline.
	MTU       int
	MTUReason string
}

// ICEReport says what the last ICE attempt with a peer saw: the answer
// to "why is this peer relayed?".
type ICEReport struct {
	Session         uint64   `json:"session"`
	State           string   `json:"state"`
	LocalCandidates []string `json:"local_candidates"`
	// RemoteCandidates are the ones the peer signaled.
	RemoteCandidates []string `json:"remote_candidates"`
	// SelfCandidates are remote candidates that are our own socket's
	// address (a peer on another LAN with the same private address and
	// port); checks sent there would reach us, never the peer, so they
	// are not tried.
	SelfCandidates []string `json:"self_candidates"`
	// Pairs lists every candidate pair tried and its state.
	Pairs []string `json:"pairs"`
	Err   string   `json:"error"`
}

// Status returns every peer's status, sorted by name.
func (n *Node) Status() []PeerStatus {
	n.mu.Lock()
	peers := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	handshakes := n.handshakes()
	out := make([]PeerStatus, 0, len(peers))
	for _, p := range peers {
		st := p.status()
		st.Online = true
		st.LastHandshake = handshakes[st.Peer.PublicKey]
		st.MTU, st.MTUReason = n.peerMTU(st.Endpoint == "relay")
		out = append(out, st)
	}
	out = append(out, n.offlineStatus()...)
	slices.SortFunc(out, func(a, b PeerStatus) int { return strings.Compare(a.Peer.Name, b.Peer.Name) })
	return out
}

// Peers returns the peers control announced, sorted by name, offline ones
// included (Offline set): what Status returns without the paths, cheap
// enough to ask per connection.
func (n *Node) Peers() []controlapi.Peer {
	n.mu.Lock()
	peers := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		peers = append(peers, p)
	}
	out := make([]controlapi.Peer, 0, len(peers)+len(n.offline))
	for _, p := range n.offline {
		info := p.info
		info.Offline = true
		out = append(out, info)
	}
	n.mu.Unlock()
	for _, p := range peers {
		p.mu.Lock()
		out = append(out, p.info)
		p.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b controlapi.Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// offlineStatus is the status of every offline peer.
func (n *Node) offlineStatus() []PeerStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]PeerStatus, 0, len(n.offline))
	for _, p := range n.offline {
		out = append(out, PeerStatus{Peer: p.info, Path: PathOffline, History: append([]PathEvent(nil), p.history...),
			TxDirect: p.txDirect, TxRelay: p.txRelay, RxDirect: p.rxDirect, RxRelay: p.rxRelay})
	}
	return out
}

// handshakes reads each peer's last handshake from WireGuard.
func (n *Node) handshakes() map[key.Public]time.Time {
	out := map[key.Public]time.Time{}
	if n.dev == nil {
		return out
	}
	conf, err := n.dev.IpcGet()
	if err != nil {
		return out
	}
	var peer key.Public
	var sec int64
	for line := range strings.Lines(conf) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "public_key":
			if pk, err := key.ParsePublicHex(v); err == nil {
				peer = pk
			}
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ := strconv.ParseInt(v, 10, 64)
			if sec != 0 || nsec != 0 {
				out[peer] = time.Unix(sec, nsec)
			}
		}
	}
	return out
}

func (p *peer) status() PeerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PeerStatus{
		Peer: p.info, Path: p.kind, History: append([]PathEvent(nil), p.history...),
		TxDirect: p.path.TxDirect.Load(), TxRelay: p.path.TxRelay.Load(),
		RxDirect: p.path.RxDirect.Load(), RxRelay: p.path.RxRelay.Load(),
		Why: p.whyLocked(p.env.now()),
	}
	if r := p.report; r != nil {
		st.ICE = *r
		st.ICE.LocalCandidates = append([]string(nil), r.LocalCandidates...)
		st.ICE.RemoteCandidates = append([]string(nil), r.RemoteCandidates...)
	}
	if a, ok := p.path.Direct(); ok && !p.path.hedge.Load() {
		st.Endpoint = a.String()
		st.RTT = p.path.RTT()
	} else {
		st.Endpoint = "relay"
	}
	return st
}

// peerMTU is the overlay MTU toward a peer reached through the relay
// (relayed) or directly, and why.
func (n *Node) peerMTU(relayed bool) (int, string) {
	if !relayed {
		return n.cfg.MTU, mtuReasonDirect
	}
	t := ""
	if tr, ok := n.relay.(transportReporter); ok {
		t = tr.Transport()
	}
	switch {
	case t == transportQUIC && n.tun != nil:
		return min(n.cfg.MTU, QUICRelayMTU), mtuReasonQUIC
	case t == transportQUIC:
		return n.cfg.MTU, "relayed over QUIC; larger packets take the relay's stream (the WireGuard device has its own interface)"
	case t == "tcp":
		return n.cfg.MTU, mtuReasonTCP
	}
	return n.cfg.MTU, "relayed (relay reconnecting)"
}

// MuxStats returns the shared socket's counters.
func (n *Node) MuxStats() MuxStats { return n.mux.Stats() }
