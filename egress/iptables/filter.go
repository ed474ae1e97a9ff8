package iptables

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/latticelab/lattice/policy"
)

// ErrClosed is returned by Reload after Close.
var ErrClosed = errors.New("iptables: filter closed")

// RunFunc runs an iptables tool with args and stdin.
type RunFunc func(tool string, args []string, stdin string) error

// Config configures a Filter. Only Interface is required.
type Config struct {
	// Interface is the overlay interface whose egress is filtered, in
	// OUTPUT (the host's own sockets) and FORWARD (what it routes).
	Interface string
	// Policy is enforced from the first packet; nil denies everything.
	Policy *policy.Policy
	// Peers maps overlay node names (any case) to their addresses.
	Peers map[string][]netip.Addr
	// IPv6 adds the ip6tables family. If nil, it is there when the host
	// has IPv6 (/proc/net/if_inet6).
	IPv6 *bool
	// Run runs the tools; if nil, the real iptables, iptables-restore,
	// ip6tables and ip6tables-restore, in Netns.
	Run RunFunc
	// Netns is the network namespace (a path such as /run/netns/pod) the
	// interface is in. If empty, the process's.
	Netns string
	// OnEvent, if set, receives what the chains log through NFLOG: every
	// packet they reject, and with ReportAllowed every allowed new
	// connection, on one goroutine the Filter owns. It must not block
	// for long: the kernel drops records a slow reader leaves.
	OnEvent func(Event)
	// ReportAllowed logs allowed new connections too (conntrack NEW).
	ReportAllowed bool
	// LogGroup is the NFLOG group, per network namespace. If zero, one
	// from 20000 to 29999 chosen by the interface's name.
	LogGroup uint16
	// Logger; nil discards.
	Logger *slog.Logger
}

// Filter is a policy as iptables chains hooked on one interface's egress.
// Its methods are safe for concurrent use.
type Filter struct {
	cfg   Config
	chain string
	run   RunFunc
	log   *slog.Logger
	fams  []family

	nflog   *nflogSocket  // nil without OnEvent
	done    chan struct{} // closed when the event goroutine ends
	closing atomic.Bool   // the socket is being closed: read errors are expected

	mu     sync.Mutex // guards the following fields
	closed bool
	last   map[bool]string // restore script in force, by family (v6)
	gen    uint32
	labels map[uint32][]string // by familyGen: each family's current and previous
	loaded map[bool][2]uint32  // each family's current and previous familyGen
}

type family struct {
	ipt, restore string
	v6           bool
}

// ChainName is the main chain for an interface: LATTICE-IFNAME.
func ChainName(iface string) string { return "LATTICE-" + iface }

// hooks are the built-in chains the filter is hooked into.
var hooks = []string{"OUTPUT", "FORWARD"}

// New installs the chains and hooks them first in OUTPUT and FORWARD for
// -o cfg.Interface, chains and hooks in one transaction per family.
// Chains an earlier run left (a crash, or fail closed) are replaced in the
// same transaction that writes the new rules, so there is no moment
// without a filter, and its hooks kept.
func New(cfg Config) (*Filter, error) {
	if cfg.Interface == "" || len(cfg.Interface) > 15 || strings.ContainsAny(cfg.Interface, " /\t") {
		return nil, fmt.Errorf("iptables: interface %q: want a Linux interface name", cfg.Interface)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Filter{cfg: cfg, chain: ChainName(cfg.Interface), run: cfg.Run, last: map[bool]string{}, labels: map[uint32][]string{}, loaded: map[bool][2]uint32{},
		done: make(chan struct{}), log: log.With("component", "egress-iptables", "interface", cfg.Interface)}
	if f.cfg.LogGroup == 0 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(cfg.Interface))
		f.cfg.LogGroup = uint16(20000 + h.Sum32()%10000)
	}
	if f.run == nil {
		f.run = InNetns(cfg.Netns)
	}
	v6 := hasIPv6()
	if cfg.IPv6 != nil {
		v6 = *cfg.IPv6
	}
	f.fams = []family{{"iptables", "iptables-restore", false}}
	if v6 {
		f.fams = append(f.fams, family{"ip6tables", "ip6tables-restore", true})
	}
	if cfg.Run == nil {
		for _, fam := range f.fams {
			for _, tool := range []string{fam.ipt, fam.restore} {
				if _, err := exec.LookPath(tool); err != nil {
					return nil, fmt.Errorf("iptables: the egress policy needs %s, which is not installed (apt-get install iptables)", tool)
				}
			}
		}
	}
	if cfg.OnEvent != nil {
		// Bound before the first rule logs, so no record is missed.
		s, err := openNFLOG(cfg.Netns, f.cfg.LogGroup)
		if err != nil {
			return nil, err
		}
		f.nflog = s
		go f.readEvents()
	} else {
		close(f.done)
	}
	hooked, err := f.reload(cfg.Policy, cfg.Peers, true)
	if err != nil {
		f.stopEvents()
		return nil, err
	}
	for _, fam := range f.fams {
		if hooked[fam.v6] {
			continue
		}
		for _, hook := range hooks {
			rule := []string{hook, "-o", cfg.Interface, "-j", f.chain}
			if f.ipt(fam.ipt, append([]string{"-C"}, rule...)...) == nil {
				continue // an earlier run's hook, now leading to the new rules
			}
			if err := f.ipt(fam.ipt, "-I", hook, "1", "-o", cfg.Interface, "-j", f.chain); err != nil {
				rerr := f.remove()
				f.stopEvents()
				return nil, errors.Join(fmt.Errorf("iptables: hook %s: %w", hook, err), rerr)
			}
		}
	}
	f.log.Info("iptables egress filter installed", "chain", f.chain, "policy", cfg.Policy.String(), "ipv6", v6)
	return f, nil
}

func (f *Filter) ipt(tool string, args ...string) error {
	return f.run(tool, append([]string{"-w", "5"}, args...), "")
}

// Reload replaces the policy and the peers' addresses: each family's
// chains in one iptables-restore transaction, so a packet meets the old
// rules or the new, and flows both allow keep flowing. On error the
// family's old rules stay in force.
func (f *Filter) Reload(p *policy.Policy, peers map[string][]netip.Addr) error {
	_, err := f.reload(p, peers, false)
	return err
}

// reload is Reload. With create (New's first load) each family's chains
// and hooks go in as one transaction that fails whole if a chain exists
// already (an earlier run's, left by a crash): then the chains are
// replaced as Reload replaces them, and hooked (by family: v6) does not
// say the family is hooked. One process per family on a sandbox's start
// path instead of five (the restore, then -C and -I per hook).
func (f *Filter) reload(p *policy.Policy, peers map[string][]netip.Addr, create bool) (hooked map[bool]bool, _ error) {
	lower := make(map[string][]netip.Addr, len(peers))
	for name, addrs := range peers {
		lower[strings.ToLower(name)] = append(lower[strings.ToLower(name)], addrs...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	gen := f.gen + 1
	changed := false
	hooked = map[bool]bool{}
	for _, fam := range f.fams {
		in := Input{Chain: f.chain, Peers: lower, V6: fam.v6}
		if f.nflog != nil {
			in.LogGroup, in.LogAllowed = f.cfg.LogGroup, f.cfg.ReportAllowed
		}
		// The script without its generation says whether anything changed.
		key := RestoreScript(Render(p, in))
		if key == f.last[fam.v6] {
			continue
		}
		in.Gen = familyGen(gen, fam.v6)
		c := Render(p, in)
		args := []string{"--noflush", "-w", "5"}
		if create {
			var lines []string
			for _, hook := range hooks {
				lines = append(lines, "-I "+hook+" 1 -o "+f.cfg.Interface+" -j "+f.chain)
			}
			hooked[fam.v6] = f.run(fam.restore, args, CreateScript(c, lines...)) == nil
		}
		if !hooked[fam.v6] {
			if err := f.run(fam.restore, args, RestoreScript(c)); err != nil {
				return nil, fmt.Errorf("iptables: load %s rules: %w", fam.ipt, err)
			}
		}
		f.last[fam.v6] = key
		l := f.loaded[fam.v6]
		if l[1] != 0 {
			delete(f.labels, l[1])
		}
		f.loaded[fam.v6] = [2]uint32{in.Gen, l[0]}
		f.labels[in.Gen] = c.Labels
		changed = true
	}
	if changed {
		f.gen = gen
	}
	return hooked, nil
}

// familyGen is the generation a family's log prefixes carry: each family
// numbers its own labels, so IPv6's have the top bit set.
func familyGen(gen uint32, v6 bool) uint32 {
	gen &^= 1 << 31
	if v6 {
		gen |= 1 << 31
	}
	return gen
}

// Close unhooks and deletes the chains. It is idempotent.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.remove()
	f.mu.Unlock()
	f.stopEvents()
	f.mu.Lock()
	return err
}

// stopEvents closes the NFLOG socket and waits for the event goroutine.
func (f *Filter) stopEvents() {
	if f.nflog != nil {
		f.closing.Store(true)
		_ = f.nflog.close()
	}
	<-f.done
}

// readEvents turns NFLOG records into Events until the socket closes.
func (f *Filter) readEvents() {
	defer close(f.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := f.nflog.read(buf)
		if err != nil {
			if !f.closing.Load() {
				f.log.Error("NFLOG socket", "err", err)
			}
			return
		}
		recs, err := parseMessages(buf[:n])
		if err != nil {
			f.log.Warn("undecodable NFLOG message", "err", err)
		}
		for _, rec := range recs {
			e, err := f.event(rec)
			if err != nil {
				f.log.Warn("undecodable NFLOG record", "err", err)
				continue
			}
			f.cfg.OnEvent(e)
		}
	}
}

// event names a record's rule.
func (f *Filter) event(rec logRecord) (Event, error) {
	gen, id, allow, err := parsePrefix(rec.prefix)
	if err != nil {
		return Event{}, err
	}
	e, err := parsePacket(rec.payload)
	if err != nil {
		return Event{}, err
	}
	e.Allow = allow
	f.mu.Lock()
	l := f.labels[gen]
	f.mu.Unlock()
	if id < len(l) {
		e.Rule = l[id]
	} else {
		e.Rule = fmt.Sprintf("rule %d of table %d", id, gen&^(1<<31))
	}
	return e, nil
}

// remove deletes the hooks and chains of f's interface, whoever made them.
func (f *Filter) remove() error {
	var errs []error
	for _, fam := range f.fams {
		_, err := removeFamily(f.run, fam.ipt, f.cfg.Interface)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Remove deletes what a Filter on iface installed: for the cleanup of a
// filter a crashed node left in place. It reports whether there was
// anything; absent rules are not an error.
func Remove(iface string, run RunFunc) (bool, error) {
	if run == nil {
		run = runTool
	}
	var errs []error
	found := false
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		f, err := removeFamily(run, tool, iface)
		found = found || f
		errs = append(errs, err)
	}
	return found, errors.Join(errs...)
}

func removeFamily(run RunFunc, tool, iface string) (found bool, _ error) {
	chain := ChainName(iface)
	all := []string{chain, chain + "-D", chain + "-P", chain + "-R"}
	// What New left, once hooked, is gone in one transaction: one process
	// rather than a dozen. Anything else (a chain or hook missing, a hook
	// twice) makes it fail as a whole, and each step is then tried alone.
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, hook := range hooks {
		b.WriteString("-D " + hook + " -o " + iface + " -j " + chain + "\n")
	}
	for _, c := range all {
		b.WriteString("-F " + c + "\n")
	}
	for _, c := range all {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	if run(tool+"-restore", []string{"--noflush", "-w", "5"}, b.String()) == nil {
		return true, nil
	}
	ipt := func(args ...string) error { return run(tool, append([]string{"-w", "5"}, args...), "") }
	for _, hook := range hooks {
		// A hook inserted twice (two runs racing) is deleted twice.
		for i := 0; i < 8 && ipt("-D", hook, "-o", iface, "-j", chain) == nil; i++ {
			found = true
		}
	}
	var errs []error
	for _, c := range all {
		_ = ipt("-F", c)
	}
	for _, c := range all {
		if ipt("-L", c, "-n") != nil {
			continue // not there
		}
		found = true
		if err := ipt("-X", c); err != nil {
			errs = append(errs, fmt.Errorf("iptables: delete chain %s: %w", c, err))
		}
	}
	return found, errors.Join(errs...)
}

// runTool runs an iptables tool for real.
func runTool(tool string, args []string, stdin string) error {
	cmd := exec.Command(tool, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func hasIPv6() bool {
	_, err := os.Stat("/proc/net/if_inet6")
	return err == nil
}
