package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/policy"
)

// Filter is a TCX egress program on one interface with its maps. Its
// methods are safe for concurrent use.
type Filter struct {
	cfg     Config
	log     *slog.Logger
	ifindex int
	outer   *ebpf.Map // ARRAY_OF_MAPS: key 0 is the current LPM trie
	events  *ebpf.Map // RINGBUF
	flows   *ebpf.Map // LRU_HASH of UDP flows and TCP SYNs reported, with ReportAllowed
	prog    *ebpf.Program
	link    link.Link
	reader  *ringbuf.Reader
	done    chan struct{} // closed when the event goroutine ends

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // guards the following fields
	closed bool
	gen    uint32
	labels map[uint32][]string // by generation: the current and the one before
}

const (
	ringSize = 256 << 10
	// flowEntries UDP flows are remembered; an evicted flow is reported
	// again when it next sends.
	flowEntries = 65536
)

// New loads the program, fills its maps from cfg.Policy and attaches it to
// cfg.Interface's egress. In the community edition it returns
// "eBPF egress filter is a Pro feature"; where the kernel cannot do it,
// an error wrapping ErrUnavailable.
func New(cfg Config) (*Filter, error) {
	if err := edition.Require("eBPF egress filter"); err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("bpf: interface %q: %w", cfg.Interface, err)
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 16384
	}
	if cfg.MaxEntries < 4 {
		return nil, fmt.Errorf("bpf: MaxEntries %d: want at least 4", cfg.MaxEntries)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Filter{cfg: cfg, ifindex: ifi.Index, labels: map[uint32][]string{}, done: make(chan struct{}),
		log: log.With("component", "egress-bpf", "interface", cfg.Interface)}
	if err := f.load(len(ifi.HardwareAddr) == 0); err != nil {
		f.closeObjects()
		return nil, err
	}
	if err := f.Reload(cfg.Policy, cfg.Peers); err != nil {
		f.closeObjects()
		return nil, err
	}
	if err := f.attach(); err != nil {
		f.closeObjects()
		return nil, err
	}
	if cfg.OnEvent != nil {
		if f.reader, err = ringbuf.NewReader(f.events); err != nil {
			f.closeObjects()
			return nil, fmt.Errorf("bpf: events reader: %w", err)
		}
		go f.readEvents()
	} else {
		close(f.done)
	}
	f.log.Info("eBPF egress filter attached", "policy", cfg.Policy.String(), "pinned", cfg.PinDir != "")
	return f, nil
}

// unavailable marks the errors a caller should fall back from.
func unavailable(what string, err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) && what == "attach" {
		return fmt.Errorf("bpf: %s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("bpf: %s: %w", what, err)
}

func (f *Filter) load(l3 bool) error {
	var err error
	f.outer, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "lattice_egress", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1,
		InnerMap: f.innerSpec(),
	})
	if err != nil {
		return unavailable("create rules map", err)
	}
	f.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: "lattice_events", Type: ebpf.RingBuf, MaxEntries: ringSize})
	if err != nil {
		return unavailable("create events ring", err)
	}
	flowsFD := -1
	if f.cfg.ReportAllowed {
		f.flows, err = ebpf.NewMap(&ebpf.MapSpec{Name: "lattice_flows", Type: ebpf.LRUHash, KeySize: flowKeySize, ValueSize: 8, MaxEntries: flowEntries})
		if err != nil {
			return unavailable("create flows map", err)
		}
		flowsFD = f.flows.FD()
	}
	off := 14
	if l3 {
		off = 0
	}
	f.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "lattice_egress", Type: ebpf.SchedCLS, License: "Dual MIT/GPL",
		Instructions: program(programConfig{outerFD: f.outer.FD(), eventsFD: f.events.FD(), l3Off: off, newConns: f.cfg.ReportAllowed, flowsFD: flowsFD}),
	})
	if err != nil {
		return unavailable("load program", err)
	}
	return nil
}

func (f *Filter) innerSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name: "lattice_rules", Type: ebpf.LPMTrie, KeySize: keySize, ValueSize: valueSize,
		MaxEntries: uint32(f.cfg.MaxEntries), Flags: unix.BPF_F_NO_PREALLOC,
	}
}

// attach attaches the program and, with PinDir, pins the link, replacing
// a link an earlier run pinned only once the new one is in place.
func (f *Filter) attach() error {
	var old link.Link
	pin := ""
	if f.cfg.PinDir != "" {
		pin = filepath.Join(f.cfg.PinDir, "link")
		l, err := link.LoadPinnedLink(pin, nil)
		switch {
		case err == nil:
			old = l
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("bpf: load pinned link %s: %w", pin, err)
		}
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: f.ifindex, Program: f.prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		if old != nil {
			old.Close()
		}
		return unavailable("attach", err)
	}
	f.link = l
	if old != nil {
		if err := old.Unpin(); err != nil {
			f.log.Warn("unpin the previous run's link", "err", err)
		}
		old.Close()
		f.log.Info("replaced the link pinned by an earlier run", "path", pin)
	}
	if pin != "" {
		if err := l.Pin(pin); err != nil {
			return fmt.Errorf("bpf: pin link: %w", err)
		}
	}
	return nil
}

// Close detaches the filter (unless it is pinned and KeepPinned is set),
// stops the event goroutine and frees the maps. It is idempotent.
func (f *Filter) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		if f.link != nil && f.cfg.PinDir != "" && !f.cfg.KeepPinned {
			if err := f.link.Unpin(); err != nil {
				f.closeErr = fmt.Errorf("bpf: unpin link: %w", err)
			}
		}
		if err := f.closeObjects(); err != nil && f.closeErr == nil {
			f.closeErr = err
		}
		<-f.done
	})
	return f.closeErr
}

// closeObjects releases every kernel object New made.
func (f *Filter) closeObjects() error {
	var errs []error
	if f.reader != nil {
		errs = append(errs, f.reader.Close())
	}
	if f.link != nil {
		errs = append(errs, f.link.Close())
	}
	for _, c := range []interface{ Close() error }{f.prog, f.flows, f.events, f.outer} {
		if c != nil && !isNilPointer(c) {
			errs = append(errs, c.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bpf: close: %w", err)
	}
	return nil
}

func isNilPointer(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *ebpf.Program:
		return v == nil
	case *ebpf.Map:
		return v == nil
	}
	return false
}

// Reload replaces the policy and the peers' addresses. The new table is
// built in a fresh map and swapped in with one update of the outer map, so
// each packet sees the old table or the new one, never a mix, and flows
// both allow keep flowing. A policy the kernel table cannot express
// returns an error and leaves the old one in force.
func (f *Filter) Reload(p *policy.Policy, peers map[string][]netip.Addr) error {
	t, err := compile(p, compileInput{peers: peers, hosts: f.cfg.HostAddrs})
	if err != nil {
		return err
	}
	if len(t.entries) > f.cfg.MaxEntries {
		return fmt.Errorf("bpf: policy needs %d prefixes; MaxEntries is %d", len(t.entries), f.cfg.MaxEntries)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	gen := f.gen + 1
	inner, err := ebpf.NewMap(f.innerSpec())
	if err != nil {
		return fmt.Errorf("bpf: create rules table: %w", err)
	}
	// The outer map holds its own reference once the swap is done.
	defer inner.Close()
	for _, e := range t.entries {
		if err := inner.Put(marshalKey(e.prefix), marshalValue(e.clauses, gen)); err != nil {
			return fmt.Errorf("bpf: rules table: put %s: %w", e.prefix, err)
		}
	}
	if err := f.outer.Put(uint32(0), inner); err != nil {
		return fmt.Errorf("bpf: swap rules table: %w", err)
	}
	f.gen = gen
	f.labels[gen] = t.labels
	delete(f.labels, gen-2)
	f.log.Debug("egress table loaded", "generation", gen, "prefixes", len(t.entries), "policy", p.String())
	return nil
}

// readEvents turns ring buffer records into Events until Close.
func (f *Filter) readEvents() {
	defer close(f.done)
	for {
		rec, err := f.reader.Read()
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				f.log.Error("events ring", "err", err)
			}
			return
		}
		raw, err := decodeEvent(rec.RawSample)
		if err != nil {
			f.log.Warn("undecodable event", "err", err)
			continue
		}
		raw.Rule = f.label(raw.gen, raw.rule)
		f.cfg.OnEvent(raw.Event)
	}
}

func (f *Filter) label(gen, id uint32) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id < firstRuleID {
		return [...]string{"invalid destination", "no policy"}[id]
	}
	if l := f.labels[gen]; int(id) < len(l) {
		return l[id]
	}
	return fmt.Sprintf("rule %d of table %d", id, gen)
}
