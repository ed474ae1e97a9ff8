package node

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/stun/v4"
)

// sharedSrflx gives every peer's ICE agent the node's one server-reflexive
// discovery per STUN server (issue 22.3). pion's UniversalUDPMux keeps a
// mapped address for 25 s once it has one, but agents that gather while
// the first Binding request is still out each send their own: a node
// whose peers start attempts together (joining a mesh, a network change)
// sent one per agent. Here concurrent gatherings for one server wait on
// the request already out; later ones take the mux's cached answer, which
// a network change outlives by at most that TTL.
type sharedSrflx struct {
	*ice.UniversalUDPMuxDefault

	mu       sync.Mutex
	inflight map[string]*srflxCall
}

type srflxCall struct {
	done      chan struct{}
	addr      *stun.XORMappedAddress
	err       error
	abandoned bool // its caller's ctx ended it, not the server
}

func newSharedSrflx(m *ice.UniversalUDPMuxDefault) *sharedSrflx {
	return &sharedSrflx{UniversalUDPMuxDefault: m, inflight: map[string]*srflxCall{}}
}

// GetListenAddresses implements ice.UniversalUDPMux for server-reflexive
// gathering only (host candidates come from the mux itself): pion makes
// one srflx candidate per listen address and network type, but the
// mapping is the socket's, whichever interface address it is paired
// with. On a dual-stack socket with three addresses that was six
// candidates for two mappings, each checked against every remote
// candidate of its family; one address (not loopback where there is
// another) gives one per family.
func (s *sharedSrflx) GetListenAddresses() []net.Addr {
	all := s.UniversalUDPMuxDefault.GetListenAddresses()
	for _, a := range all {
		if ua, ok := a.(*net.UDPAddr); ok && !ua.IP.IsLoopback() {
			return []net.Addr{a}
		}
	}
	return all[:min(1, len(all))]
}

// GetXORMappedAddr implements ice.UniversalUDPMux.
func (s *sharedSrflx) GetXORMappedAddr(server net.Addr, deadline time.Duration) (*stun.XORMappedAddress, error) {
	return s.GetXORMappedAddrContext(context.Background(), server, deadline)
}

// GetXORMappedAddrContext is what pion's gathering calls when the mux has
// it: the mapped address from server, from the request already out if
// there is one. Every caller keeps to its own ctx (an agent's Close waits
// for its gathering): a request whose caller gave up ends, and those that
// waited on it send their own.
func (s *sharedSrflx) GetXORMappedAddrContext(ctx context.Context, server net.Addr, deadline time.Duration) (*stun.XORMappedAddress, error) {
	key := server.String()
	for {
		s.mu.Lock()
		c := s.inflight[key]
		if c == nil {
			break // with s.mu held: we send the request
		}
		s.mu.Unlock()
		select {
		case <-c.done:
			if !c.abandoned {
				return c.addr, c.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &srflxCall{done: make(chan struct{})}
	s.inflight[key] = c
	s.mu.Unlock()
	c.addr, c.err = s.UniversalUDPMuxDefault.GetXORMappedAddrContext(ctx, server, deadline)
	c.abandoned = ctx.Err() != nil
	s.mu.Lock()
	delete(s.inflight, key)
	s.mu.Unlock()
	close(c.done)
	return c.addr, c.err
}
