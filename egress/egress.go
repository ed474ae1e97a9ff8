package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/egress/iptables"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/policy"
)

// Backends, for Config.Backend.
const (
	// Auto is eBPF in the Pro edition, iptables where eBPF is unavailable
	// and in the community edition.
	Auto = "auto"
	// EBPF is the TCX egress program (Pro); no fallback.
	EBPF = "ebpf"
	// IPTables is iptables and ip6tables chains.
	IPTables = "iptables"
)

// Backends lists the values Config.Backend takes.
var Backends = []string{Auto, EBPF, IPTables}

// Config configures an Enforcer. Interface is required, and Policy or
// Fixed.
type Config struct {
	// Interface is the overlay interface whose egress is filtered.
	Interface string
	// Netns is the network namespace (a path such as /run/netns/pod) the
	// interface is in. If empty, the process's.
	Netns string
	// Policy is the policy file (policy's YAML format), reloaded when it
	// changes (policy.Watcher) and by Reload.
	Policy string
	// Fixed, when Policy is empty, is the policy enforced instead of a
	// file's: nothing is watched and Reload has nothing to re-read.
	Fixed *policy.Policy
	// Overlay is the overlay prefix the policy is read with (Fixed too).
	// If zero, policy.DefaultOverlay.
	Overlay netip.Prefix
	// Backend is Auto, EBPF or IPTables. If empty, Auto.
	Backend string
	// NewFilter, if set, builds the kernel filter instead of Backend
	// (gvisor mode layers the eBPF filter behind iptables' REJECT): the
	// Enforcer then keeps it current with the policy and the peers and
	// closes it, but removes no earlier run's leftovers, and Backend()
	// says Custom. Netns, FailClosed, Audit and ReportAllowed are the
	// builder's business then.
	NewFilter func(p *policy.Policy, peers map[string][]netip.Addr) (Filter, error)
	// FailClosed keeps the filter in the kernel when the process dies
	// (kill -9, a crash): the eBPF link is pinned under PinRoot, and the
	// iptables chains stay (as they always do after a crash). The next
	// Start on the interface replaces it without a gap; Clear removes it.
	FailClosed bool
	// PinRoot is the bpffs directory for pinned links, one directory per
	// interface. If empty, /sys/fs/bpf/lattice (bpffs is mounted on
	// /sys/fs/bpf if it is not).
	PinRoot string
	// Peers returns the overlay peers' addresses by node name, for
	// peer:NAME rules; it is asked every PeerInterval and the filter
	// reloaded when the answer changes. If nil, no peers.
	Peers func() map[string][]netip.Addr
	// PeerInterval; if zero, 1s.
	PeerInterval time.Duration
	// Audit receives the kernel's decisions as "egress" events: every
	// denied packet (iptables: through NFLOG), and with ReportAllowed
	// every allowed new connection. If nil, they are not audited.
	Audit audit.Sink
	// ReportAllowed reports allowed new connections too.
	ReportAllowed bool
	// WatchInterval is the policy file's poll interval; if zero, 1s.
	WatchInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Custom is what Enforcer.Backend says of a Config.NewFilter filter.
const Custom = "custom"

// Filter is what a backend does.
type Filter interface {
	// Reload replaces the policy and the peers atomically; on error the
	// old rules stay in force.
	Reload(p *policy.Policy, peers map[string][]netip.Addr) error
	// Close removes the filter from the kernel (unpinning it).
	Close() error
}

var (
	_ Filter = (*bpf.Filter)(nil)
	_ Filter = (*iptables.Filter)(nil)
)

// Enforcer keeps a policy file enforced on an interface's egress.
type Enforcer struct {
	cfg     Config
	log     *slog.Logger
	backend string
	watcher *policy.Watcher
	kernel  Filter

	stop chan struct{}
	done chan struct{}

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards the following fields
	applied *policy.Policy
	peers   map[string][]netip.Addr
}

// Start loads cfg.Policy (or takes cfg.Fixed) and enforces it on
// cfg.Interface. A policy file that does not load is an error, and
// nothing is installed.
func Start(cfg Config) (*Enforcer, error) {
	if cfg.Interface == "" || cfg.Policy == "" && cfg.Fixed == nil {
		return nil, errors.New("egress: Interface and Policy (or Fixed) are required")
	}
	if cfg.Backend == "" {
		cfg.Backend = Auto
	}
	if !slices.Contains(Backends, cfg.Backend) {
		return nil, fmt.Errorf("egress: backend %q: want one of %v", cfg.Backend, Backends)
	}
	if cfg.Backend == EBPF {
		if err := edition.Require("the eBPF egress backend (--egress-backend ebpf)"); err != nil {
			return nil, err
		}
	}
	if cfg.PeerInterval == 0 {
		cfg.PeerInterval = time.Second
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = DefaultPinRoot
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Enforcer{cfg: cfg, log: log.With("component", "egress", "interface", cfg.Interface), stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Policy != "" {
		w, err := policy.NewWatcher(policy.WatcherConfig{Path: cfg.Policy, Interval: cfg.WatchInterval, Logger: e.log, Overlay: cfg.Overlay, OnChange: e.apply})
		if err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
		e.watcher = w
		e.applied = w.Current()
	} else {
		e.applied = cfg.Fixed.WithOverlay(cfg.Overlay)
	}
	e.mu.Lock()
	e.peers = e.askPeers()
	err := e.install()
	e.mu.Unlock()
	if err != nil {
		return nil, errors.Join(err, e.closeWatcher())
	}
	go e.followPeers()
	return e, nil
}

// install puts the backend in place, then removes what the other backend
// (or this one, unpinned) left from an earlier run.
func (e *Enforcer) install() error {
	if e.cfg.NewFilter != nil {
		f, err := e.cfg.NewFilter(e.applied, e.peers)
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		e.kernel, e.backend = f, Custom
		return nil
	}
	useBPF := e.cfg.Backend == EBPF || e.cfg.Backend == Auto && edition.Pro()
	if useBPF {
		f, err := e.startBPF()
		switch {
		case err == nil:
			e.kernel, e.backend = f, EBPF
		case e.cfg.Backend == Auto && errors.Is(err, bpf.ErrUnavailable):
			e.log.Warn("eBPF egress filter unavailable here; enforcing the policy with iptables", "err", err)
		default:
			return fmt.Errorf("egress: %w", err)
		}
	}
	if e.kernel == nil {
		cfg := iptables.Config{Interface: e.cfg.Interface, Netns: e.cfg.Netns, Policy: e.applied, Peers: e.peers,
			ReportAllowed: e.cfg.ReportAllowed, Logger: e.log}
		if e.cfg.Audit != nil {
			cfg.OnEvent = iptables.AuditTo(e.cfg.Audit, e.cfg.Interface, e.log)
		}
		f, err := iptables.New(cfg)
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		e.kernel, e.backend = f, IPTables
	}
	e.clearOthers()
	e.log.Info("egress policy enforced", "backend", e.backend, "policy", e.applied.String(), "fail_closed", e.cfg.FailClosed)
	return nil
}

func (e *Enforcer) startBPF() (*bpf.Filter, error) {
	cfg := bpf.Config{Interface: e.cfg.Interface, Policy: e.applied, Peers: e.peers, ReportAllowed: e.cfg.ReportAllowed, Logger: e.log}
	if e.cfg.Audit != nil {
		cfg.OnEvent = bpf.AuditTo(e.cfg.Audit, e.log)
	}
	if e.cfg.FailClosed {
		dir, err := pinDir(e.cfg.PinRoot, e.cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("egress: fail closed: %w", err)
		}
		cfg.PinDir = dir
	}
	if e.cfg.Netns == "" {
		return bpf.New(cfg)
	}
	var f *bpf.Filter
	err := inNetns(e.cfg.Netns, func() (err error) {
		f, err = bpf.New(cfg)
		return err
	})
	return f, err
}

// clearOthers removes leftovers the running filter does not own: an
// earlier run's iptables chains under the eBPF backend, its pinned link
// under iptables or without FailClosed. The new filter is in place by
// now, so the interface is never unfiltered.
func (e *Enforcer) clearOthers() {
	if e.backend != IPTables {
		if _, err := iptables.Remove(e.cfg.Interface, iptables.InNetns(e.cfg.Netns)); err != nil {
			e.log.Warn("an earlier run's iptables egress chains not removed", "err", err)
		}
	}
	if e.backend != EBPF || !e.cfg.FailClosed {
		if removed, err := unpin(e.cfg.PinRoot, e.cfg.Interface); err != nil {
			e.log.Warn("an earlier run's pinned eBPF filter not removed", "err", err)
		} else if removed {
			e.log.Info("removed the eBPF filter an earlier run pinned", "pin_root", e.cfg.PinRoot)
		}
	}
}

// Backend says what enforces the policy: EBPF or IPTables.
func (e *Enforcer) Backend() string { return e.backend }

// Policy returns the policy in force in the kernel.
func (e *Enforcer) Policy() *policy.Policy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied
}

// Reload re-reads the policy file now (SIGHUP). A file that does not
// load is logged and returned, and the policy in force stays. With
// Config.Fixed there is no file, and nothing to do.
func (e *Enforcer) Reload() error {
	if e.watcher == nil {
		return nil
	}
	if err := e.watcher.Reload(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

// apply is the watcher's OnChange: the kernel takes the new policy, or
// keeps the old one and says so.
func (e *Enforcer) apply(p *policy.Policy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kernel == nil {
		e.applied = p // Start installs it
		return
	}
	if err := e.kernel.Reload(p, e.peers); err != nil {
		e.log.Error("egress policy not applied; keeping the policy in force", "err", err, "rejected", p.String(), "policy", e.applied.String())
		return
	}
	e.applied = p
	e.log.Info("egress policy applied", "backend", e.backend, "policy", p.String())
}

func (e *Enforcer) askPeers() map[string][]netip.Addr {
	if e.cfg.Peers == nil {
		return nil
	}
	return e.cfg.Peers()
}

// followPeers reloads the filter when a peer's address changes.
func (e *Enforcer) followPeers() {
	defer close(e.done)
	t := time.NewTicker(e.cfg.PeerInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			if err := e.RefreshPeers(); err != nil {
				e.log.Warn("egress filter not updated for the peers", "err", err)
			}
		}
	}
}

// RefreshPeers asks Config.Peers now and reloads the filter if they
// changed.
func (e *Enforcer) RefreshPeers() error {
	peers := e.askPeers()
	e.mu.Lock()
	defer e.mu.Unlock()
	if maps.EqualFunc(peers, e.peers, slices.Equal) {
		return nil
	}
	if err := e.kernel.Reload(e.applied, peers); err != nil {
		return fmt.Errorf("egress: peers: %w", err)
	}
	e.peers = peers
	return nil
}

// Close stops following the file and the peers and removes the filter.
// It is idempotent.
func (e *Enforcer) Close() error {
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		errs := []error{e.closeWatcher()}
		e.mu.Lock()
		errs = append(errs, e.kernel.Close())
		e.mu.Unlock()
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

func (e *Enforcer) closeWatcher() error {
	if e.watcher == nil {
		return nil
	}
	return e.watcher.Close()
}
