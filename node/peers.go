package node

// How the node adds, updates and removes its peers as control reports
// them.

import (
	"fmt"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// setPeer brings the peer to what control says: online or offline.
// kind says whether info is the peer's record (revRecord) or news of its
// presence (revPresence), for the revision it carries (peerrev.go).
func (n *Node) setPeer(info controlapi.Peer, kind revKind) {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	n.setPeerLocked(info, kind)
}

// setPeerLocked is setPeer under peerMu; it reports whether info was
// applied (not from an earlier registration, nor older than what was).
func (n *Node) setPeerLocked(info controlapi.Peer, kind revKind) bool {
	if n.outdated(info, kind, "an update") {
		return false
	}
	n.revs.applied(info, kind, time.Now())
	if info.Offline {
		n.peerOffline(info)
	} else {
		n.addPeer(info)
	}
	return true
}

// outdated reports whether info, applied as kind (what names it for the
// log), is older than what the node holds of the peer, and logs it so:
// from a registry made again since, or by registry revision where the
// node holds one of the peer (peerrev.go), or else by epoch (an earlier
// registration, earlierLife). Under peerMu.
func (n *Node) outdated(info controlapi.Peer, kind revKind, what string) bool {
	if n.revs.registry(info.Reg) {
		n.log.Debug("peer event from a registry made again since ignored", "peer", info.Name, "event", what, "reg", info.Reg, "current", n.revs.reg)
		return true
	}
	if !n.revs.judges(info.NodeID, info.Rev) && n.earlierLife(info, what) {
		return true
	}
	return n.staleRev(info, kind)
}

// staleRev reports whether info is older than what the node applied of
// the peer (revBook.stale), and logs it so. Under peerMu.
func (n *Node) staleRev(info controlapi.Peer, kind revKind) bool {
	stale, known := n.revs.stale(info, kind)
	if stale {
		n.log.Debug("peer event older than what was applied ignored", "peer", info.Name, "kind", kind, "rev", info.Rev, "known", known)
	}
	return stale
}

func (n *Node) addPeer(info controlapi.Peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || info.NodeID == n.id.NodeID {
		return
	}
	back := n.offline[info.NodeID]
	if back != nil {
		delete(n.offline, info.NodeID)
		// Its packets stay answered as unreachable until WireGuard holds
		// the peer: one let through before would be dropped by WireGuard
		// unseen (no peer for its address), and a TCP connect to a peer
		// coming back waited out its SYN's retransmission, 1 s.
		defer n.tun.setOffline(back.info.Address.Addr(), false)
		n.log.Info("peer online", "peer", info.Name)
	}
	if old := n.peers[info.NodeID]; old != nil {
		if sameButEpoch(old.info, info) && info.Epoch >= old.recordEpoch.Load() {
			old.recordEpoch.Store(info.Epoch)
			old.learnEpoch(info.Epoch) // a re-registration: only the epoch moved
			return
		}
		// (A record of an earlier epoch than control's last comes here
		// only as its take-back of a registration whose answer was lost,
		// by a later revision: the peer runs under it, and signals must
		// name it. The peer starts over with it.)
		old.close()
		if n.canTrim() {
			// The old peer's hooks go with it: one that fired later would
			// put the old configuration back over the new one (an
			// always-direct peer's keepalive) and count it untrimmed twice.
			n.forgetTrim(old)
			if n.lazyPeer(info) {
				// The new peer starts trimmed: the old one must not stay.
				_ = n.dev.IpcSet("public_key=" + old.info.PublicKey.Hex() + "\nremove=true\n")
			}
		}
	}
	// Setting a persistent keepalive makes WireGuard open a handshake at
	// once. Both sides add each other within moments, and two initiations
	// that cross (a relay's round trip apart) can cancel out: each side's
	// answer to the other's replaces its own pending initiation, so
	// neither completes until WireGuard retries 5 s later. So one side,
	// the one that leads ICE too, opens at once; the other turns its
	// keepalive on once that handshake has had time to land.
	first := leads(n.env.pub, info.PublicKey)
	keepalive := persistentKeepalive
	lazy := n.lazyPeer(info)
	if !first || lazy {
		// A lazy peer's keepalive is on only while it is direct (see
		// lazy.go): an idle one costs WireGuard nothing.
		keepalive = 0
	}
	pub := info.PublicKey.Hex()
	// A lazy peer starts idle, out of WireGuard's configuration (trim.go).
	trim := lazy && n.canTrim()
	if !trim {
		if err := n.dev.IpcSet(wgPeerConfig(info, keepalive)); err != nil {
			n.log.Warn("add WireGuard peer", "peer", info.Name, "err", err)
			return
		}
	}
	p := newPeer(n.env, info)
	if trim {
		n.markTrimmed(p)
	}
	if back != nil {
		p.path.TxDirect.Add(back.txDirect)
		p.path.TxRelay.Add(back.txRelay)
		p.path.RxDirect.Add(back.rxDirect)
		p.path.RxRelay.Add(back.rxRelay)
	}
	n.peers[info.NodeID] = p
	n.tun.setPath(info.Address.Addr(), p.path)
	if !first && !lazy {
		p.keepaliveTimer = time.AfterFunc(keepaliveDelay, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.closed || n.peers[info.NodeID] != p {
				return
			}
			if err := n.dev.IpcSet(fmt.Sprintf("public_key=%s\nupdate_only=true\npersistent_keepalive_interval=%d\n", pub, persistentKeepalive)); err != nil {
				n.log.Warn("WireGuard keepalive", "peer", info.Name, "err", err)
			}
		})
		// Unless the peer still uses a session from before we restarted:
		// it is not opening one, so there is nothing to cross. Open ours
		// now rather than after keepaliveDelay.
		t := p.keepaliveTimer
		p.path.SetStaleHandler(func() {
			if t.Stop() {
				n.log.Debug("peer uses a session from before our restart; opening a handshake now", "peer", info.Name)
				t.Reset(0)
			}
		})
	}
	// Last: the stale handler above must be in place before anything
	// (opening these costs an X25519 each) delays it.
	for _, b := range n.early.take(info.NodeID, time.Now()) {
		n.deliverSignal(p, b)
	}
}

// persistentKeepalive (seconds) keeps NAT mappings and the relay path
// warm; keepaliveDelay is how long the second side of a pair waits before
// turning it on (see addPeer).
const (
	persistentKeepalive = 25
	keepaliveDelay      = 3 * time.Second
)

func (n *Node) removePeer(info controlapi.Peer) {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	n.removePeerLocked(info)
}

// removePeerLocked is removePeer under peerMu; it reports whether the
// removal was applied.
func (n *Node) removePeerLocked(info controlapi.Peer) bool {
	if n.outdated(info, revRemoved, "a removal") {
		return false
	}
	n.revs.applied(info, revRemoved, time.Now())
	n.mu.Lock()
	p := n.peers[info.NodeID]
	delete(n.peers, info.NodeID)
	if off := n.offline[info.NodeID]; off != nil {
		delete(n.offline, info.NodeID)
		n.tun.setOffline(off.info.Address.Addr(), false)
	}
	n.mu.Unlock()
	if p == nil {
		return true
	}
	p.close()
	n.forgetTrim(p)
	n.tun.setPath(p.info.Address.Addr(), nil)
	_ = n.dev.IpcSet("public_key=" + info.PublicKey.Hex() + "\nremove=true\n")
	n.bind.RemovePeer(info.PublicKey)
	n.log.Info("peer removed", "peer", info.Name)
	return true
}

// earlierLife reports whether info, from a peer event, is about an
// earlier registration of a peer than the one this node runs (its epoch
// is lower), and logs it so. Replicated control instances publish a
// node's events independently, so they can arrive out of order: the
// removal of a node's earlier life after its next registration, or an
// offline from before it. Applied, such an event would stop a running
// peer until its next event. Events of one registration carry the same
// epoch and are applied as they come; an epoch of 0 (control before
// epochs) is never earlier.
func (n *Node) earlierLife(info controlapi.Peer, what string) bool {
	if info.Epoch == 0 {
		return false
	}
	var known uint64
	n.mu.Lock()
	if p := n.peers[info.NodeID]; p != nil {
		known = p.epoch.Load()
	} else if off := n.offline[info.NodeID]; off != nil {
		known = off.info.Epoch
	}
	n.mu.Unlock()
	if info.Epoch >= known {
		return false
	}
	n.log.Debug("peer event from an earlier registration ignored", "peer", info.Name, "event", what, "epoch", info.Epoch, "known", known)
	return true
}
