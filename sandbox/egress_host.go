package sandbox

import (
	"net/netip"
	"sync"
	"time"

	"github.com/latticelab/lattice/netx"
)

// hostAddrsTTL bounds how stale the host's address list may be: an address
// added later is denied at most this long after it appears.
const hostAddrsTTL = 5 * time.Second

// hostAddrs knows the host's own addresses, which pod mode denies unless a
// rule names them: a service on the host listening on its LAN address is
// as much the host's as one on loopback. They are the host network's
// interfaces' addresses, re-read every hostAddrsTTL, and the node's
// ListenAddr.
type hostAddrs struct {
	net    netx.Network
	listen netip.Addr

	mu    sync.Mutex // guards the following fields
	addrs []netip.Addr
	read  time.Time
}

func newHostAddrs(n netx.Network, listen netip.Addr) *hostAddrs {
	if n == nil {
		n = netx.OS
	}
	return &hostAddrs{net: n, listen: listen.Unmap()}
}

// contains reports whether a is one of the host's addresses.
func (h *hostAddrs) contains(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if h.listen.IsValid() && !h.listen.IsUnspecified() && a == h.listen {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); h.addrs == nil || now.Sub(h.read) > hostAddrsTTL {
		h.addrs, h.read = h.readLocked(), now
	}
	for _, b := range h.addrs {
		if a == b {
			return true
		}
	}
	return false
}

// readLocked lists the interfaces' addresses. If they cannot be read, the
// list is empty (not nil, so it is retried after the TTL, not at once):
// loopback and the other defaults are denied by the policy regardless.
func (h *hostAddrs) readLocked() []netip.Addr {
	ifs, err := h.net.Interfaces()
	out := []netip.Addr{}
	if err != nil {
		return out
	}
	for _, ifc := range ifs {
		for _, p := range ifc.Addrs {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out
}
