package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
	l3      bool      // the program reads packets without a link-layer header
	outer   *ebpf.Map // ARRAY_OF_MAPS: key 0 is the current LPM trie
	events  *ebpf.Map // RINGBUF
	flows   *ebpf.Map // LRU_HASH of UDP flows and TCP SYNs reported, with ReportAllowed
	prog    *ebpf.Program
	reader  *ringbuf.Reader
	done    chan struct{} // closed when the event goroutine ends

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // guards the following fields
	closed bool
	link   link.Link // nil until Attach
	// table is the current LPM trie while the filter is not attached
	// (nil once it is): Reload fills it in place, as nothing reads it.
	table  *ebpf.Map
	cur    *table // what the current trie holds
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
// cfg.Interface's egress: Load, then Attach. In the community edition it
// returns "eBPF egress filter is a Pro feature"; where the kernel cannot
// do it, an error wrapping ErrUnavailable.
func New(cfg Config) (*Filter, error) {
	f, err := Load(cfg)
	if err != nil {
		return nil, err
	}
	if err := f.Attach(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Load makes the filter's maps, its program and its first table (from
// cfg.Policy and cfg.Peers) without attaching it: nothing is filtered
// until Attach. Maps and programs belong to no network namespace, and
// cfg.Interface need not exist yet, so a caller can load while it makes
// the interface: the first table's swap into the filter waits for an RCU
// grace period (milliseconds, without CPU), which then overlaps that work.
// Reload before Attach fills the table in place, without that wait:
// nothing reads it yet.
//
// The program is built for cfg.Interface's link type if it exists in the
// calling thread's namespace, else for a device without a link-layer
// header (TUN, WireGuard: what an overlay interface is); Attach rebuilds
// it if the interface turns out otherwise. Close releases a filter that
// is never attached.
func Load(cfg Config) (*Filter, error) {
	if err := edition.Require("eBPF egress filter"); err != nil {
		return nil, err
	}
	if err := cfg.setMaxEntries(); err != nil {
		return nil, err
	}
	if cfg.Interface == "" {
		return nil, errors.New("bpf: no interface")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Filter{cfg: cfg, labels: map[uint32][]string{}, done: make(chan struct{}), l3: true,
		log: log.With("component", "egress-bpf", "interface", cfg.Interface)}
	if ifi, err := net.InterfaceByName(cfg.Interface); err == nil {
		f.l3 = len(ifi.HardwareAddr) == 0
	}
	if err := f.load(f.l3); err != nil {
		return nil, errors.Join(err, f.closeObjects())
	}
	if err := f.Reload(cfg.Policy, cfg.Peers); err != nil {
		return nil, errors.Join(err, f.closeObjects())
	}
	return f, nil
}

// Attach attaches a filter Load made to cfg.Interface's egress (it must
// run in that interface's network namespace) and starts reading its
// events. From its return every packet is judged by the current table.
// On error Close releases it.
func (f *Filter) Attach() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return ErrClosed
	case f.link != nil:
		return errors.New("bpf: attach: attached already")
	case f.cur == nil:
		return errors.New("bpf: attach: the rules table is incomplete after a failed reload")
	}
	ifi, err := net.InterfaceByName(f.cfg.Interface)
	if err != nil {
		return fmt.Errorf("bpf: interface %q: %w", f.cfg.Interface, err)
	}
	if l3 := len(ifi.HardwareAddr) == 0; l3 != f.l3 {
		// Loaded for the other link type: the program again, the maps stay.
		prog, err := f.newProgram(l3)
		if err != nil {
			return err
		}
		f.prog.Close()
		f.prog, f.l3 = prog, l3
	}
	f.ifindex = ifi.Index
	if err := f.attach(); err != nil {
		return err
	}
	// The outer map holds the table from now on; Reload swaps.
	if f.table != nil {
		f.table.Close()
		f.table = nil
	}
	if f.cfg.OnEvent == nil {
		close(f.done)
	} else if f.reader, err = ringbuf.NewReader(f.events); err != nil {
		close(f.done)
		return fmt.Errorf("bpf: events reader: %w", err)
	} else {
		go f.readEvents()
	}
	f.log.Info("eBPF egress filter attached", "policy", f.cfg.Policy.String(), "pinned", f.cfg.PinDir != "")
	return nil
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
	if f.cfg.ReportAllowed {
		f.flows, err = ebpf.NewMap(&ebpf.MapSpec{Name: "lattice_flows", Type: ebpf.LRUHash, KeySize: flowKeySize, ValueSize: 8, MaxEntries: flowEntries})
		if err != nil {
			return unavailable("create flows map", err)
		}
	}
	f.prog, err = f.newProgram(l3)
	return err
}

// newProgram loads the program for the maps load made, reading packets
// with (Ethernet) or without (l3) a link-layer header.
func (f *Filter) newProgram(l3 bool) (*ebpf.Program, error) {
	off := 14
	if l3 {
		off = 0
	}
	flowsFD := -1
	if f.flows != nil {
		flowsFD = f.flows.FD()
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "lattice_egress", Type: ebpf.SchedCLS, License: "Dual MIT/GPL",
		Instructions: program(programConfig{outerFD: f.outer.FD(), eventsFD: f.events.FD(), l3Off: off, newConns: f.cfg.ReportAllowed, flowsFD: flowsFD}),
	})
	if err != nil {
		return nil, unavailable("load program", err)
	}
	return prog, nil
}

// setMaxEntries defaults MaxEntries and checks it fits the map's 32-bit
// size: past it, the map would be made with the low 32 bits while
// Reload checks policies against the whole value.
func (cfg *Config) setMaxEntries() error {
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 16384
	}
	if cfg.MaxEntries < 4 {
		return fmt.Errorf("bpf: MaxEntries %d: want at least 4", cfg.MaxEntries)
	}
	if uint64(cfg.MaxEntries) > math.MaxUint32 {
		return fmt.Errorf("bpf: MaxEntries %d: want at most %d", cfg.MaxEntries, uint64(math.MaxUint32))
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
		attached := f.link != nil // Attach closed done or started the reader
		f.mu.Unlock()
		if f.link != nil && f.cfg.PinDir != "" && !f.cfg.KeepPinned {
			if err := f.link.Unpin(); err != nil {
				f.closeErr = fmt.Errorf("bpf: unpin link: %w", err)
			}
		}
		if err := f.closeObjects(); err != nil && f.closeErr == nil {
			f.closeErr = err
		}
		if attached {
			<-f.done
		}
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
	for _, c := range []interface{ Close() error }{f.prog, f.table, f.flows, f.events, f.outer} {
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
// returns an error and leaves the old one in force. A table the same as
// the current one changes nothing. Before Attach the table is filled in
// place instead (nothing reads it), without the swap's RCU grace period;
// if that fails, Attach refuses until a Reload succeeds.
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
	if f.cur != nil && reflect.DeepEqual(t, f.cur) {
		return nil
	}
	gen := f.gen + 1
	if f.table != nil {
		if err := f.fillLocked(f.table, t, gen); err != nil {
			f.cur = nil // part old, part new: not to be attached
			return err
		}
	} else if err := f.swapLocked(t, gen); err != nil {
		return err
	}
	f.gen, f.cur = gen, t
	f.labels[gen] = t.labels
	delete(f.labels, gen-2)
	f.log.Debug("egress table loaded", "generation", gen, "prefixes", len(t.entries), "policy", p.String(), "in place", f.table != nil)
	return nil
}

// swapLocked builds t as generation gen in a fresh map and swaps it in.
// The first swap keeps the map as the table to fill in place until
// Attach.
func (f *Filter) swapLocked(t *table, gen uint32) error {
	inner, err := ebpf.NewMap(f.innerSpec())
	if err != nil {
		return fmt.Errorf("bpf: create rules table: %w", err)
	}
	if err := f.fillLocked(inner, t, gen); err != nil {
		inner.Close()
		return err
	}
	if err := f.outer.Put(uint32(0), inner); err != nil {
		inner.Close()
		return fmt.Errorf("bpf: swap rules table: %w", err)
	}
	if f.link == nil {
		f.table = inner
		return nil
	}
	// The outer map holds its own reference.
	inner.Close()
	return nil
}

// fillLocked makes m hold t's entries as generation gen, and nothing else.
func (f *Filter) fillLocked(m *ebpf.Map, t *table, gen uint32) error {
	keep := make(map[string]bool, len(t.entries))
	for _, e := range t.entries {
		k := marshalKey(e.prefix)
		keep[string(k)] = true
		if err := m.Put(k, marshalValue(e.clauses, gen)); err != nil {
			return fmt.Errorf("bpf: rules table: put %s: %w", e.prefix, err)
		}
	}
	var stale [][]byte
	k := make([]byte, keySize)
	var v []byte
	for it := m.Iterate(); it.Next(&k, &v); {
		if !keep[string(k)] {
			stale = append(stale, slices.Clone(k))
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("bpf: rules table: delete: %w", err)
		}
	}
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
