package node

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/key"
)

// A path is how packets reach one peer: directly (the nominated ICE
// pair's remote address, through the shared socket), through the relay,
// or not at all while the peer is offline. Three things carry it:
//   - Path, below: the current direct address and the byte counters,
//     read by the Bind on every packet;
//   - the peer's actor (peer.go), the one goroutine that decides which
//     path to use and records each switch as a PathEvent;
//   - PeerStatus (status.go), what `lattice status` shows of both.

// PathKind is how a peer is reached.
type PathKind string

// Path kinds.
const (
	PathRelay  PathKind = "relay"
	PathDirect PathKind = "direct"
	// PathOffline: the peer is registered but not running; nothing is
	// sent to it.
	PathOffline PathKind = "offline"
)

// PathEvent records a path switch and why it happened.
type PathEvent struct {
	Time   time.Time      `json:"time"`
	To     PathKind       `json:"to"`
	Addr   netip.AddrPort `json:"addr"` // the direct address, for PathDirect
	Reason string         `json:"reason"`
}

// maxHistory bounds the PathEvents kept per peer.
const maxHistory = 32

// Path is one peer's path state, shared by the Bind, which sends and
// receives on it, and the peer's actor, which sets it (Bind.SetDirect).
type Path struct {
	Key      key.Public
	direct   atomic.Pointer[netip.AddrPort] // nil: relay
	lastAddr netip.AddrPort                 // the last direct address, guarded by Bind.mu

	lastDirectRx                         atomic.Int64  // Unix ns of the last direct packet
	TxDirect, TxRelay, RxDirect, RxRelay atomic.Uint64 // bytes

	// pending: WireGuard's configuration made the path (ParseEndpoint)
	// for a peer it is still adding, and the node's peer does not hold it
	// yet (Bind.Ready). WireGuard drops what comes from a peer it has not
	// started: a peer's initiation it dropped so must not be taken for
	// passed, or the Bind would drop its resends as copies (duplicate).
	pending atomic.Bool
	// removed: RemovePeer forgot the path. WireGuard may still hold it as
	// an endpoint (a packet queued before, read by the peer added again):
	// what it sends there goes by the key's current path (Bind.current).
	removed atomic.Bool

	handshakes // the WireGuard workarounds' state (handshake.go)
	lazyState  // traffic and wake-up for lazy connections (lazy.go)
	liveness   // the direct path's watch while it carries traffic (liveness.go)
	wgRestore  // puts a trimmed peer back into WireGuard (trim.go)
}

// Direct returns the direct address in use, if any.
func (p *Path) Direct() (netip.AddrPort, bool) {
	if a := p.direct.Load(); a != nil {
		return *a, true
	}
	return netip.AddrPort{}, false
}

// LastDirectReceive is when the last packet arrived on the direct path.
func (p *Path) LastDirectReceive() time.Time {
	if ns := p.lastDirectRx.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
