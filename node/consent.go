package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/stun/v4"
)

// ICE consent on a selected pair (RFC 7675), sent by the node rather than
// by pion. pion checks consent on every tick of its agent's loop, which
// ticks at least every 2 s whatever the keepalive interval, and has no
// call that checks once on demand; consent checks at that rate were half
// of a 20-node lab's CPU. So agents run with keepalives off, and the
// peer's actor sends Binding requests itself on the pair ICE selected: at
// the consent interval while the path is idle, and at once when traffic
// goes unanswered (liveness.go). The peer's agent answers them as any
// check. The answers are ours, not pion's: consentConn takes them out of
// the STUN stream by transaction ID before pion's UDPMux reads it.
//
// Once ICE has selected a direct path, the agent that found it is closed
// (retireAgent, liveness.go): pion's loop ticks every 2 s for as long as
// an agent lives, with nothing left to do once the node checks consent,
// and its goroutines and buffers stay per peer. The
// peer's checks on the pair are then answered here (respond), as the agent
// would have: a Binding success with the source as XOR-MAPPED-ADDRESS,
// under our password. Only requests that carry our credentials and pass
// MESSAGE-INTEGRITY are answered; anything else for a retired agent's
// username is dropped.

// consentTable holds the transaction IDs of our consent requests in
// flight, by the Path they check.
type consentTable struct {
	mux *Mux

	mu         sync.Mutex // guards pending and responders
	pending    map[[stun.TransactionIDSize]byte]consentSent
	responders map[string]responder // by our local ufrag
}

// responder answers the peer's checks for a retired agent.
type responder struct {
	path        *Path
	remoteUfrag string
	localPwd    string
}

// consentSent is a request in flight.
type consentSent struct {
	path *Path
	at   int64 // Unix ns
}

// maxPending bounds a path's requests in flight; older ones are forgotten
// (their answers then go to pion, which drops them).
const maxPending = 4

func newConsentTable(mux *Mux) *consentTable {
	return &consentTable{mux: mux, pending: map[[stun.TransactionIDSize]byte]consentSent{}, responders: map[string]responder{}}
}

// consentCreds is what a consent request to one peer needs.
type consentCreds struct {
	to                      netip.AddrPort
	localUfrag, remoteUfrag string
	remotePwd               string
	controlling             bool
	tieBreaker              uint64
	sent                    [maxPending][stun.TransactionIDSize]byte
	next                    int
}

// send sends one consent request to c.to for path p.
func (t *consentTable) send(p *Path, c *consentCreds) error {
	var role stun.Setter = ice.AttrControlled(c.tieBreaker)
	if c.controlling {
		role = ice.AttrControlling(c.tieBreaker)
	}
	msg, err := stun.Build(stun.TransactionID, stun.BindingRequest,
		stun.NewUsername(c.remoteUfrag+":"+c.localUfrag), role, ice.PriorityAttr(consentPriority),
		stun.NewShortTermIntegrity(c.remotePwd), stun.Fingerprint)
	if err != nil {
		return fmt.Errorf("node: consent request: %w", err)
	}
	t.mu.Lock()
	delete(t.pending, c.sent[c.next])
	c.sent[c.next] = msg.TransactionID
	c.next = (c.next + 1) % maxPending
	t.pending[msg.TransactionID] = consentSent{path: p, at: time.Now().UnixNano()}
	t.mu.Unlock()
	if err := t.mux.WriteTo(msg.Raw, c.to); err != nil {
		return fmt.Errorf("node: consent request to %s: %w", c.to, err)
	}
	return nil
}

// forget drops c's requests in flight and its responder (the watch ends).
func (t *consentTable) forget(c *consentCreds) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range c.sent {
		delete(t.pending, id)
	}
	delete(t.responders, c.localUfrag)
}

// respondFor answers the peer's checks on c's pair from now on, for p,
// under our password localPwd: its agent is closing.
func (t *consentTable) respondFor(p *Path, c *consentCreds, localPwd string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.responders[c.localUfrag] = responder{path: p, remoteUfrag: c.remoteUfrag, localPwd: localPwd}
}

// respond takes b if it is a Binding request to a retired agent's
// credentials: answered if it carries the peer's and passes its checks,
// dropped otherwise. A request from the path's direct address counts as
// the path answering.
func (t *consentTable) respond(b []byte, from netip.AddrPort) bool {
	// A Binding request: type 0x0001.
	if len(b) < 20 || b[0] != 0x00 || b[1] != 0x01 {
		return false
	}
	t.mu.Lock()
	none := len(t.responders) == 0
	t.mu.Unlock()
	if none {
		return false
	}
	req := &stun.Message{Raw: append([]byte(nil), b...)}
	if req.Decode() != nil {
		return false
	}
	var user stun.Username
	if user.GetFrom(req) != nil {
		return false
	}
	local, remote, _ := strings.Cut(user.String(), ":")
	t.mu.Lock()
	r, ok := t.responders[local]
	t.mu.Unlock()
	if !ok {
		return false
	}
	if remote != r.remoteUfrag || stun.Fingerprint.Check(req) != nil || stun.NewShortTermIntegrity(r.localPwd).Check(req) != nil {
		return true
	}
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	resp, err := stun.Build(stun.NewTransactionIDSetter(req.TransactionID), stun.BindingSuccess,
		&stun.XORMappedAddress{IP: from.Addr().AsSlice(), Port: int(from.Port())},
		stun.NewShortTermIntegrity(r.localPwd), stun.Fingerprint)
	if err != nil {
		return true
	}
	if a, ok := r.path.Direct(); ok && a == from {
		r.path.answered.Store(time.Now().UnixNano())
	}
	_ = t.mux.WriteTo(resp.Raw, from)
	return true
}

// answer takes b if it answers one of our requests, recording the answer
// and the round trip on its path.
func (t *consentTable) answer(b []byte) bool {
	// A Binding success response: type 0x0101, then the cookie and the ID.
	if len(b) < 20 || b[0] != 0x01 || b[1] != 0x01 {
		return false
	}
	var id [stun.TransactionIDSize]byte
	copy(id[:], b[8:20])
	t.mu.Lock()
	s, ok := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	if !ok {
		return false
	}
	now := time.Now().UnixNano()
	s.path.answered.Store(now)
	s.path.rtt.Store(now - s.at)
	return true
}

// consentPriority is the PRIORITY our requests carry (RFC 8445 7.1.1): a
// peer-reflexive candidate's, which the peer uses only should it take our
// address for a new candidate (it already knows it as the selected one).
const consentPriority = 110<<24 | 65535<<8 | 255

// newTieBreaker draws an ICE tie-breaker. Our requests carry our actual
// role, so it never decides a conflict; it is there because RFC 8445 asks
// for the attribute.
func newTieBreaker() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// consentConn is the STUN side of the mux as pion's UDPMux reads it, less
// the answers to our consent requests and the checks to retired agents.
type consentConn struct {
	net.PacketConn
	table *consentTable
}

// ReadFrom implements net.PacketConn.
func (c *consentConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if c.table.answer(b[:n]) {
			continue
		}
		if ua, ok := addr.(*net.UDPAddr); ok && c.table.respond(b[:n], ua.AddrPort()) {
			continue
		}
		return n, addr, err
	}
}
