package fabric

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/latticelab/lattice/lab/link"
)

// InterfaceConfig attaches a host or router to a network.
type InterfaceConfig struct {
	// Name is the interface name. If empty, "eth0", "eth1", … in order.
	Name string
	// Network is the name of the network to attach to. Required.
	Network string
	// Addr is the interface's address; it must lie inside the network's
	// prefix of its family and not be its network or (IPv4) broadcast
	// address. Required.
	Addr netip.Addr
	// Aliases are further addresses on the same interface, e.g. the second
	// address an RFC 5780 STUN server needs, or the IPv6 address of an
	// interface on a dual-stack network. Same rules as Addr.
	Aliases []netip.Addr
	// MTU is the largest IP packet the interface sends. If zero, the
	// network's MTU.
	MTU int
	// Egress impairs frames from this interface onto the network; Ingress
	// impairs frames from the network to this interface. Zero values mean a
	// perfect link.
	Egress, Ingress link.Impairments
}

// Direction names one direction of an interface's link.
type Direction int

const (
	// Egress is from the interface onto its network.
	Egress Direction = iota
	// Ingress is from the network into the interface.
	Ingress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// Interface is one attachment of a host or router to a network: an address,
// a MAC, an impairable link in each direction and a receive queue drained by
// the interface's own goroutine.
type Interface struct {
	name    string
	owner   string // host or router name
	network *Network
	addr    netip.Addr
	aliases []netip.Addr
	mtu     int
	port    uint16
	mac     mac

	egress  *link.Pipe // interface → network
	ingress *link.Pipe // network → interface
	rx      *rxQueue

	tap atomic.Pointer[tap]

	// handle consumes a batch of received frames; it owns them.
	handle func(batch [][]byte)
	// tx is what a router sends while handling a batch received here;
	// only the receive goroutine touches it (batch.go).
	tx txBatch

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newInterface(f *Fabric, owner string, idx int, cfg InterfaceConfig) (*Interface, error) {
	name := cfg.Name
	if name == "" {
		name = fmt.Sprintf("eth%d", idx)
	}
	n := f.networks[cfg.Network]
	if n == nil {
		return nil, fmt.Errorf("%w: %s/%s: unknown network %q", ErrInvalid, owner, name, cfg.Network)
	}
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("%w: %s/%s: no address on network %q", ErrInvalid, owner, name, cfg.Network)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range append([]netip.Addr{cfg.Addr}, cfg.Aliases...) {
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() || !n.contains(a) {
			return nil, fmt.Errorf("%w: %s/%s: address %v is outside %v", ErrInvalid, owner, name, a, n)
		}
		if a == n.prefixFor(a).Masked().Addr() || (a.Is4() && n.prefix.Bits() < 31 && a == broadcast(n.prefix)) {
			return nil, fmt.Errorf("%w: %s/%s: address %v is the network or broadcast address of %v", ErrInvalid, owner, name, a, n)
		}
		if seen[a] {
			return nil, fmt.Errorf("%w: %s/%s: address %v given twice", ErrInvalid, owner, name, a)
		}
		seen[a] = true
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = n.mtu
	}
	if mtu < 576 || mtu > 65535 {
		return nil, fmt.Errorf("%w: %s/%s: MTU %d outside 576..65535", ErrInvalid, owner, name, mtu)
	}
	ifc := &Interface{
		name:    name,
		owner:   owner,
		network: n,
		addr:    cfg.Addr,
		aliases: append([]netip.Addr(nil), cfg.Aliases...),
		mtu:     mtu,
		rx:      newRXQueue(f.cfg.RXQueueLen),
		stop:    make(chan struct{}),
	}
	// Each direction draws from its own seed; per-flow streams keep a
	// flow's loss and jitter independent of other traffic.
	pipe := func(dir string, im link.Impairments, deliver func([]byte), batch func([][]byte), release func([]byte)) (*link.Pipe, error) {
		return link.New(link.Config{
			Name: ifc.String() + " " + dir, Impairments: im, Seed: f.seedFor(ifc.String() + "/" + dir),
			Flow: link.EthernetFlow, Deliver: deliver, DeliverBatch: batch, Release: release, Logger: f.log,
		})
	}
	var err error
	if ifc.egress, err = pipe("egress", cfg.Egress, n.switchFrame, n.switchBatch, n.releaseFrame); err != nil {
		return nil, fmt.Errorf("%w: %s egress: %w", ErrInvalid, ifc, err)
	}
	if ifc.ingress, err = pipe("ingress", cfg.Ingress, ifc.receive, ifc.receiveBatch, putFrame); err != nil {
		ifc.egress.Close()
		return nil, fmt.Errorf("%w: %s ingress: %w", ErrInvalid, ifc, err)
	}
	return ifc, nil
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	bits := p.Bits()
	for i := bits; i < 32; i++ {
		a[i/8] |= 1 << (7 - uint(i%8))
	}
	return netip.AddrFrom4(a)
}

// start launches the receive goroutine; handle must be set.
func (ifc *Interface) start() {
	ifc.wg.Add(1)
	go ifc.rxLoop()
}

func (ifc *Interface) rxLoop() {
	defer ifc.wg.Done()
	var spare [][]byte
	for {
		select {
		case <-ifc.stop:
			return
		case <-ifc.rx.wake:
		}
		batch := ifc.rx.drain(spare)
		if len(batch) > 0 {
			ifc.handle(batch)
			clear(batch)
		}
		spare = batch
	}
}

// receive is the ingress pipe's Deliver: capture, then queue for the owner.
func (ifc *Interface) receive(f []byte) {
	if t := ifc.tap.Load(); t != nil {
		t.write(f, dirIn, "")
	}
	ifc.rx.push(f)
}

// transmit sends a complete frame onto the network, taking ownership.
func (ifc *Interface) transmit(f []byte) { ifc.transmitNote(f, "") }

// transmitNote is transmit with a note for the capture, such as the NAT
// mapping the frame created.
func (ifc *Interface) transmitNote(f []byte, note string) {
	n := ifc.network
	if in := n.f.inst; in != nil && in.frame(instantFrame{net: n.index, stage: stageEgress, port: ifc.port, f: f, note: note, ifc: ifc}) {
		return // sent at the end of the instant, in order (instant.go)
	}
	ifc.sendEgress(f, note)
}

// sendEgress is transmitNote's capture and send.
func (ifc *Interface) sendEgress(f []byte, note string) {
	if t := ifc.tap.Load(); t != nil {
		t.write(f, dirOut, note)
	}
	if note != "" && ifc.network.tap.Load() != nil {
		ifc.network.notes.hold(f, note)
	}
	ifc.egress.Send(f)
}

// traceDrop records a frame the owner dropped, with why, in the interface's
// capture and the capture of the segment it came from (as a packet comment)
// and the debug log.
func (ifc *Interface) traceDrop(f []byte, log *slog.Logger, reason string) {
	if t := ifc.tap.Load(); t != nil {
		t.write(f, dirIn, reason)
	}
	if t := ifc.network.tap.Load(); t != nil {
		t.write(f, dirIn, segmentDropNote(ifc, reason))
	}
	if log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("drop", "interface", ifc.String(), "reason", reason)
	}
}

// close stops the receive goroutine and both pipes. Idempotent.
func (ifc *Interface) close() {
	ifc.once.Do(func() {
		close(ifc.stop)
		ifc.wg.Wait()
		ifc.egress.Close()
		ifc.ingress.Close()
		ifc.rx.close()
	})
}

// Name returns the interface name, e.g. "eth0".
func (ifc *Interface) Name() string { return ifc.name }

// Addr returns the interface's address.
func (ifc *Interface) Addr() netip.Addr { return ifc.addr }

// addrFor returns the interface's first address of dst's family, or the
// zero Addr: the source of what it sends to dst.
func (ifc *Interface) addrFor(dst netip.Addr) netip.Addr {
	if ifc.addr.Is4() == dst.Is4() {
		return ifc.addr
	}
	for _, a := range ifc.aliases {
		if a.Is4() == dst.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

// owns reports whether a is one of the interface's addresses.
func (ifc *Interface) owns(a netip.Addr) bool {
	return a == ifc.addr || slices.Contains(ifc.aliases, a)
}

// Addr6 returns the interface's first IPv6 address, or the zero Addr.
func (ifc *Interface) Addr6() netip.Addr { return ifc.addrFor(netip.IPv6Unspecified()) }

// Addrs returns the interface's address followed by its aliases.
func (ifc *Interface) Addrs() []netip.Addr {
	return append([]netip.Addr{ifc.addr}, ifc.aliases...)
}

// Network returns the network the interface is attached to.
func (ifc *Interface) Network() *Network { return ifc.network }

// MTU returns the interface's MTU.
func (ifc *Interface) MTU() int { return ifc.mtu }

// String returns "owner/name".
func (ifc *Interface) String() string { return ifc.owner + "/" + ifc.name }

// SetImpairments changes one direction of the interface's link while traffic
// flows. It returns an error naming the bad field if im is invalid.
func (ifc *Interface) SetImpairments(dir Direction, im link.Impairments) error {
	p := ifc.egress
	if dir == Ingress {
		p = ifc.ingress
	}
	if err := p.Set(im); err != nil {
		return fmt.Errorf("%s %s: %w", ifc, dir, err)
	}
	return nil
}

// Impairments returns one direction's current impairments.
func (ifc *Interface) Impairments(dir Direction) link.Impairments {
	if dir == Ingress {
		return ifc.ingress.Impairments()
	}
	return ifc.egress.Impairments()
}

// SetDown takes the link down (every frame in both directions dropped) or
// brings it back up, keeping the other impairments.
func (ifc *Interface) SetDown(down bool) {
	for _, p := range []*link.Pipe{ifc.egress, ifc.ingress} {
		im := p.Impairments()
		im.Down = down
		_ = p.Set(im) // toggling Down cannot make valid impairments invalid
	}
}

// LinkStats reports one direction's link counters.
func (ifc *Interface) LinkStats(dir Direction) link.Stats {
	if dir == Ingress {
		return ifc.ingress.Stats()
	}
	return ifc.egress.Stats()
}

// RXDropped counts frames refused because the receive queue was full.
func (ifc *Interface) RXDropped() uint64 { return ifc.rx.dropped.Load() }
