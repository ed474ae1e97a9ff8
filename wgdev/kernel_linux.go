package wgdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/latticelab/lattice/node"
)

// ErrNoKernel means this kernel cannot create WireGuard interfaces (no
// module, or no permission).
var ErrNoKernel = errors.New("wgdev: kernel WireGuard unavailable")

// Kernel makes a kernel WireGuard interface for the node
// (node.DeviceOpener): `ip link add NAME type wireguard`, the overlay
// address on it, configured through wgctrl over netlink, its packets
// carried by a Bridge over the node's Bind.
type Kernel struct {
	// Name of the interface. If empty, "lattice0".
	Name string
	// NoFirewall leaves iptables alone. Otherwise two rules: accept what
	// arrives on the interface, and drop what reaches the device's UDP
	// port from anywhere but loopback (the kernel listens on every
	// address; only the bridge should speak to it).
	NoFirewall bool
	Logger     *slog.Logger
}

var _ node.DeviceOpener = (*Kernel)(nil)

// OpenDevice implements node.DeviceOpener.
func (k *Kernel) OpenDevice(ctx context.Context, addr netip.Prefix, mtu int, bind conn.Bind) (node.Device, error) {
	name := k.Name
	if name == "" {
		name = "lattice0"
	}
	log := k.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := run(ctx, "ip", "link", "add", name, "type", "wireguard"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKernel, err)
	}
	del := func() { _ = run(context.Background(), "ip", "link", "del", name) }
	for _, args := range [][]string{
		{"address", "add", addr.String(), "dev", name},
		{"link", "set", "dev", name, "mtu", fmt.Sprint(mtu), "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			del()
			return nil, fmt.Errorf("wgdev: %w", err)
		}
	}
	d, err := Attach(AttachConfig{Name: name, Bind: bind, Logger: log})
	if err != nil {
		del()
		return nil, err
	}
	undo := func() {}
	if !k.NoFirewall {
		undo = firewall(ctx, log, name, d.bridge.device.Port())
	}
	d.onClose = func() {
		undo()
		del()
	}
	log.Info("kernel WireGuard up", "name", name, "address", addr, "mtu", mtu, "port", d.bridge.device.Port())
	return d, nil
}

// firewall adds the iptables rules Kernel describes and returns what
// removes them; a rule that fails is logged, not fatal.
func firewall(ctx context.Context, log *slog.Logger, name string, port uint16) func() {
	rules := [][]string{
		{"INPUT", "-i", name, "-j", "ACCEPT", "-m", "comment", "--comment", "lattice"},
		{"INPUT", "-p", "udp", "--dport", fmt.Sprint(port), "!", "-i", "lo", "-j", "DROP", "-m", "comment", "--comment", "lattice bridge"},
	}
	var added [][]string
	for _, r := range rules {
		if err := run(ctx, "iptables", append([]string{"-I"}, r...)...); err != nil {
			log.Warn("iptables", "err", err)
			continue
		}
		added = append(added, r)
	}
	return func() {
		for _, r := range added {
			_ = run(context.Background(), "iptables", append([]string{"-D"}, r...)...)
		}
	}
}

// ProbeKernel reports whether kernel WireGuard interfaces can be made
// here, by making one and deleting it; the error wraps ErrNoKernel.
func ProbeKernel(ctx context.Context) error {
	name := fmt.Sprintf("lwgprobe%d", os.Getpid()%100000)
	if err := run(ctx, "ip", "link", "add", name, "type", "wireguard"); err != nil {
		return fmt.Errorf("%w: %w", ErrNoKernel, err)
	}
	return run(ctx, "ip", "link", "del", name)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
