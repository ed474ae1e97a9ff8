package iptables

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"

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

	mu     sync.Mutex // guards the following fields
	closed bool
	last   map[bool]string // restore script in force, by family (v6)
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
// -o cfg.Interface. Chains an earlier run left (a crash, or fail closed)
// are replaced in the same transaction that writes the new rules, so
// there is no moment without a filter.
func New(cfg Config) (*Filter, error) {
	if cfg.Interface == "" || len(cfg.Interface) > 15 || strings.ContainsAny(cfg.Interface, " /\t") {
		return nil, fmt.Errorf("iptables: interface %q: want a Linux interface name", cfg.Interface)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Filter{cfg: cfg, chain: ChainName(cfg.Interface), run: cfg.Run, last: map[bool]string{},
		log: log.With("component", "egress-iptables", "interface", cfg.Interface)}
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
	if err := f.Reload(cfg.Policy, cfg.Peers); err != nil {
		return nil, err
	}
	for _, fam := range f.fams {
		for _, hook := range hooks {
			rule := []string{hook, "-o", cfg.Interface, "-j", f.chain}
			if f.ipt(fam.ipt, append([]string{"-C"}, rule...)...) == nil {
				continue // an earlier run's hook, now leading to the new rules
			}
			if err := f.ipt(fam.ipt, "-I", hook, "1", "-o", cfg.Interface, "-j", f.chain); err != nil {
				f.remove()
				return nil, fmt.Errorf("iptables: hook %s: %w", hook, err)
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
	lower := make(map[string][]netip.Addr, len(peers))
	for name, addrs := range peers {
		lower[strings.ToLower(name)] = append(lower[strings.ToLower(name)], addrs...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	for _, fam := range f.fams {
		script := RestoreScript(Render(p, Input{Chain: f.chain, Peers: lower, V6: fam.v6}))
		if script == f.last[fam.v6] {
			continue
		}
		if err := f.run(fam.restore, []string{"--noflush", "-w", "5"}, script); err != nil {
			return fmt.Errorf("iptables: load %s rules: %w", fam.ipt, err)
		}
		f.last[fam.v6] = script
	}
	return nil
}

// Close unhooks and deletes the chains. It is idempotent.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return f.remove()
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
	ipt := func(args ...string) error { return run(tool, append([]string{"-w", "5"}, args...), "") }
	for _, hook := range hooks {
		// A hook inserted twice (two runs racing) is deleted twice.
		for i := 0; i < 8 && ipt("-D", hook, "-o", iface, "-j", chain) == nil; i++ {
			found = true
		}
	}
	var errs []error
	all := []string{chain, chain + "-D", chain + "-P", chain + "-R"}
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
