package netstack

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/loopback"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/netx/gvnet"
)

// DefaultMTU is the overlay MTU when Config.MTU is zero: a 1500-byte
// internet path minus the 80 bytes WireGuard needs in the worst case (IPv6
// outer header 40, UDP 8, WireGuard data header 16, Poly1305 tag 16).
const DefaultMTU = 1420

// InterfaceName is the name of the overlay interface, in Interfaces and in
// TUNAdapter.Name.
const InterfaceName = "wg0"

// TCP buffer ranges follow Linux's defaults (net.ipv4.tcp_rmem and
// tcp_wmem): small defaults that gVisor's auto-tuning (moderate receive
// buffer, send buffer sized from cwnd) grows to the maxima when a flow
// needs it, so thousands of idle agent connections stay cheap and a bulk
// transfer still fills the path.
const (
	tcpRecvMin, tcpRecvDefault, tcpRecvMax = 4 << 10, 128 << 10, 6 << 20
	tcpSendMin, tcpSendDefault, tcpSendMax = 4 << 10, 16 << 10, 4 << 20
)

const (
	loopbackNIC tcpip.NICID = 1
	overlayNIC  tcpip.NICID = 2
)

// Config configures a Stack. Address is required; every other field's zero
// value works.
type Config struct {
	// Address is the node's overlay address with the overlay's prefix
	// length, e.g. 100.64.1.2/10. Required. IPv4 or IPv6; the default
	// route of that family goes through the overlay interface.
	Address netip.Prefix

	// MTU is the overlay interface's MTU, the largest IP packet handed to
	// WireGuard. If zero, DefaultMTU (1420). Must be at least 1280 (the
	// IPv6 minimum) and at most 65535.
	MTU int

	// Logger receives the stack's few lifecycle messages. If nil, logs are
	// discarded.
	Logger *slog.Logger

	// Egress, if set, is asked before every outbound flow leaves through
	// the stack: each Dial, and each datagram a packet socket from
	// ListenPacket sends to a new destination. An error refuses it at
	// once (the caller gets a *net.OpError wrapping it) instead of letting
	// packets go out. It is how a sandbox enforces its egress policy
	// inside the netstack; it must be safe for concurrent use and fast.
	// Replies on connections accepted from peers are not egress.
	Egress EgressFunc

	// Batch is the most packets one TUN read hands wireguard-go, and so how
	// many 64 KiB buffers wireguard-go keeps for its TUN reader and for each
	// receive path for the device's life (the larger of this and the
	// Bind's batch). If zero, BatchSize (64, whole GSO runs). A process that
	// runs hundreds of nodes (the lab) asks for fewer: at 64 the buffers
	// are about 6 MiB per node, most of an idle lab node's heap.
	Batch int
}

// EgressFunc decides whether the stack may open a flow to dst; network is
// "tcp" or "udp". A nil error allows it.
type EgressFunc func(network string, dst netip.AddrPort) error

// Stack is a user-space TCP/IP stack (gVisor's tcpip) whose only way out is
// a TUNAdapter: hand TUN() to wireguard-go's device.NewDevice and every
// packet the stack sends to the overlay goes through WireGuard. It
// implements netx.Network, so any Lattice component can listen and dial on
// the overlay without privileges; its Dial, Listen and ListenPacket are
// those of gvnet.Network, which lab hosts use too. A Stack also has a
// loopback interface (127.0.0.1/8, ::1).
type Stack struct {
	*gvNetwork // Dial, Listen, ListenPacket, DialTCP, Ping

	addr   netip.Prefix
	mtu    int
	log    *slog.Logger
	stack  *stack.Stack
	tun    *TUNAdapter
	egress EgressFunc
	direct *directTable // agents' TCP flows carried as packets (Gateway)
	closed atomic.Bool
	once   sync.Once
}

// gvNetwork names the embedded adapter so that its field is unexported.
type gvNetwork = gvnet.Network

var _ netx.Network = (*Stack)(nil)

// New validates cfg and brings a Stack up.
func New(cfg Config) (*Stack, error) {
	if !cfg.Address.IsValid() {
		return nil, ErrNoAddress
	}
	if cfg.Address.Addr().Is4In6() {
		return nil, fmt.Errorf("netstack: address %v: want an IPv4 or IPv6 address, not IPv4-mapped", cfg.Address)
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = DefaultMTU
	}
	if mtu < 1280 || mtu > 65535 {
		return nil, fmt.Errorf("netstack: MTU %d: want 1280..65535", mtu)
	}
	batch := cfg.Batch
	if batch == 0 {
		batch = BatchSize
	}
	if batch < 1 || batch > BatchSize {
		return nil, fmt.Errorf("netstack: batch %d: want 1..%d", cfg.Batch, BatchSize)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stack{
		addr:   cfg.Address,
		mtu:    mtu,
		log:    log.With("component", "netstack", "addr", cfg.Address.String()),
		tun:    newTUNAdapterBatch(mtu, batch),
		egress: cfg.Egress,
	}
	if err := s.build(); err != nil {
		s.stack.Close()
		s.stack.Wait()
		_ = s.tun.Close()
		return nil, fmt.Errorf("netstack: %w", err)
	}
	s.direct = newDirectTable(s.stack, cfg.Address.Addr())
	s.tun.direct = s.direct
	n, err := gvnet.New(gvnet.Config{
		Stack:      s.stack,
		PreferIPv6: cfg.Address.Addr().Is6(),
		ErrClosed:  ErrClosed,
		Egress:     cfg.Egress,
	})
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("netstack: %w", err)
	}
	s.gvNetwork = n
	s.log.Debug("stack up", "mtu", mtu)
	return s, nil
}

func (s *Stack) build() error {
	s.stack = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// Connections to our own overlay address never leave the stack.
		HandleLocal: true,
	})
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	// CUBIC, as Linux peers run, rather than gVisor's default Reno: it
	// regains the window faster after a loss on a long path.
	cubic := tcpip.CongestionControlOption("cubic")
	// No RACK loss detection: classic SACK recovery (RFC 6675). After a
	// path failover, gVisor's RACK and its RTO recovery together sent two
	// segments per RTO and no more: every ACK marked the rest of the old
	// window lost and re-entered fast recovery with cwnd 2, until SndUna
	// passed the old high mark, tens of seconds later (TestDirectCutMidTransfer
	// failed about 2 runs in 5, and passing runs took up to 88 s; without
	// RACK, 10 of 10 passed in 16-17 s).
	noRACK := tcpip.TCPRecovery(0)
	opts := []tcpip.SettableTransportProtocolOption{
		&sack, &moderate, &cubic, &noRACK,
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcpRecvMin, Default: tcpRecvDefault, Max: tcpRecvMax},
		&tcpip.TCPSendBufferSizeRangeOption{Min: tcpSendMin, Default: tcpSendDefault, Max: tcpSendMax},
	}
	for _, o := range opts {
		if err := s.stack.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			return fmt.Errorf("tcp option %T: %s", o, err)
		}
	}

	if err := s.stack.CreateNICWithOptions(loopbackNIC, loopback.New(), stack.NICOptions{Name: "lo"}); err != nil {
		return fmt.Errorf("create lo: %s", err)
	}
	for _, p := range []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")} {
		if err := s.addAddress(loopbackNIC, p); err != nil {
			return err
		}
	}
	if err := s.stack.CreateNICWithOptions(overlayNIC, s.tun.linkEndpoint(), stack.NICOptions{Name: InterfaceName}); err != nil {
		return fmt.Errorf("create %s: %s", InterfaceName, err)
	}
	if err := s.addAddress(overlayNIC, s.addr); err != nil {
		return err
	}
	table := []tcpip.Route{
		{Destination: subnet(netip.MustParsePrefix("127.0.0.0/8")), NIC: loopbackNIC},
		{Destination: subnet(netip.MustParsePrefix("::1/128")), NIC: loopbackNIC},
	}
	if s.addr.Addr().Is4() {
		table = append(table, tcpip.Route{Destination: header.IPv4EmptySubnet, NIC: overlayNIC})
	} else {
		table = append(table, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: overlayNIC})
	}
	s.stack.SetRouteTable(table)
	return nil
}

func (s *Stack) addAddress(nic tcpip.NICID, p netip.Prefix) error {
	proto := ipv4.ProtocolNumber
	if p.Addr().Is6() {
		proto = ipv6.ProtocolNumber
	}
	if err := s.stack.AddProtocolAddress(nic, tcpip.ProtocolAddress{
		Protocol:          proto,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: gvnet.ToTCPIP(p.Addr()), PrefixLen: p.Bits()},
	}, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("address %v: %s", p, err)
	}
	return nil
}

// TUN returns the stack's packet device, for wireguard-go's
// device.NewDevice. The device's Close (which Device.Close calls) cuts the
// stack off the overlay; the stack itself lives until Stack.Close.
func (s *Stack) TUN() *TUNAdapter { return s.tun }

// Interfaces implements netx.Network: loopback, then the overlay interface.
func (s *Stack) Interfaces() ([]netx.Interface, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("netstack: interfaces: %w", ErrClosed)
	}
	return []netx.Interface{
		{
			Index: int(loopbackNIC), Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagLoopback | net.FlagRunning,
			Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128")},
		},
		{
			Index: int(overlayNIC), Name: InterfaceName, MTU: s.mtu,
			Flags: net.FlagUp | net.FlagPointToPoint | net.FlagRunning,
			Addrs: []netip.Prefix{s.addr},
		},
	}, nil
}

// DirectFlows reports how many agent TCP flows the stack carries as
// packets (GatewayConfig.Overlay).
func (s *Stack) DirectFlows() int { return s.direct.Len() }

// Address returns the overlay address the stack was configured with.
func (s *Stack) Address() netip.Prefix { return s.addr }

// Close closes the TUNAdapter and the gVisor stack, ending every socket
// opened on it, and waits until the stack's goroutines have stopped. It is
// idempotent and always returns nil.
func (s *Stack) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		if s.gvNetwork != nil {
			_ = s.gvNetwork.Close()
		}
		_ = s.tun.Close()
		s.stack.Close()
		s.stack.Wait()
		s.log.Debug("stack closed")
	})
	return nil
}

func subnet(p netip.Prefix) tcpip.Subnet {
	p = p.Masked()
	sn, err := tcpip.NewSubnet(gvnet.ToTCPIP(p.Addr()), tcpip.MaskFromBytes(netipMask(p)))
	if err != nil {
		panic(fmt.Sprintf("netstack: subnet %v: %v", p, err)) // unreachable: p is masked
	}
	return sn
}

func netipMask(p netip.Prefix) []byte {
	m := make([]byte, p.Addr().BitLen()/8)
	for i := range p.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
