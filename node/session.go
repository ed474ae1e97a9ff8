package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// register registers the node's identity with control, proving it holds
// the private key; connected and dialed, if set, are controlapi.Join's.
func (n *Node) register(ctx context.Context, connected, dialed func()) (*controlapi.RegisterResponse, error) {
	req := controlapi.Join{Token: n.cfg.Token, Name: n.id.Name, Key: n.id.Private, Connected: connected, Dialed: dialed}
	if k := n.controlKey.Load(); k != nil {
		// The URL's, the stored identity's or the last answer's: a
		// registration, and a re-registration (control restarted, the
		// session refused), is one request, not two.
		req.ControlKey = *k
	}
	var call func(context.Context, netx.Network, string, controlapi.Join) (*controlapi.RegisterResponse, error)
	switch {
	case strings.HasPrefix(n.cfg.Control, "nats://"), strings.HasPrefix(n.cfg.Control, "tls://"):
		call = controlapi.RegisterNATS
	case strings.HasPrefix(n.cfg.Control, "http://"), strings.HasPrefix(n.cfg.Control, "https://"):
		call = controlapi.RegisterHTTP
	default:
		return nil, permanent{fmt.Errorf("node: control URL %q: want tls://, https://, nats:// or http://", n.cfg.Control)}
	}
	resp, err := call(ctx, n.cfg.Network, n.cfg.Control, req)
	if err != nil {
		return nil, fmt.Errorf("node: register with %s: %w", n.cfg.Control, err)
	}
	n.learnControlKey(resp.ControlKey)
	return resp, nil
}

// learnControlKey keeps k, unless zero, as control's register key for the
// next registration's stamped proof.
func (n *Node) learnControlKey(k key.Public) {
	if !k.IsZero() {
		n.controlKey.Store(&k)
	}
}

// connectSession opens the control session on nw with resp's credentials
// and returns control's peer list, asked once the session's
// subscriptions are in place; nil (logged) if only the list failed.
func (n *Node) connectSession(ctx context.Context, nw netx.Network, resp *controlapi.RegisterResponse) (*controlapi.PeerList, error) {
	s, peers, err := controlapi.ConnectPeers(ctx, nw, resp.NodeID, resp.NATS, controlapi.Handlers{
		Peer: n.onPeerEvent, Signal: n.onSignal, Reconnected: n.resync, Rejected: n.reregister,
	})
	if s == nil {
		return nil, fmt.Errorf("node: control session: %w", err)
	}
	if err != nil {
		n.log.Warn("peer list after subscribing", "err", err)
	}
	if old := n.session.Swap(s); old != nil {
		old.Close()
	}
	n.sessionOnce.Do(func() { close(n.sessionUp) })
	return peers, nil
}

// signalControl sends a signal to node to through the control session,
// waiting for start to open it.
func (n *Node) signalControl(ctx context.Context, to string, payload []byte) error {
	select {
	case <-n.sessionUp:
	case <-ctx.Done():
		return fmt.Errorf("node: signal %s: no control session yet: %w", to, context.Cause(ctx))
	}
	return n.session.Load().Signal(ctx, to, payload)
}

// relayWaiter is a RelayClient that can say when it is connected.
type relayWaiter interface {
	// WaitConnected returns nil once the relay connection is up, or
	// an error when ctx ends or the relay refused the node for good.
	WaitConnected(ctx context.Context) error
	// Transport is "" while the relay is not connected.
	Transport() string
}

// addEarlyPeers adds the registration's peers, before the control
// session (join brings them to its list). WireGuard opens its handshakes
// to the peers this node leads at once, while the relay connection,
// dialed just before, is still opening: the relay client queues those
// first initiations and sends them behind its HELLO (docs/LRP.md §1).
// An initiation sent while the relay is between attempts (backing off
// after a failed one) is lost, though, so once the relay connects each
// peer's unanswered initiation is sent again; a copy the peer already
// has is dropped by its Bind (duplicate) or WireGuard (replay).
func (n *Node) addEarlyPeers(peers []controlapi.Peer) {
	for _, p := range peers {
		n.setPeer(p, revRecord)
	}
	w, ok := n.relay.(relayWaiter)
	if !ok || len(peers) == 0 || w.Transport() != "" {
		return
	}
	n.relayKick.Add(1)
	go func() {
		defer n.relayKick.Done()
		if w.WaitConnected(n.life) != nil {
			return
		}
		n.mu.Lock()
		paths := make([]*Path, 0, len(n.peers))
		for _, p := range n.peers {
			paths = append(paths, p.path)
		}
		n.mu.Unlock()
		for _, p := range paths {
			n.bind.RelayUp(p)
		}
	}()
}

// onPeerEvent applies a peer event and, if it was applied (not from an
// earlier registration, nor older than what was), numbers it for a list
// being asked for meanwhile (notePeerEvent), under peerMu: a list's entry
// is weighed against it whole (reconcile). An event ignored as old must
// not hold the list's newer entry back.
func (n *Node) onPeerEvent(ev controlapi.PeerEvent) {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	var applied bool
	switch ev.Type {
	case controlapi.PeerAdded, controlapi.PeerUpdated:
		applied = n.setPeerLocked(ev.Peer, revRecord)
	case controlapi.PeerOnline:
		applied = n.setPeerLocked(ev.Peer, revPresence)
	case controlapi.PeerOffline:
		ev.Peer.Offline = true
		applied = n.setPeerLocked(ev.Peer, revPresence)
	case controlapi.PeerRemoved:
		applied = n.removePeerLocked(ev.Peer)
	}
	if applied {
		n.notePeerEvent(ev.Peer.NodeID)
	}
}

func (n *Node) onSignal(from string, payload []byte) {
	n.mu.Lock()
	p := n.peers[from]
	n.mu.Unlock()
	if p == nil {
		n.log.Debug("signal from unknown node; kept until it is a peer", "from", from)
		n.early.keep(from, payload, time.Now())
		return
	}
	n.deliverSignal(p, payload)
}

// deliverSignal opens a signal from p and hands it to p's actor. It does
// not take n.mu.
func (n *Node) deliverSignal(p *peer, payload []byte) {
	s, err := OpenSignalShared(p.sharedKey(), payload)
	if err == nil {
		err = admitEpoch(n.epoch.Load(), s)
	}
	if err != nil {
		n.log.Debug("signal refused", "from", p.info.Name, "err", err)
		return
	}
	// Sealed by the peer: its epoch is news if we missed its last
	// registration's announcement. A replay carries an older one.
	p.learnEpoch(s.Epoch)
	n.bind.PeerHeard(p.path)
	p.post(peerEvent{signal: s})
}

// reregister registers again with the same identity after control
// refused the session's credentials, then resyncs the peers. It retries
// with backoff until it works or the node closes; Close waits for it.
func (n *Node) reregister() {
	n.mu.Lock()
	if n.life.Err() != nil {
		n.mu.Unlock()
		return
	}
	n.rereg.Add(1)
	n.mu.Unlock()
	defer n.rereg.Done()
	n.regMu.Lock()
	defer n.regMu.Unlock()
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		ctx, cancel := context.WithTimeout(n.life, 15*time.Second)
		err := n.rejoin(ctx)
		cancel()
		if err == nil || n.life.Err() != nil {
			return
		}
		n.log.Warn("re-register", "err", err, "retry in", delay)
		wait := time.NewTimer(delay)
		select {
		case <-n.life.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
	}
}

// rejoin registers again, opens a new session and brings the peers to
// its list.
func (n *Node) rejoin(ctx context.Context) error {
	resp, err := n.register(ctx, nil, nil)
	if err != nil {
		return err
	}
	n.epoch.Store(resp.Epoch)
	// The revisions applied stay: the registry is the one they count in,
	// or its lists and events name another (Reg) and start them over.
	mark := n.beginList()
	defer n.endList()
	peers, err := n.connectSession(ctx, n.cfg.Network, resp)
	if err != nil || n.life.Err() != nil {
		return err
	}
	if resp.Address != n.id.Address {
		n.log.Warn("re-registered with a different address", "was", n.id.Address, "now", resp.Address)
	}
	n.log.Info("registered again", "id", resp.NodeID, "address", resp.Address, "epoch", resp.Epoch)
	if peers != nil {
		n.reconcile(*peers, mark)
	} else {
		n.resync()
	}
	return nil
}

// resync reconciles the peer set with control's after a NATS outage, in
// which peer events may have been lost.
func (n *Node) resync() {
	ctx, cancel := context.WithTimeout(n.life, 10*time.Second)
	defer cancel()
	mark := n.beginList()
	defer n.endList()
	l, err := n.session.Load().PeerList(ctx)
	if err != nil {
		n.log.Warn("resync peers after reconnect", "err", err)
		return
	}
	n.reconcile(l, mark)
	n.tellPeers(peerEvent{reconnected: true})
	n.log.Info("resynced peers after reconnect", "peers", len(l.Peers))
}

// notePeerEvent numbers a peer event as it is applied and, while a
// peer list is being asked for (beginList), records the number under the
// node it is about, so that the older list does not undo it.
func (n *Node) notePeerEvent(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.eventSeq++
	if n.listing == 0 {
		return
	}
	if n.eventAt == nil {
		n.eventAt = map[string]uint64{}
	}
	n.eventAt[id] = n.eventSeq
}

// beginList is called before a peer list is asked for: it returns the
// mark reconcile takes (the last event applied) and has events recorded
// until the matching endList.
func (n *Node) beginList() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.listing++
	return n.eventSeq
}

// endList ends a beginList; the last one drops the recorded events.
func (n *Node) endList() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listing--; n.listing == 0 {
		n.eventAt = nil
	}
}

// reconcile brings the peer set to control's list, asked for when the
// last event applied was mark: every peer in it set, every other one
// removed, except those an event applied since mark set or removed. The
// list's answer and events of peers that register meanwhile come on one
// connection but from different publishers, in either order: a peer
// announced just after control took the list would otherwise be added
// by its event, then removed by the older list (nodes starting at once
// each missed a peer so). Where the list and the node both know a
// peer's registry revision (replicated control, peerrev.go), they decide
// instead: an entry is taken if it is newer than what an event applied,
// and a peer the list does not hold is removed if the node's copy of it
// is no newer than the list.
func (n *Node) reconcile(l controlapi.PeerList, mark uint64) {
	// Whole under peerMu: an event applied midway would be undone by the
	// list's older entry. Events wait; those applied since mark, while
	// the list was asked for, are recent: the list does not undo them.
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	if n.revs.registry(l.Reg) {
		n.log.Warn("peer list from a registry made again since ignored", "reg", l.Reg, "current", n.revs.reg)
		return
	}
	n.mu.Lock()
	recent := map[string]bool{}
	for id, at := range n.eventAt {
		if at > mark {
			recent[id] = true
		}
	}
	n.mu.Unlock()
	want := map[string]bool{}
	for _, p := range l.Peers {
		want[p.NodeID] = true
		p.Reg = l.Reg
		// A recent event stands, unless the entry is a later write of
		// the peer's record than any the node applied (a removal applied
		// meanwhile does not hold back the peer's next registration,
		// whose own event may come after); a presence event leaves the
		// revision as it was, and the older list does not undo it.
		if !recent[p.NodeID] || l.Rev > 0 && n.revs.above(p.NodeID, p.Rev) {
			n.setPeerLocked(p, revRecord)
		}
	}
	n.mu.Lock()
	var absent []controlapi.Peer
	for id, p := range n.peers {
		if !want[id] {
			absent = append(absent, p.info)
		}
	}
	for id, p := range n.offline {
		if !want[id] {
			absent = append(absent, p.info)
		}
	}
	n.mu.Unlock()
	for _, p := range absent {
		rev := n.revs.known(p.NodeID)
		keep := recent[p.NodeID]
		if l.Rev > 0 && rev > 0 {
			keep = rev > l.Rev // newer than the list, which cannot know it
		}
		if !keep {
			p.Rev = rev
			n.removePeerLocked(p)
		}
	}
	n.revs.listed(l.Rev)
}
