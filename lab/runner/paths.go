package runner

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/node"
)

// nodeSnapshot is what a stopped node last said about its peers.
type nodeSnapshot struct {
	status  []node.PeerStatus
	started time.Time
	id      string     // its node ID at control
	addr    netip.Addr // its overlay address
}

// snapshot keeps a node's peer statuses before it stops, for the report.
func (l *Lab) snapshot(rn runningNode) {
	st := rn.status()
	l.mu.Lock()
	defer l.mu.Unlock()
	name := rn.common().name
	prev := l.snap[name]
	prev.status = mergeHistory(prev.status, st)
	prev.started = l.started[name]
	prev.id, prev.addr = rn.nodeID(), rn.addr()
	l.snap[name] = prev
}

// mergeHistory keeps earlier incarnations' path events in the newest
// statuses, so the report's timeline covers restarts.
func mergeHistory(old, cur []node.PeerStatus) []node.PeerStatus {
	out := slices.Clone(cur)
	for _, o := range old {
		i := slices.IndexFunc(out, func(s node.PeerStatus) bool { return s.Peer.Name == o.Peer.Name })
		if i < 0 {
			out = append(out, o)
			continue
		}
		out[i].History = append(slices.Clone(o.History), out[i].History...)
	}
	return out
}

// peerStatus is from's view of to, if from knows to yet.
func (l *Lab) peerStatus(from, to string) (node.PeerStatus, bool, error) {
	rn, err := l.node(from)
	if err != nil {
		return node.PeerStatus{}, false, err
	}
	for _, st := range rn.status() {
		if st.Peer.Name == to {
			return st, true, nil
		}
	}
	return node.PeerStatus{}, false, nil
}

// settled reports whether st is on path want for good: direct, or relay
// after ICE failed, a direct path was lost, or direct is off for the pair.
func (l *Lab) settled(from, to string, st node.PeerStatus, want string) bool {
	if string(st.Path) != want {
		return false
	}
	if want == string(node.PathDirect) {
		return true
	}
	if st.ICE.Err != "" || l.plan.Node(from).ICE.RelayOnly || l.plan.Node(to).ICE.RelayOnly {
		return true
	}
	if st.ICE.State == "idle" {
		return true // lazy, and idle: relayed until traffic flows
	}
	for _, e := range st.History {
		if e.To == node.PathDirect {
			return true
		}
	}
	return false
}

// CheckPath implements scenario.PathEnv: from's view of to now, or an
// error saying how its path differs from want.
func (l *Lab) CheckPath(from, to, want string) (node.PeerStatus, error) {
	st, ok, err := l.peerStatus(from, to)
	switch {
	case err != nil:
		return st, err
	case !ok:
		return st, fmt.Errorf("%s does not know %s", from, to)
	case string(st.Path) != want:
		return st, fmt.Errorf("path is %s, want %s%s", st.Path, want, whyNot(st, want))
	}
	return st, nil
}

// WaitPath waits until from's path to to is want ("direct" or "relay",
// relay meaning settled there), and returns from's view.
func (l *Lab) WaitPath(ctx context.Context, from, to, want string) (node.PeerStatus, error) {
	var last node.PeerStatus
	known := false
	for {
		st, ok, err := l.peerStatus(from, to)
		if err != nil {
			return last, err
		}
		if ok {
			last, known = st, true
			if l.settled(from, to, st, want) {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			if !known {
				return last, fmt.Errorf("%s never learned of %s: %w", from, to, context.Cause(ctx))
			}
			return last, fmt.Errorf("path is %s, want %s%s: %w", last.Path, want, whyNot(last, want), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// whyNot explains a path that is not what was wanted.
func whyNot(st node.PeerStatus, want string) string {
	switch {
	case want == "direct" && st.Why != "":
		return fmt.Sprintf(" (%s; %d candidate pairs tried)", st.Why, len(st.ICE.Pairs))
	case want == "relay" && st.Path == node.PathRelay:
		return " (ICE has not given up yet)"
	}
	if n := len(st.History); n > 0 {
		e := st.History[n-1]
		return fmt.Sprintf(" (%s since %s: %s)", e.To, e.Time.Format("15:04:05.000"), e.Reason)
	}
	return ""
}

// TimeToDirect is how long after both nodes were up from first went
// direct to to; it waits for the direct path until ctx ends.
func (l *Lab) TimeToDirect(ctx context.Context, from, to string) (time.Duration, error) {
	st, err := l.WaitPath(ctx, from, to, "direct")
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	began, up := lastOf(l.started, from, to), lastOf(l.up, from, to)
	l.mu.Unlock()
	if d, ok := timeToDirect(st.History, began, up); ok {
		return d, nil
	}
	return 0, fmt.Errorf("%s is direct to %s but recorded no switch since both started", from, to)
}

// lastOf is the later of two nodes' times in m.
func lastOf(m map[string]time.Time, a, b string) time.Time {
	if t := m[b]; t.After(m[a]) {
		return t
	}
	return m[a]
}

// timeToDirect is how long after up, when the later of a pair came up,
// history first went direct, counting only switches since began, when
// the later one started. A pair can go direct before the lab has counted
// both as up (its overlay services start after the node); that is zero.
// The time a node takes to come up is its own measure (the bench's
// connect_node_start), not the pair's: under load it can be seconds.
func timeToDirect(history []node.PathEvent, began, up time.Time) (time.Duration, bool) {
	for _, e := range history {
		if e.To == node.PathDirect && !e.Time.Before(began) {
			return max(e.Time.Sub(up), 0), true
		}
	}
	return 0, false
}

// MeshState counts a full mesh's progress.
type MeshState = scenario.MeshState

// Mesh reports how many ordered pairs of running nodes know each other
// and have completed a WireGuard handshake, or, lazy and idle, wait for
// traffic on the relay (their handshake comes with the first packet).
func (l *Lab) Mesh() MeshState {
	names := l.Running()
	ms := MeshState{Nodes: len(names), Pairs: len(names) * (len(names) - 1)}
	running := map[string]bool{}
	for _, n := range names {
		running[n] = true
	}
	for _, name := range names {
		rn, err := l.node(name)
		if err != nil {
			continue
		}
		for _, st := range rn.status() {
			if !running[st.Peer.Name] || (st.LastHandshake.IsZero() && st.ICE.State != "idle") {
				continue
			}
			ms.Connected++
			if st.Path == node.PathDirect {
				ms.Direct++
			}
		}
	}
	return ms
}

// WaitMesh waits until every ordered pair of running nodes has a path.
func (l *Lab) WaitMesh(ctx context.Context) (MeshState, error) {
	for {
		ms := l.Mesh()
		if ms.Connected == ms.Pairs {
			return ms, nil
		}
		select {
		case <-ctx.Done():
			return ms, fmt.Errorf("%d of %d node pairs connected: %w", ms.Connected, ms.Pairs, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pairs collects every node's view of every peer, and the path events
// they recorded, for the report.
func (l *Lab) Pairs() ([]report.Pair, []report.PathEvent) {
	statuses := map[string][]node.PeerStatus{}
	l.mu.Lock()
	for name, s := range l.snap {
		statuses[name] = s.status
	}
	nodes := make(map[string]runningNode, len(l.nodes))
	for name, rn := range l.nodes {
		nodes[name] = rn
	}
	started, up := maps.Clone(l.started), maps.Clone(l.up)
	l.mu.Unlock()
	for name, rn := range nodes {
		statuses[name] = mergeHistory(statuses[name], rn.status())
	}
	var pairs []report.Pair
	var events []report.PathEvent
	for i := range l.plan.Nodes {
		pn := &l.plan.Nodes[i]
		for _, st := range statuses[pn.Name] {
			peer := l.plan.Node(st.Peer.Name)
			if peer == nil {
				continue
			}
			p := report.Pair{From: pn.Name, To: peer.Name, FromNAT: l.plan.NATLabel(pn), ToNAT: l.plan.NATLabel(peer),
				Path: string(st.Path), RelayBytes: st.TxRelay + st.RxRelay, DirectBytes: st.TxDirect + st.RxDirect, ICE: st.ICE.Err, Why: st.Why}
			if st.LastHandshake.IsZero() && st.TxRelay+st.TxDirect == 0 {
				p.Path = "none"
			}
			p.TimeToDirect, _ = timeToDirect(st.History, lastOf(started, pn.Name, peer.Name), lastOf(up, pn.Name, peer.Name))
			for _, e := range st.History {
				ev := report.PathEvent{At: e.Time.Sub(l.start), Node: pn.Name, Peer: peer.Name, To: string(e.To), Reason: e.Reason}
				if e.Addr.IsValid() {
					ev.Addr = e.Addr.String()
				}
				events = append(events, ev)
			}
			pairs = append(pairs, p)
		}
	}
	slices.SortStableFunc(events, func(a, b report.PathEvent) int { return int(a.At - b.At) })
	return pairs, events
}

// MeshTable renders the running nodes' paths as a matrix: D direct, R
// relay, - no handshake yet.
func (l *Lab) MeshTable() string {
	names := l.Running()
	if len(names) > 16 {
		ms := l.Mesh()
		return fmt.Sprintf("%d nodes, %d ordered pairs: %d connected (%d direct, %d relay)\n",
			ms.Nodes, ms.Pairs, ms.Connected, ms.Direct, ms.Connected-ms.Direct)
	}
	width := 4
	for _, n := range names {
		width = max(width, len(n))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s", width+2, "")
	for _, n := range names {
		fmt.Fprintf(&b, " %-*s", width, n)
	}
	b.WriteString("\n")
	for _, from := range names {
		fmt.Fprintf(&b, "%-*s", width+2, from)
		for _, to := range names {
			cell := "·"
			if from != to {
				cell = "-"
				if st, ok, _ := l.peerStatus(from, to); ok && !st.LastHandshake.IsZero() {
					cell = string(st.Path)
				}
			}
			fmt.Fprintf(&b, " %-*s", width, cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// WaitSettled waits until every ordered pair of running nodes is on its
// final path: direct, or relay after ICE gave up (see WaitPath).
func (l *Lab) WaitSettled(ctx context.Context) error {
	for {
		unsettled := 0
		names := l.Running()
		for _, from := range names {
			for _, to := range names {
				if from == to {
					continue
				}
				st, ok, err := l.peerStatus(from, to)
				if err != nil || !ok || !(l.settled(from, to, st, "direct") || l.settled(from, to, st, "relay")) {
					unsettled++
				}
			}
		}
		if unsettled == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d node pairs still looking for their path: %w", unsettled, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitPresence implements scenario.PathEnv: it waits until from shows peer
// online (control says it runs) or offline.
func (l *Lab) WaitPresence(ctx context.Context, from, peer string, online bool) (node.PeerStatus, error) {
	want := presence(online)
	var last node.PeerStatus
	known := false
	for {
		st, ok, err := l.peerStatus(from, peer)
		if err != nil {
			return last, err
		}
		if ok {
			last, known = st, true
			if st.Online == online {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			if !known {
				return last, fmt.Errorf("%s never learned of %s: %w", from, peer, context.Cause(ctx))
			}
			return last, fmt.Errorf("%s still shows %s %s (path %s), want %s: %w", from, peer, presence(last.Online), last.Path, want, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func presence(online bool) string {
	if online {
		return "online"
	}
	return "offline"
}

// LastIdentity implements scenario.LifecycleEnv: a stopped node's identity
// in its last run.
func (l *Lab) LastIdentity(name string) (string, netip.Addr, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.snap[name]
	return s.id, s.addr, ok && s.id != ""
}
