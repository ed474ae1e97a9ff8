package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"sync"

	"golang.zx2c4.com/wireguard/tun"
)

// KernelProvisioner makes a real TUN device (root or CAP_NET_ADMIN): the
// overlay address on it (so the kernel routes the whole overlay prefix
// into it), the link up, and an iptables rule accepting what arrives on
// it, removed again when WireGuard closes the device.
type KernelProvisioner struct {
	// Name of the interface. If empty, "lattice0".
	Name string
	// NoFirewall leaves iptables alone.
	NoFirewall bool
	Logger     *slog.Logger
}

var _ Provisioner = (*KernelProvisioner)(nil)

// Up implements Provisioner.
func (k *KernelProvisioner) Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	name := k.Name
	if name == "" {
		name = "lattice0"
	}
	log := k.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("create TUN %s (needs root or CAP_NET_ADMIN and /dev/net/tun): %w", name, err)
	}
	if real, err := dev.Name(); err == nil {
		name = real
	}
	kd := &kernelDevice{Device: dev}
	if err := run(ctx, "ip", "address", "add", addr.String(), "dev", name); err != nil {
		dev.Close()
		return nil, err
	}
	if err := run(ctx, "ip", "link", "set", "dev", name, "mtu", fmt.Sprint(mtu), "up"); err != nil {
		dev.Close()
		return nil, err
	}
	if !k.NoFirewall {
		rule := []string{"INPUT", "-i", name, "-j", "ACCEPT", "-m", "comment", "--comment", "lattice"}
		if err := run(ctx, "iptables", append([]string{"-I"}, rule...)...); err != nil {
			log.Warn("iptables: traffic on the overlay may be filtered by the host firewall", "err", err)
		} else {
			kd.cleanup = func() { _ = run(context.Background(), "iptables", append([]string{"-D"}, rule...)...) }
		}
	}
	log.Info("kernel interface up", "name", name, "address", addr, "mtu", mtu)
	return kd, nil
}

// kernelDevice undoes the firewall rule when WireGuard closes it; the
// kernel removes the interface, address and routes with the TUN.
type kernelDevice struct {
	tun.Device
	cleanup func()
	once    sync.Once
}

func (d *kernelDevice) Close() error {
	err := d.Device.Close()
	d.once.Do(func() {
		if d.cleanup != nil {
			d.cleanup()
		}
	})
	return err
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
