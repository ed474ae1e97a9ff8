package fabric

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/netip"
	"sort"
	"sync"

	"github.com/latticelab/lattice/lab/clock"
)

// Config configures a Fabric. Its zero value works.
type Config struct {
	// Logger receives the fabric's logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Clock drives NAT mapping lifetimes. If nil, a *clock.Lab that tests
	// can advance (see Fabric.Clock).
	Clock clock.Clock
	// Seed seeds every random decision (impairments, NAT port choice), so a
	// topology built the same way behaves the same way. If zero, 1.
	Seed uint64
	// RXQueueLen bounds each interface's receive queue, in frames. If zero,
	// 4096.
	RXQueueLen int
	// OrderInstants, in a testing/synctest bubble, orders each virtual
	// instant's frames and capture records (instant.go), so that the
	// order goroutines run in at one instant does not show on the wire or
	// in the captures. It costs a bubble-wide synctest.Wait per hop of a
	// frame (a 4 MiB transfer with no link delay took about twice the
	// wall time), and two goroutines of one bubble may not call
	// synctest.Wait at once, so it is for runs that compare captures.
	// Outside a bubble it does nothing.
	OrderInstants bool
}

// Fabric is an emulated network: segments, hosts with their own gVisor
// stacks, and routers that forward, NAT and filter between segments. All of it
// runs in-process with no privileges. Build it with AddNetwork, AddHost and
// AddRouter; Close tears everything down and stops every goroutine.
type Fabric struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	mu       sync.Mutex // guards the following fields
	networks map[string]*Network
	netList  []*Network
	hosts    map[string]*Host
	routers  map[string]*Router
	// kernelHosts are network namespaces joined through TUN devices.
	kernelHosts map[string]*KernelHost
	closed      bool

	inst *instants // orders each virtual instant; nil outside a bubble
}

// New returns an empty fabric.
func New(cfg Config) (*Fabric, error) {
	if cfg.RXQueueLen < 0 {
		return nil, fmt.Errorf("%w: negative RXQueueLen %d", ErrInvalid, cfg.RXQueueLen)
	}
	if cfg.RXQueueLen == 0 {
		cfg.RXQueueLen = 4096
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	clk := cfg.Clock
	if clk == nil {
		clk = &clock.Lab{}
	}
	var inst *instants
	if cfg.OrderInstants && bubbled() {
		inst = newInstants()
	}
	return &Fabric{
		inst:        inst,
		cfg:         cfg,
		log:         log.With("component", "fabric"),
		clock:       clk,
		networks:    make(map[string]*Network),
		hosts:       make(map[string]*Host),
		routers:     make(map[string]*Router),
		kernelHosts: make(map[string]*KernelHost),
	}, nil
}

// Clock returns the clock that drives NAT lifetimes. When the fabric was
// built without one it is a *clock.Lab, which tests can Advance.
func (f *Fabric) Clock() clock.Clock { return f.clock }

// seedFor derives a per-element seed so adding one element does not change
// the random decisions of another.
func (f *Fabric) seedFor(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64() ^ f.cfg.Seed*0x9e3779b97f4a7c15
}

// AddNetwork adds a segment. Its name must be new; its prefix must be valid.
// Whether it may overlap another network's prefix depends on the routers
// that join them (two home LANs behind different NATs may both be
// 192.168.1.0/24), so overlaps are checked when routers are added.
func (f *Fabric) AddNetwork(cfg NetworkConfig) (*Network, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: network with no name", ErrInvalid)
	}
	if !cfg.Prefix.IsValid() && !cfg.Prefix6.IsValid() {
		return nil, fmt.Errorf("%w: network %q: no prefix: give an IPv4 prefix, an IPv6 prefix or both", ErrInvalid, cfg.Name)
	}
	for _, p := range []struct {
		prefix netip.Prefix
		v6     bool
	}{{cfg.Prefix, false}, {cfg.Prefix6, true}} {
		if !p.prefix.IsValid() {
			continue
		}
		if p.prefix != p.prefix.Masked() {
			return nil, fmt.Errorf("%w: network %q: prefix %v has host bits set (did you mean %v?)", ErrInvalid, cfg.Name, p.prefix, p.prefix.Masked())
		}
		if p.prefix.Addr().Is6() != p.v6 || p.prefix.Addr().Is4In6() {
			family := "IPv4"
			if p.v6 {
				family = "IPv6"
			}
			return nil, fmt.Errorf("%w: network %q: prefix %v is not an %s prefix", ErrInvalid, cfg.Name, p.prefix, family)
		}
	}
	if cfg.Prefix6.IsValid() && cfg.Prefix6.Bits() > 126 {
		return nil, fmt.Errorf("%w: network %q: IPv6 prefix %v leaves no room for hosts", ErrInvalid, cfg.Name, cfg.Prefix6)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 576 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("%w: network %q: MTU %d outside 576..65535", ErrInvalid, cfg.Name, cfg.MTU)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if f.networks[cfg.Name] != nil {
		return nil, fmt.Errorf("%w: network %q already exists", ErrInvalid, cfg.Name)
	}
	if len(f.netList) >= 1<<16 {
		return nil, fmt.Errorf("%w: too many networks", ErrInvalid)
	}
	n := &Network{f: f, name: cfg.Name, prefix: cfg.Prefix, prefix6: cfg.Prefix6, mtu: cfg.MTU, index: uint16(len(f.netList))}
	f.networks[cfg.Name] = n
	f.netList = append(f.netList, n)
	return n, nil
}

// Network returns the named network or nil.
func (f *Fabric) Network(name string) *Network {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.networks[name]
}

// Host returns the named host or nil.
func (f *Fabric) Host(name string) *Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[name]
}

// Router returns the named router or nil.
func (f *Fabric) Router(name string) *Router {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.routers[name]
}

// nameFreeLocked reports an error if a host or router already has name.
func (f *Fabric) nameFreeLocked(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s with no name", ErrInvalid, kind)
	}
	if f.hosts[name] != nil || f.routers[name] != nil || f.kernelHosts[name] != nil {
		return fmt.Errorf("%w: %s %q: name already used", ErrInvalid, kind, name)
	}
	return nil
}

// buildInterfacesLocked validates and creates a node's interfaces, and checks
// that no two of them sit on overlapping networks.
func (f *Fabric) buildInterfacesLocked(owner string, cfgs []InterfaceConfig) ([]*Interface, error) {
	if len(cfgs) == 0 {
		return nil, fmt.Errorf("%w: %q has no interfaces", ErrInvalid, owner)
	}
	var ifcs []*Interface
	fail := func(err error) ([]*Interface, error) {
		for _, ifc := range ifcs {
			ifc.close()
		}
		return nil, err
	}
	names := map[string]bool{}
	for i, c := range cfgs {
		ifc, err := newInterface(f, owner, i, c)
		if err != nil {
			return fail(err)
		}
		ifcs = append(ifcs, ifc)
		if names[ifc.name] {
			return fail(fmt.Errorf("%w: %s: duplicate interface name", ErrInvalid, ifc))
		}
		names[ifc.name] = true
		for _, other := range ifcs[:len(ifcs)-1] {
			if other.network.overlaps(ifc.network) {
				return fail(fmt.Errorf("%w: %q attaches to overlapping %v and %v", ErrInvalid, owner, other.network, ifc.network))
			}
		}
		for _, a := range ifc.Addrs() {
			if other := ifc.network.neighbor(a); other != nil {
				return fail(fmt.Errorf("%w: %s: address %v on %v is already used by %s", ErrInvalid, ifc, a, ifc.network, other))
			}
		}
	}
	return ifcs, nil
}

// attachLocked gives each interface its port on its network.
func attachLocked(ifcs []*Interface) error {
	for _, ifc := range ifcs {
		if err := ifc.network.attach(ifc); err != nil {
			return err
		}
	}
	return nil
}

// checkRealmsLocked reports networks whose prefixes overlap while being
// joined, directly or through other plain (non-NAT) routing, without a NAT
// between them. Such a topology would make routing ambiguous. A NAT
// translates IPv4 only, so IPv6 prefixes must not overlap across it either.
func (f *Fabric) checkRealmsLocked(joiner string, extra *Router) error {
	routers := make([]*Router, 0, len(f.routers)+1)
	for _, r := range f.routers {
		routers = append(routers, r)
	}
	if extra != nil {
		routers = append(routers, extra)
	}
	nets := append([]*Network(nil), f.netList...)
	sort.Slice(nets, func(i, j int) bool { return nets[i].index < nets[j].index })
	for _, v6 := range []bool{false, true} {
		parent := map[*Network]*Network{}
		var find func(n *Network) *Network
		find = func(n *Network) *Network {
			p, ok := parent[n]
			if !ok || p == n {
				parent[n] = n
				return n
			}
			r := find(p)
			parent[n] = r
			return r
		}
		for _, r := range routers {
			var first *Network
			for _, ifc := range r.ifcs {
				if !v6 && r.nat != nil && ifc == r.uplink {
					continue
				}
				if first == nil {
					first = ifc.network
				} else {
					parent[find(first)] = find(ifc.network)
				}
			}
		}
		for i, a := range nets {
			for _, b := range nets[i+1:] {
				pa, pb := a.prefix, b.prefix
				if v6 {
					pa, pb = a.prefix6, b.prefix6
				}
				if pa.IsValid() && pb.IsValid() && pa.Overlaps(pb) && find(a) == find(b) {
					if v6 {
						return fmt.Errorf("%w: router %q joins %v and %v, whose IPv6 prefixes overlap (no NAT translates IPv6)", ErrInvalid, joiner, a, b)
					}
					return fmt.Errorf("%w: router %q joins %v and %v, which overlap, with no NAT between them", ErrInvalid, joiner, a, b)
				}
			}
		}
	}
	return nil
}

// Close tears the fabric down: every host stack, router and link stops and
// every goroutine the fabric started has returned when Close returns.
// Idempotent.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	hosts := make([]*Host, 0, len(f.hosts))
	for _, h := range f.hosts {
		hosts = append(hosts, h)
	}
	routers := make([]*Router, 0, len(f.routers))
	for _, r := range f.routers {
		routers = append(routers, r)
	}
	kernel := make([]*KernelHost, 0, len(f.kernelHosts))
	for _, k := range f.kernelHosts {
		kernel = append(kernel, k)
	}
	f.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.close())
	}
	for _, k := range kernel {
		errs = append(errs, k.close())
	}
	for _, r := range routers {
		r.close()
	}
	if f.inst != nil {
		f.inst.close()
	}
	return errors.Join(errs...)
}

func addrOnLink(ifcs []*Interface, a netip.Addr) *Interface {
	for _, ifc := range ifcs {
		if ifc.network.contains(a) {
			return ifc
		}
	}
	return nil
}
