package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/transport/v5"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// Provisioner creates the interface WireGuard drives: a user-space
// netstack (no privileges) or a kernel TUN device (root).
type Provisioner interface {
	// Up creates the interface with the node's overlay address and
	// returns its TUN device; WireGuard owns and closes it.
	Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error)
}

// Config configures a Node.
type Config struct {
	// Name is the node's name; required on first start, checked after.
	Name string
	// Network the node's sockets and control connections use. Required.
	Network netx.Network
	// Control is the registration URL: tls://host:port or
	// https://host:port, optionally pinning control's certificate with
	// ?fingerprint=HEX; nats:// and http:// only to loopback or with
	// ?insecure=1 (see control.ParamFingerprint). Required.
	Control string
	// Token is the join token. Required.
	Token string
	// Credentials keep the identity. If nil, an ephemeral one (mem:).
	Credentials CredentialStore
	// ListenPort is the shared ICE + WireGuard UDP port. If zero, 51820;
	// -1 lets the system pick a free one.
	ListenPort int
	// ListenAddr restricts the socket to one address (host candidates
	// then come only from it, loopback included, unless ICE.Candidates
	// says otherwise); an IPv4 one makes the socket IPv4 only. If zero,
	// every address of both families (a dual-stack socket on [::]), or of
	// IPv4 where the Network has no IPv6.
	ListenAddr netip.Addr
	// Provisioner makes the interface wireguard-go runs on in process.
	// Required unless Device is set.
	Provisioner Provisioner
	// Device, if set, makes a WireGuard device with its own UDP socket
	// (kernel WireGuard), fed through the node's Bind; Provisioner is then
	// unused. If nil, wireguard-go runs in process on Provisioner's
	// interface.
	Device DeviceOpener
	// MTU of the overlay interface. If zero, 1420 (1500 minus WireGuard's
	// 80 bytes of overhead).
	MTU int
	// NAT64 is the /96 prefix of the NAT64 (RFC 6146) the host reaches
	// IPv4 through, as RFC 7050 discovery finds it: on a host without
	// IPv4, relays control names by IPv4 address are dialed at that
	// address in the prefix (RFC 6052). If zero, such a host uses only the
	// relays' IPv6 addresses.
	NAT64 netip.Prefix
	// Relay dials the relay control names. If nil, LRP over Network
	// (LRPRelay) with RelayTransport.
	Relay RelayDialer
	// RelayTransport is the LRP transport when Relay is nil: "tcp",
	// "quic" or "race" (both, TCP unless QUIC measures clearly faster). If empty, "tcp".
	RelayTransport string
	// ICE tunes path selection.
	ICE ICEConfig
	// Batch is the Bind's batch: how many packets in-process WireGuard
	// reads from the node's socket and its relay at once. wireguard-go
	// reads max(Batch, the interface's batch) on each of its three read
	// paths (socket, relay, interface) and holds that many 64 KiB buffers
	// for each for the device's life: 3 MiB of heap per node at 16,
	// whatever its traffic. If zero, 16; a process that runs hundreds of
	// nodes (the lab) asks for fewer, with an interface batched alike.
	Batch int
	// Logger receives the node's logs, each with the node's name; pion's
	// (component=ice) come at Debug and below, its trace at Debug-4 (see
	// pionlog.go). If nil, logs are discarded.
	Logger *slog.Logger
}

// Node is a running Lattice node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	id      *Identity
	resp    *controlapi.RegisterResponse
	session atomic.Pointer[controlapi.Session]
	regMu   sync.Mutex // serializes re-registration
	// controlKey is control's register key, for the next registration's
	// stamped proof: the control URL's or the stored identity's at start,
	// then the last answer's (learnControlKey).
	controlKey atomic.Pointer[key.Public]
	epoch      atomic.Uint64 // our registration's epoch (control.RegisterResponse.Epoch)
	mux        *Mux
	udpMux     *ice.UniversalUDPMuxDefault
	consent    *consentTable // our consent requests in flight (consent.go)
	// networkTypes are the candidate families the socket carries.
	networkTypes []ice.NetworkType
	bind         *Bind
	dev          Device
	served       io.Closer // the Provisioner's DeviceServer, if any
	relay        RelayClient
	env          *peerEnv
	tun          *unreachableTUN

	// sessionUp is closed once session is set: peers added from the
	// registration's list may signal before (signalControl waits).
	sessionUp   chan struct{}
	sessionOnce sync.Once

	// peerMu serializes changes to the peer set (setPeer, removePeer),
	// taken before mu: each change runs whole, so what WireGuard and the
	// Bind hold for a peer follows the last change applied. The session's
	// events and a peer list after a reconnect (reconcile) apply changes
	// from two goroutines; an offline and an online applied at once left
	// the node running a peer WireGuard no longer held.
	peerMu sync.Mutex
	// revs is the registry revisions applied of each peer (peerrev.go).
	// Guarded by peerMu.
	revs revBook

	mu      sync.Mutex
	peers   map[string]*peer        // online peers, by node ID
	early   earlySignals            // signals from nodes not yet peers (early.go)
	offline map[string]*offlinePeer // registered peers that are not running, by node ID
	closed  bool
	// eventSeq counts the peer events applied; while listing (the peer
	// lists being asked for) is above zero, eventAt holds the count at
	// each node's last one (see reconcile).
	eventSeq uint64
	listing  int
	eventAt  map[string]uint64

	// heartbeat's (see presence.go): stopHeartbeat ends it and
	// heartbeatDone says it has.
	stopHeartbeat context.CancelFunc
	heartbeatDone chan struct{}

	// life ends when Close begins (end cancels it, under mu): probeLoop
	// and reregister run under it. probeKick is a kick when a direct path
	// goes silent; probesDone says probeLoop has returned, and rereg
	// counts the reregister calls in flight (added under mu while life
	// lasts), which Close waits for.
	life       context.Context
	end        context.CancelFunc
	probeKick  chan struct{}
	probesDone chan struct{}
	rereg      sync.WaitGroup
	relayKick  sync.WaitGroup // addEarlyPeers' wait for the relay

	// switches and ice count every peer's path switches and ICE
	// attempts (counts.go).
	switches switchCounts
	ice      iceCounts
}

// Start registers the node and brings up its interface, relay and peers.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	switch {
	case cfg.Network == nil:
		return nil, errors.New("node: no Network")
	case cfg.Control == "":
		return nil, errors.New("node: no control URL")
	case cfg.Token == "":
		return nil, errors.New("node: no join token")
	case cfg.Provisioner == nil && cfg.Device == nil:
		return nil, errors.New("node: no Provisioner")
	case cfg.Relay == nil && cfg.RelayTransport != "" && !slices.Contains(relayTransports, cfg.RelayTransport):
		return nil, fmt.Errorf("node: RelayTransport %q: want one of %s", cfg.RelayTransport, strings.Join(relayTransports, ", "))
	case cfg.NAT64.IsValid() && (!cfg.NAT64.Addr().Is6() || cfg.NAT64.Addr().Is4In6() || cfg.NAT64.Bits() != 96):
		return nil, fmt.Errorf("node: NAT64 %v: want an IPv6 /96 (RFC 6052)", cfg.NAT64)
	}
	if cfg.Credentials == nil {
		cfg.Credentials = OpenCredentials("mem:")
	}
	switch {
	case cfg.ListenPort == 0:
		cfg.ListenPort = 51820
	case cfg.ListenPort < 0:
		cfg.ListenPort = 0
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1420
	}
	if la := cfg.ListenAddr; la.IsValid() && !la.IsUnspecified() && cfg.ICE.Candidates == nil {
		// The socket answers on that address only, so it is the only
		// host candidate, even if it is loopback.
		cfg.ICE.Candidates = func(a netip.Addr) bool { return a == la }
	}
	cfg.ICE.defaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: log, peers: map[string]*peer{}, offline: map[string]*offlinePeer{},
		probeKick: make(chan struct{}, 1), probesDone: make(chan struct{}), stopHeartbeat: func() {},
		sessionUp: make(chan struct{})}
	n.life, n.end = context.WithCancel(context.Background())
	go n.probeLoop(n.life)
	if err := n.start(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// start brings the node up in the order each step needs the last:
// identity and registration (the overlay address and the peers), the
// shared socket, the relay, WireGuard and the peers, then the control
// session. The peers are added before the session so that their first
// handshakes cross the relay while it opens; their signals wait for it.
func (n *Node) start(ctx context.Context) error {
	// The session's connection is dialed while the registration is under
	// way (control.Predialer). A registration of one request (a stamped
	// proof, with the control URL's register key) ends one round trip
	// after its NATS connection is up, before a dial started then would
	// be: it is dialed once the registration's TCP connection is up
	// (Join.Dialed), two round trips ahead.
	pre := controlapi.NewPredialer(n.cfg.Network, n.cfg.Control)
	defer pre.Close()
	dialed := func() {
		if n.controlKey.Load() != nil { // one request: a stamped proof
			pre.Start()
		}
	}
	resp, err := n.registerIdentity(ctx, pre.Start, dialed)
	if err != nil {
		return err
	}
	pn, err := n.openSocket(ctx, resp.Address.Addr())
	if err != nil {
		return err
	}
	if err := n.dialRelay(ctx, resp); err != nil {
		return err
	}
	if err := n.startWireGuard(ctx, resp.Address); err != nil {
		return err
	}
	opts, err := n.agentOptions(pn, resp)
	if err != nil {
		return err
	}
	n.env = &peerEnv{
		priv: n.id.Private, pub: n.id.PublicKey(), bind: n.bind, udpMux: n.udpMux, agentOpt: opts,
		cfg: n.cfg.ICE, log: n.log, now: time.Now, directLost: n.kickProbes, epoch: n.epoch.Load,
		signal: n.signalControl, keepalive: n.setKeepalive, stun: resp.STUN, trim: n.trimWG, switched: n.switches.add, ice: &n.ice,
		consent: n.consent,
	}
	n.addEarlyPeers(resp.Peers)
	return n.join(ctx, pre, resp)
}

// registerIdentity loads (or creates) the identity, registers it and
// saves what control assigned.
func (n *Node) registerIdentity(ctx context.Context, connected, dialed func()) (*controlapi.RegisterResponse, error) {
	id, created, err := LoadOrCreate(n.cfg.Credentials, n.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("node: identity: %w", err)
	}
	n.id = id
	// Control's register key: the one the URL names (the operator's is
	// the newer word), else the one the last run learnt.
	if k := controlapi.URLControlKey(n.cfg.Control); !k.IsZero() {
		n.learnControlKey(k)
	} else {
		n.learnControlKey(id.ControlKey)
	}
	n.log = n.log.With("node", id.Name)
	var resp *controlapi.RegisterResponse
	err = retryControl(ctx, n.log, "registration", func(ctx context.Context) (err error) {
		resp, err = n.register(ctx, connected, dialed)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.resp = resp
	n.epoch.Store(resp.Epoch)
	if id.NodeID != "" && (id.NodeID != resp.NodeID || id.Address != resp.Address) {
		n.log.Warn("control assigned a different identity", "was", id.Address, "now", resp.Address)
	}
	id.NodeID, id.Address = resp.NodeID, resp.Address
	if !resp.ControlKey.IsZero() {
		id.ControlKey = resp.ControlKey
	}
	if err := n.cfg.Credentials.Save(id); err != nil {
		return nil, fmt.Errorf("node: save identity: %w", err)
	}
	n.log.Info("registered", "id", resp.NodeID, "address", resp.Address, "new", created, "peers", len(resp.Peers))
	return resp, nil
}

// openSocket opens the UDP socket ICE and WireGuard share and the mux,
// pion UDPMux and Bind over it. It returns the Network as ICE sees it
// (without the overlay at overlay).
func (n *Node) openSocket(ctx context.Context, overlay netip.Addr) (transport.Net, error) {
	pc, err := n.listenUDP(ctx)
	if err != nil {
		return nil, err
	}
	n.networkTypes = socketNetworkTypes(pc)
	if err := netx.SetSocketBuffers(pc, netx.SocketBufferSize); err != nil {
		n.log.Warn("UDP socket buffers stay small; bursts may be dropped", "err", err)
	}
	n.mux = NewMux(pc, n.log)
	pn, err := netx.PionNet(withoutOverlay{n.cfg.Network, overlay})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.consent = newConsentTable(n.mux)
	stunConn := &consentConn{PacketConn: n.mux.STUNConn(), table: n.consent}
	n.udpMux = ice.NewUniversalUDPMuxDefault(ice.UniversalUDPMuxParams{UDPConn: stunConn, Net: pn, Logger: n.pionLogs().NewLogger("udpmux")})
	n.bind = NewBind(n.mux)
	n.bind.SetSelf(n.id.PublicKey())
	if n.cfg.Batch > 0 {
		n.bind.batch = n.cfg.Batch
	}
	n.bind.SetRelayUnanswered(n.kickProbes)
	return pn, nil
}

// join opens the control session on nw, brings the peers to control's
// list as the session sees it and starts the heartbeat.
func (n *Node) join(ctx context.Context, nw netx.Network, resp *controlapi.RegisterResponse) error {
	var peers *controlapi.PeerList
	mark := n.beginList()
	defer n.endList()
	if err := retryControl(ctx, n.log, "control session", func(ctx context.Context) (err error) {
		peers, err = n.connectSession(ctx, nw, resp)
		return err
	}); err != nil {
		return err
	}
	// Peers that registered or left between our registration and the
	// session's subscriptions were announced to no one: the list asked
	// once they were in place has them. Without it, the registration's
	// list stays.
	if peers != nil {
		n.reconcile(*peers, mark)
	}
	n.startHeartbeat()
	return nil
}

// Identity returns the node's identity.
func (n *Node) Identity() Identity { return *n.id }

// Address is the node's overlay address.
func (n *Node) Address() netip.Prefix { return n.id.Address }

// Close stops the node: peers, WireGuard, relay, control session, socket.
// It tells control the node is going offline, so peers stop sending to it
// at once (see presence.go), but does not deregister: a restarted node
// keeps its identity and address.
func (n *Node) Close() error {
	n.mu.Lock()
	n.end()
	n.mu.Unlock()
	<-n.probesDone
	n.rereg.Wait()
	n.relayKick.Wait()
	n.leave()
	n.mu.Lock()
	n.closed = true
	peers := n.peers
	n.peers = map[string]*peer{}
	n.mu.Unlock()
	for _, p := range peers {
		p.close()
	}
	if s := n.session.Load(); s != nil {
		s.Close()
	}
	if n.served != nil {
		n.served.Close()
	}
	if n.dev != nil {
		n.dev.Close()
	}
	if n.relay != nil {
		n.relay.Close()
	}
	if n.udpMux != nil {
		n.udpMux.Close()
	}
	if n.mux != nil {
		n.mux.Close()
	}
	return nil
}
