package stun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/latticelab/lattice/netx"
)

// Behavior is one of RFC 4787's three dependency levels. The RFC names
// mapping behaviour (section 4.1) and filtering behaviour (section 5) with
// the same three terms, so Result uses this type for both. String returns
// the same words as the lab's NAT package.
type Behavior int

const (
	// EndpointIndependent mapping reuses one external endpoint for every
	// destination; as filtering it admits any remote endpoint.
	EndpointIndependent Behavior = iota
	// AddressDependent mapping reuses an external endpoint only for the
	// same destination address; as filtering it admits only addresses the
	// client has sent to.
	AddressDependent
	// AddressAndPortDependent mapping gives every destination address and
	// port its own external endpoint; as filtering it admits only the
	// address and port pairs the client has sent to.
	AddressAndPortDependent
)

var behaviorNames = [...]string{"endpoint-independent", "address-dependent", "address-and-port-dependent"}

// String returns the RFC 4787 term, e.g. "address-and-port-dependent".
func (b Behavior) String() string {
	if b >= 0 && int(b) < len(behaviorNames) {
		return behaviorNames[b]
	}
	return "Behavior(" + strconv.Itoa(int(b)) + ")"
}

// Options tunes Discover. Its zero value works.
type Options struct {
	// Wait is how long to wait for each answer before sending the request
	// again. If zero, 500ms (RFC 8489's initial RTO).
	Wait time.Duration
	// Tries is how many times each request is sent. If zero, 3: fewer than
	// RFC 8489's 7 because a missing answer is an expected outcome of the
	// filtering tests, and each one costs Wait × Tries.
	Tries int
	// Local is the client address to bind. If zero, the unspecified
	// address of the server's family, so the network picks the source
	// address per destination.
	Local netip.Addr
}

// Result is what Discover found.
type Result struct {
	// Mapping and Filtering classify the NAT (or its absence: a client
	// with a public address is endpoint-independent in both).
	Mapping, Filtering Behavior
	// NATed reports whether the server saw another address than the
	// client's own, i.e. whether there is a NAT at all.
	NATed bool
	// Mapped are the client's endpoints as the server saw them in mapping
	// tests I, II and III (RFC 5780 section 4.3). Mapped[2] is zero when
	// test II already showed endpoint-independent mapping.
	Mapped [3]netip.AddrPort
	// Other is the server's alternate address and port, from OTHER-ADDRESS.
	Other netip.AddrPort
}

func (r Result) String() string {
	if !r.NATed {
		return fmt.Sprintf("no NAT, %s filtering", r.Filtering)
	}
	return fmt.Sprintf("%s mapping, %s filtering", r.Mapping, r.Filtering)
}

// Discover classifies the NAT between network n and an RFC 5780 STUN
// server at server, with the mapping tests of RFC 5780 section 4.3 and the
// filtering tests of section 4.4. It learns the server's alternate address
// and port from OTHER-ADDRESS (ErrNoOtherAddress if there is none).
//
// It opens two sockets on n: one for the mapping tests, and a fresh one for
// the filtering tests, so the NAT's filter has seen only the primary
// endpoint. A server that never answers gives ErrNoResponse.
func Discover(ctx context.Context, n netx.Network, server netip.AddrPort, opt Options) (Result, error) {
	var res Result
	server = unmap(server)
	switch {
	case n == nil:
		return res, errors.New("stun: discover: nil Network")
	case !server.IsValid() || server.Port() == 0 || server.Addr().IsUnspecified():
		return res, fmt.Errorf("stun: discover: invalid server address %v", server)
	case opt.Wait < 0 || opt.Tries < 0:
		return res, fmt.Errorf("stun: discover: negative Wait %v or Tries %d", opt.Wait, opt.Tries)
	}
	d := discovery{ctx: ctx, n: n, server: server, waits: opt.waits()}
	network, laddr := listenAddr(server, opt.Local)

	c, err := n.ListenPacket(ctx, network, laddr)
	if err != nil {
		return res, fmt.Errorf("stun: discover: listen %s %s: %w", network, laddr, err)
	}
	defer c.Close()
	if err := d.mapping(c, &res); err != nil {
		return res, err
	}

	f, err := n.ListenPacket(ctx, network, laddr)
	if err != nil {
		return res, fmt.Errorf("stun: discover: listen %s %s: %w", network, laddr, err)
	}
	defer f.Close()
	if err := d.filtering(f, &res); err != nil {
		return res, err
	}
	return res, nil
}

func (o Options) waits() []time.Duration {
	wait, tries := o.Wait, o.Tries
	if wait == 0 {
		wait = 500 * time.Millisecond
	}
	if tries == 0 {
		tries = 3
	}
	waits := make([]time.Duration, tries)
	for i := range waits {
		waits[i] = wait
	}
	return waits
}

// listenAddr is the network and local address for a client of server.
func listenAddr(server netip.AddrPort, local netip.Addr) (network, addr string) {
	network = "udp6"
	if server.Addr().Is4() {
		network = "udp4"
	}
	if !local.IsValid() {
		return network, ":0"
	}
	return network, netip.AddrPortFrom(local.Unmap(), 0).String()
}

// discovery carries what the tests of one Discover call share.
type discovery struct {
	ctx    context.Context
	n      netx.Network
	server netip.AddrPort
	waits  []time.Duration
}

// mapping runs RFC 5780 section 4.3: the same socket asks the primary
// endpoint, the alternate address on the primary port, then the alternate
// address and port, and compares the mapped addresses.
func (d *discovery) mapping(c net.PacketConn, res *Result) error {
	r, err := d.ask(c, d.server, 0)
	if refusedPadding(err) {
		return fmt.Errorf("stun: discover: %v: %w (%w)", d.server, ErrNoOtherAddress, err)
	}
	if err != nil {
		return fmt.Errorf("stun: discover: mapping test I to %v: %w", d.server, err)
	}
	res.Mapped[0] = r.mapped
	res.NATed = !isLocal(d.n, c, r.mapped)
	other := r.other
	switch {
	case !other.IsValid():
		return fmt.Errorf("stun: discover: %v: %w", d.server, ErrNoOtherAddress)
	case other.Addr().Is4() != d.server.Addr().Is4() || other.Addr() == d.server.Addr() || other.Port() == d.server.Port():
		return fmt.Errorf("stun: discover: %w: OTHER-ADDRESS %v does not name another address and port than %v", ErrBadResponse, other, d.server)
	}
	res.Other = other

	dst := netip.AddrPortFrom(other.Addr(), d.server.Port())
	if r, err = d.ask(c, dst, 0); err != nil {
		return fmt.Errorf("stun: discover: mapping test II to %v: %w", dst, err)
	}
	res.Mapped[1] = r.mapped
	if res.Mapped[1] == res.Mapped[0] {
		res.Mapping = EndpointIndependent
		return nil
	}
	if r, err = d.ask(c, other, 0); err != nil {
		return fmt.Errorf("stun: discover: mapping test III to %v: %w", other, err)
	}
	res.Mapped[2] = r.mapped
	if res.Mapped[2] == res.Mapped[1] {
		res.Mapping = AddressDependent
	} else {
		res.Mapping = AddressAndPortDependent
	}
	return nil
}

// filtering runs RFC 5780 section 4.4 on a fresh socket: after one plain
// request to the primary endpoint, ask for the answer from the other
// address and port (test II), then from the other port only (test III).
// Whichever answer gets through the NAT tells its filtering.
func (d *discovery) filtering(f net.PacketConn, res *Result) error {
	if _, err := d.ask(f, d.server, 0); err != nil {
		return fmt.Errorf("stun: discover: filtering test I to %v: %w", d.server, err)
	}
	got, err := d.askChanged(f, flagChangeIP|flagChangePort, res.Other)
	if err != nil {
		return fmt.Errorf("stun: discover: filtering test II: %w", err)
	}
	if got {
		res.Filtering = EndpointIndependent
		return nil
	}
	got, err = d.askChanged(f, flagChangePort, netip.AddrPortFrom(d.server.Addr(), res.Other.Port()))
	if err != nil {
		return fmt.Errorf("stun: discover: filtering test III: %w", err)
	}
	if got {
		res.Filtering = AddressDependent
	} else {
		res.Filtering = AddressAndPortDependent
	}
	return nil
}

// ask performs one Binding transaction with dst, its request padded so
// that the answer has room for OTHER-ADDRESS, RESPONSE-ORIGIN and
// FINGERPRINT besides the mapped address.
func (d *discovery) ask(c net.PacketConn, dst netip.AddrPort, change uint32) (response, error) {
	a := d.server.Addr()
	req, err := newRequest(change, minAnswer(a)+2*addrAttrLen(a)+fingerprintLen)
	if err != nil {
		return response{}, err
	}
	return transact(d.ctx, c, dst, req, d.waits)
}

// askChanged sends the primary endpoint a CHANGE-REQUEST and reports
// whether the answer, which must come from want, got through. Silence is
// an answer here, unless the context ended.
func (d *discovery) askChanged(f net.PacketConn, change uint32, want netip.AddrPort) (bool, error) {
	r, err := d.ask(f, d.server, change)
	switch {
	case errors.Is(err, ErrNoResponse) && d.ctx.Err() == nil:
		return false, nil
	case err != nil:
		return false, err
	case r.from != want:
		// A server that ignored CHANGE-REQUEST would make every NAT look
		// endpoint-independent.
		return false, fmt.Errorf("%w: CHANGE-REQUEST answered from %v, want %v", ErrBadResponse, r.from, want)
	}
	return true, nil
}

// isLocal reports whether mapped is c's own endpoint: its port, and its
// address or, for a socket bound to every address, one of n's interface
// addresses.
func isLocal(n netx.Network, c net.PacketConn, mapped netip.AddrPort) bool {
	local, ok := addrPortOf(c.LocalAddr())
	if !ok || local.Port() != mapped.Port() {
		return false
	}
	if a := local.Addr(); !a.IsUnspecified() {
		return a == mapped.Addr()
	}
	ifcs, err := n.Interfaces()
	if err != nil {
		return false
	}
	for _, ifc := range ifcs {
		for _, p := range ifc.Addrs {
			if p.Addr().Unmap() == mapped.Addr() {
				return true
			}
		}
	}
	return false
}
