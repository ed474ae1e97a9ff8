package netstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/latticelab/lattice/internal/splice"
)

// GatewayMTU is the agent's TUN MTU when GatewayConfig.MTU is zero. The
// link is a file descriptor between two processes on one host, not a
// wire, so it takes the largest packet a TUN device carries (as
// slirp4netns does): the agent's kernel sends 64 KB TCP segments and the
// gateway pays its per-packet costs once per 64 KB.
const GatewayMTU = 65520

const (
	gatewayNIC tcpip.NICID = 1
	// gatewayDialTimeout bounds how long a SYN waits for Dial.
	gatewayDialTimeout = 15 * time.Second
	// gatewayUDPIdle closes a UDP flow with no datagram either way for
	// this long (Linux's conntrack keeps an unreplied UDP flow 30 s, a
	// replied one 120 s).
	gatewayUDPIdle = 2 * time.Minute
	// gatewayPingTimeout bounds one echo request.
	gatewayPingTimeout = 5 * time.Second
	// gatewayMaxPings bounds the echo requests in flight; more are dropped.
	gatewayMaxPings = 64
	// gatewayMaxSYN bounds the handshakes waiting for Dial at once; more
	// SYNs are dropped and retransmitted.
	gatewayMaxSYN = 1024
)

// GatewayConfig configures a Gateway. Device, Agent and Dial are required.
type GatewayConfig struct {
	// Device is a TUN device (IFF_TUN|IFF_NO_PI: a read is one IP
	// packet) or a packet socket (each read one frame), non-blocking so
	// that Close can interrupt its reads. The Gateway owns it and closes
	// it.
	Device *os.File
	// LinkHeader is written before every packet and stripped from every
	// read: for a packet socket on a veth, the Ethernet header of frames
	// to the agent (destination, source, EtherType 0x0800); reads whose
	// EtherType is not IPv4 are dropped. Empty for a TUN device.
	LinkHeader []byte
	// VnetHdr says the device is a TUN device made with IFF_VNET_HDR: a
	// virtio_net_hdr comes before every packet, each way, so that with
	// offloads on (TUNSETOFFLOAD: TUN_F_CSUM, TUN_F_TSO4) the agent's
	// kernel hands over TCP segments of up to 64 KB to be cut (TSO) and
	// takes coalesced ones (GRO). Not with a LinkHeader.
	VnetHdr bool
	// Overlay, if set, carries the agent's TCP connections to addresses
	// in Overlay's prefix (other than its own) as packets between the
	// device and Overlay's WireGuard path, end to end between the agent's
	// TCP and the peer's, instead of terminating them in the gateway and
	// dialling again. Overlay's Config.Egress decides each on its SYN (a
	// refusal is a reset at once); Dial is not asked. Agent must be
	// Overlay's address: the agent's flows share it, each with a port of
	// Overlay's reserved for it (the agent's own when free).
	Overlay *Stack
	// MTU is the device's MTU. If zero, GatewayMTU.
	MTU int
	// Agent is the agent's IPv4 address: packets from any other source
	// are dropped, so the agent cannot speak for someone else.
	Agent netip.Addr
	// Dial makes a flow the agent opened: network "tcp" or "udp", address
	// the IP:port the agent sent to. It is called before the agent's SYN
	// is answered: an error refuses the connection with a reset at once.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Ping, if set, is asked about each ICMP echo request; nil means dst
	// answered, and the gateway replies to the agent with the request's
	// own identifier, sequence number and data. If nil, echo requests are
	// dropped.
	Ping func(ctx context.Context, dst netip.Addr) error
	// Logger receives the gateway's few lifecycle messages. If nil, logs
	// are discarded.
	Logger *slog.Logger
}

// Gateway is the far end of an agent's TUN device, as slirp4netns is for a
// rootless container: a gVisor stack in promiscuous mode that terminates
// every TCP connection and UDP flow the agent opens, to any address, and
// hands each to Dial, which decides, audits and makes it; with
// GatewayConfig.Overlay, TCP to overlay peers goes direct instead (see
// the package doc). ICMP echo requests go to Ping; other packets are
// dropped.
type Gateway struct {
	cfg    GatewayConfig
	log    *slog.Logger
	stack  *stack.Stack
	link   *fdLink
	direct *directPath   // nil without GatewayConfig.Overlay
	pings  chan struct{} // a slot per echo request in flight

	ctx    context.Context // ends at Close; flows' Dials use it
	cancel context.CancelFunc
	wg     sync.WaitGroup // flows and pings

	mu     sync.Mutex // guards the following fields
	conns  map[net.Conn]struct{}
	closed bool

	stats gatewayCounters

	closeOnce sync.Once
}

// GatewayStats counts what a Gateway did.
type GatewayStats struct {
	// TCP and UDP count the flows made (handed to Dial, or direct);
	// Refused those refused.
	TCP, UDP, Refused uint64
	// Direct counts the TCP flows carried as packets to the overlay
	// (GatewayConfig.Overlay).
	Direct uint64
	// Pings counts echo requests answered.
	Pings uint64
	// Dropped counts packets that were not the agent's IPv4, or were
	// echo requests nobody answered.
	Dropped uint64
}

type gatewayCounters struct {
	tcp, udp, refused, pings, dropped, direct atomic.Uint64
}

// NewGateway brings a Gateway up on cfg.Device; it reads from it until
// Close.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	switch {
	case cfg.Device == nil:
		return nil, errors.New("netstack: gateway: no device")
	case !cfg.Agent.Is4():
		return nil, fmt.Errorf("netstack: gateway: agent address %v: want IPv4", cfg.Agent)
	case cfg.Dial == nil:
		return nil, errors.New("netstack: gateway: no Dial")
	}
	if cfg.MTU == 0 {
		cfg.MTU = GatewayMTU
	}
	if h := len(cfg.LinkHeader); h != 0 && h != header.EthernetMinimumSize {
		return nil, fmt.Errorf("netstack: gateway: link header of %d bytes: want none or an Ethernet header (14)", h)
	}
	if cfg.VnetHdr && len(cfg.LinkHeader) != 0 {
		return nil, errors.New("netstack: gateway: a virtio_net_hdr with a link header: want one or the other")
	}
	if o := cfg.Overlay; o != nil && o.addr.Addr() != cfg.Agent {
		return nil, fmt.Errorf("netstack: gateway: agent address %v is not the overlay stack's %v", cfg.Agent, o.addr.Addr())
	}
	if cfg.MTU < 576 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("netstack: gateway: MTU %d: want 576..65535", cfg.MTU)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		cfg: cfg, log: log.With("component", "gateway"),
		pings: make(chan struct{}, gatewayMaxPings),
		conns: map[net.Conn]struct{}{},
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	link, err := newFDLink(cfg.Device, cfg.MTU, cfg.LinkHeader, cfg.VnetHdr)
	if err != nil {
		g.cancel()
		return nil, err
	}
	link.filter = g.inbound
	g.link = link
	if cfg.Overlay != nil {
		g.direct = newDirectPath(g, cfg.Overlay)
		link.direct = g.direct.send
	}
	if err := g.build(); err != nil {
		g.cancel()
		_ = link.close()
		return nil, fmt.Errorf("netstack: gateway: %w", err)
	}
	link.start()
	return g, nil
}

func (g *Gateway) build() error {
	g.stack = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	for _, o := range []tcpip.SettableTransportProtocolOption{
		&sack, &moderate,
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcpRecvMin, Default: tcpRecvDefault, Max: tcpRecvMax},
		&tcpip.TCPSendBufferSizeRangeOption{Min: tcpSendMin, Default: tcpSendDefault, Max: tcpSendMax},
	} {
		if err := g.stack.SetTransportProtocolOption(tcp.ProtocolNumber, o); err != nil {
			return fmt.Errorf("tcp option %T: %s", o, err)
		}
	}
	if err := g.stack.CreateNICWithOptions(gatewayNIC, g.link, stack.NICOptions{Name: "agent"}); err != nil {
		return fmt.Errorf("create nic: %s", err)
	}
	// Promiscuous: every destination is local, so the stack terminates
	// flows to any address. Spoofing: it answers from those addresses.
	if err := g.stack.SetPromiscuousMode(gatewayNIC, true); err != nil {
		return fmt.Errorf("promiscuous: %s", err)
	}
	if err := g.stack.SetSpoofing(gatewayNIC, true); err != nil {
		return fmt.Errorf("spoofing: %s", err)
	}
	g.stack.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: gatewayNIC}})
	tf := tcp.NewForwarder(g.stack, 0, gatewayMaxSYN, g.tcp)
	g.stack.SetTransportProtocolHandler(tcp.ProtocolNumber, tf.HandlePacket)
	uf := udp.NewForwarder(g.stack, g.udp)
	g.stack.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	return nil
}

// enter counts a flow or ping in; it fails once Close has begun.
func (g *Gateway) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// track adds or removes c from the connections Close cuts.
func (g *Gateway) track(c net.Conn, add bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !add {
		delete(g.conns, c)
		return true
	}
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

// tcp handles a SYN to an address nobody listens on, which in promiscuous
// mode is every one; gVisor calls it on a goroutine of its own.
func (g *Gateway) tcp(r *tcp.ForwarderRequest) {
	if !g.enter() {
		r.Complete(true)
		return
	}
	defer g.wg.Done()
	id := r.ID()
	dst := netip.AddrPortFrom(addrFromTCPIP(id.LocalAddress), id.LocalPort)
	ctx, cancel := context.WithTimeout(g.ctx, gatewayDialTimeout)
	out, err := g.cfg.Dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		g.stats.refused.Add(1)
		g.log.Debug("tcp refused", "dst", dst, "err", err)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		_ = out.Close()
		return
	}
	r.Complete(false)
	g.stats.tcp.Add(1)
	ep.SocketOptions().SetKeepAlive(true)
	in := gonet.NewTCPConn(&wq, ep)
	if !g.track(in, true) {
		_ = in.Close()
		_ = out.Close()
		return
	}
	defer g.track(in, false)
	if !g.track(out, true) {
		_ = in.Close()
		_ = out.Close()
		return
	}
	defer g.track(out, false)
	splice.Splice(in, out)
}

// udp handles the first datagram of a flow. gVisor calls it on its
// receive path, so it only makes the endpoint (which queues the datagram)
// and leaves the rest to a goroutine.
func (g *Gateway) udp(r *udp.ForwarderRequest) bool {
	if !g.enter() {
		return true
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		g.wg.Done()
		g.stats.dropped.Add(1)
		return true
	}
	id := r.ID()
	in := gonet.NewUDPConn(&wq, ep)
	go func() {
		defer g.wg.Done()
		g.relayUDP(in, id)
	}()
	return true
}

func (g *Gateway) relayUDP(in *gonet.UDPConn, id stack.TransportEndpointID) {
	defer in.Close()
	dst := netip.AddrPortFrom(addrFromTCPIP(id.LocalAddress), id.LocalPort)
	ctx, cancel := context.WithTimeout(g.ctx, gatewayDialTimeout)
	out, err := g.cfg.Dial(ctx, "udp", dst.String())
	cancel()
	if err != nil {
		g.stats.refused.Add(1)
		g.log.Debug("udp refused", "dst", dst, "err", err)
		// As a firewall that rejects: the agent's socket learns at once.
		_ = g.link.writev([][]byte{udpProhibited(id)})
		return
	}
	defer out.Close()
	if !g.track(in, true) {
		return
	}
	defer g.track(in, false)
	if !g.track(out, true) {
		return
	}
	defer g.track(out, false)
	g.stats.udp.Add(1)
	var last atomic.Int64 // unix nanoseconds of the last datagram either way
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyDatagrams(out, in, &last)
		_ = out.Close()
		_ = in.Close()
	}()
	copyDatagrams(in, out, &last)
	_ = out.Close()
	_ = in.Close()
	<-done
}

// copyDatagrams copies datagrams from src to dst until either fails or
// neither direction has carried one for gatewayUDPIdle.
func copyDatagrams(dst, src net.Conn, last *atomic.Int64) {
	buf := make([]byte, 1<<16)
	for {
		_ = src.SetReadDeadline(time.Unix(0, last.Load()).Add(gatewayUDPIdle))
		n, err := src.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < gatewayUDPIdle {
				continue // the other direction kept the flow alive
			}
			return
		}
		last.Store(time.Now().UnixNano())
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// Stats returns the gateway's counters.
func (g *Gateway) Stats() GatewayStats {
	c := &g.stats
	return GatewayStats{TCP: c.tcp.Load(), UDP: c.udp.Load(), Refused: c.refused.Load(), Direct: c.direct.Load(), Pings: c.pings.Load(), Dropped: c.dropped.Load()}
}

// Close stops reading the device, cuts every flow, closes the stack and
// the device and waits for the gateway's goroutines. It is idempotent and
// returns the device's close error.
func (g *Gateway) Close() error {
	var err error
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		conns := g.conns
		g.conns = map[net.Conn]struct{}{}
		g.mu.Unlock()
		g.cancel()
		for c := range conns {
			_ = c.Close()
		}
		err = g.link.close()
		g.wg.Wait()
		if g.direct != nil {
			g.direct.close()
		}
		g.stack.Close()
		g.stack.Wait()
	})
	return err
}

func addrFromTCPIP(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}
