package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/internal/owner"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/clock"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/topology"
)

// ErrNotAvailable marks what a topology asks for that the lab cannot run
// here (netns hosts without root; gvisor sandboxes without Pro, root or
// runsc); tests skip rather than fail.
var ErrNotAvailable = errors.New("not available")

// Config configures a Lab.
type Config struct {
	// Plan is the resolved topology. Required.
	Plan *topology.Plan
	// Nodes are the nodes (or count groups) to start with the lab. If
	// nil, every node whose start is not false.
	Nodes []string
	// StateDir keeps node identities and control's registry, so stopped
	// nodes restart as themselves. If empty, a temporary directory
	// removed by Close.
	StateDir string
	// CaptureDir, if set, receives one pcapng file per network. Close
	// removes the files of networks that carried no traffic.
	CaptureDir string
	// Owner is given the capture files and the directories made for
	// them (under sudo, the user who ran it). If zero, they stay the
	// process's.
	Owner owner.Owner
	// Progress receives one line per thing brought up or done. If nil,
	// nothing is printed.
	Progress func(string)
	// Logger receives the components' logs. If nil, they are discarded.
	Logger *slog.Logger
	// OrderInstants orders each virtual instant in a testing/synctest
	// bubble (fabric.Config.OrderInstants), for runs that compare
	// captures.
	OrderInstants bool
}

// Lab is a topology brought up on the fabric: its network, services and
// nodes, all in this process.
type Lab struct {
	cfg   Config
	plan  *topology.Plan
	log   *slog.Logger
	f     *fabric.Fabric
	clock *clock.Lab
	state string
	temp  bool
	start time.Time

	progressMu sync.Mutex // one progress line at a time (nodes start in parallel)

	mu       sync.Mutex // guards the following fields
	nodes    map[string]runningNode
	services map[string]io.Closer
	started  map[string]time.Time // when each node last started
	up       map[string]time.Time // when each node last came up (registered, serving)
	snap     map[string]nodeSnapshot
	fw       map[string]*firewallState
	captures []*capture
	closed   bool

	shared serviceShared
	// registerKey is control's register key (controlURLAt), set as
	// control starts; nil before.
	registerKey atomic.Pointer[key.Public]
	scrape      labScrape // the nodes' metrics collectors (metrics.go)

	releaseGC func() // a huge lab's collector target (gc.go); nil if not held
}

type capture struct {
	network string
	path    string
	w       *pcapng.Writer
	removed bool // empty, so Close removed it
}

// Up builds the plan's network, starts its services and its nodes, and
// returns when every node has registered.
func Up(ctx context.Context, cfg Config) (l *Lab, err error) {
	if cfg.Plan == nil {
		return nil, errors.New("runner: Config.Plan is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lab := &Lab{cfg: cfg, plan: cfg.Plan, log: log, start: time.Now(),
		nodes: map[string]runningNode{}, services: map[string]io.Closer{}, started: map[string]time.Time{}, up: map[string]time.Time{},
		snap: map[string]nodeSnapshot{}, fw: map[string]*firewallState{}}
	l = lab
	defer func() {
		if err != nil {
			err = errors.Join(err, lab.Close())
			l = nil
		}
	}()
	if l.plan.NeedsRoot() && os.Geteuid() != 0 {
		return nil, fmt.Errorf("topology %s has netns hosts (network namespaces), which are %w without root", l.plan.Name, ErrNotAvailable)
	}
	for _, n := range l.plan.Nodes {
		if n.Sandbox != nil && n.Sandbox.Mode == "gvisor" && l.wants(n) { // a later start checks again
			if err := GVisorReady(); err != nil {
				return nil, fmt.Errorf("node %s: %w: %w", n.Name, ErrNotAvailable, err)
			}
			break
		}
	}
	if l.state = cfg.StateDir; l.state == "" {
		if l.state, err = os.MkdirTemp("", "lattice-lab-"); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		l.temp = true
	}
	if err := os.MkdirAll(filepath.Join(l.state, "nodes"), 0o700); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if l.holdsGC() {
		if release, held := holdGC(); held {
			l.releaseGC = release
			l.progress("%d nodes: Go's collector runs at GOGC=%d while the lab is up, to bound its peak memory (set GOGC to choose)", len(l.plan.Nodes), hugeLabGCPercent)
		}
	}
	l.clock = &clock.Lab{}
	if l.f, err = fabric.New(fabric.Config{Seed: l.plan.Seed, Clock: l.clock, Logger: log, OrderInstants: cfg.OrderInstants}); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if err := l.plan.AddTo(l.f); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	l.progress("network: %d networks, %d routers, %d hosts", len(l.plan.Networks), len(l.plan.Routers), len(l.plan.Hosts))
	if cfg.CaptureDir != "" {
		if err := l.startCaptures(cfg.CaptureDir); err != nil {
			return nil, err
		}
	}
	for _, r := range l.plan.Routers {
		if r.Config.NAT != nil {
			l.fw[r.Config.Name] = &firewallState{orig: r.Config.NAT.Firewall}
		}
	}
	if err := l.startServices(ctx); err != nil {
		return nil, err
	}
	var names []string
	for _, n := range l.plan.Nodes {
		if l.wants(n) {
			names = append(names, n.Name)
		}
	}
	if err := l.StartNodes(ctx, names...); err != nil {
		return nil, err
	}
	return l, nil
}

// wants reports whether n starts with the lab.
func (l *Lab) wants(n topology.PlanNode) bool {
	if l.cfg.Nodes == nil {
		return n.Start
	}
	return slices.Contains(l.cfg.Nodes, n.Name) || slices.Contains(l.cfg.Nodes, n.Group)
}

func (l *Lab) progress(format string, args ...any) {
	if l.cfg.Progress != nil {
		l.progressMu.Lock()
		defer l.progressMu.Unlock()
		l.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// Fabric is the lab's network.
func (l *Lab) Fabric() *fabric.Fabric { return l.f }

// Plan is the lab's topology.
func (l *Lab) Plan() *topology.Plan { return l.plan }

// Since is how long ago the lab came up.
func (l *Lab) Since() time.Duration { return time.Since(l.start) }

func (l *Lab) startCaptures(dir string) error {
	if err := l.cfg.Owner.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	for _, n := range l.plan.Networks {
		path := filepath.Join(dir, n.Config.Name+".pcapng")
		w, err := pcapng.CreateWith(path, pcapng.Options{
			Comment: fmt.Sprintf("lattice-lab, topology %s, seed %d: network %s %v", l.plan.Name, l.plan.Seed, n.Config.Name, n.Config.Prefix),
		}, l.cfg.Owner.OpenFile)
		if err != nil {
			return fmt.Errorf("capture %s: %w", n.Config.Name, err)
		}
		l.captures = append(l.captures, &capture{network: n.Config.Name, path: path, w: w})
		if err := l.f.Network(n.Config.Name).Capture(w); err != nil {
			return fmt.Errorf("capture %s: %w", n.Config.Name, err)
		}
	}
	l.progress("capturing %d networks to %s", len(l.captures), dir)
	return nil
}

// Captures lists the pcapng files being written or, after Close, the ones
// kept (those of networks that carried traffic).
func (l *Lab) Captures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.captures {
		if !c.removed {
			out = append(out, c.path)
		}
	}
	return out
}

// closeCaptures completes the capture files and removes the empty ones: a
// file with no packet would only say the network was quiet.
func (l *Lab) closeCaptures() error {
	var quiet []string
	var err error
	for _, c := range l.captures {
		if cerr := c.w.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("capture %s: %w", c.network, cerr))
			continue
		}
		if c.w.Packets() > 0 {
			continue
		}
		if rerr := os.Remove(c.path); rerr != nil {
			err = errors.Join(err, fmt.Errorf("capture %s: remove empty file: %w", c.network, rerr))
			continue
		}
		l.mu.Lock()
		c.removed = true
		l.mu.Unlock()
		quiet = append(quiet, c.network)
	}
	if len(quiet) > 0 {
		l.progress("no capture file for %d networks without traffic: %s", len(quiet), strings.Join(quiet, ", "))
	}
	return err
}

// Close stops the nodes, the services, the fabric and the captures, in
// that order, and removes a temporary state directory. Idempotent.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	nodes := make([]runningNode, 0, len(l.nodes))
	for _, n := range l.nodes {
		nodes = append(nodes, n)
	}
	services := l.services
	l.services = map[string]io.Closer{}
	l.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, n := range nodes {
		wg.Go(func() {
			if err := n.close(); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("node %s: %w", n.common().name, err))
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, name := range []string{"control"} {
		if c := services[name]; c != nil {
			errs = append(errs, c.Close())
			delete(services, name)
		}
	}
	for _, c := range services {
		errs = append(errs, c.Close())
	}
	if l.f != nil {
		errs = append(errs, l.f.Close())
	}
	errs = append(errs, l.closeCaptures())
	if l.temp {
		errs = append(errs, os.RemoveAll(l.state))
	}
	if l.releaseGC != nil {
		l.releaseGC()
	}
	return errors.Join(errs...)
}

// firewallState is a NAT router's firewall: its configured rules plus
// what faults added.
type firewallState struct {
	orig     nat.Firewall
	blockUDP bool
	holes    map[string]nat.Rule // by the pair that asked
}

// applyFirewall installs a router's current firewall.
func (l *Lab) applyFirewall(router string) error {
	st := l.fw[router]
	if st == nil {
		return fmt.Errorf("router %s has no NAT", router)
	}
	fw := nat.Firewall{DefaultDeny: st.orig.DefaultDeny}
	keys := make([]string, 0, len(st.holes))
	for k := range st.holes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fw.Rules = append(fw.Rules, st.holes[k])
	}
	if st.blockUDP {
		fw.Rules = append(fw.Rules, nat.Rule{Action: nat.Deny, Proto: nat.UDP})
	}
	fw.Rules = append(fw.Rules, st.orig.Rules...)
	return l.f.Router(router).NAT().SetFirewall(fw)
}
