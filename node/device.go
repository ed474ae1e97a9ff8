package node

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
)

// Device is the WireGuard device the node configures, in wireguard-go's
// UAPI text (the bodies of "set=1" and "get=1"); endpoints are
// EndpointString values both ways. wireguard-go's *device.Device in
// process is one; a device outside the process that the node feeds
// through its Bind (kernel WireGuard, see DeviceOpener) is the other.
type Device interface {
	// IpcSet applies a configuration.
	IpcSet(uapi string) error
	// IpcGet returns the configuration with each peer's handshake time
	// and byte counters.
	IpcGet() (string, error)
	// Close removes the device and stops whatever carries its packets.
	Close()
}

var _ Device = (*device.Device)(nil)

// DeviceOpener makes a WireGuard device that owns its own UDP socket
// (kernel WireGuard); Config.Device.
type DeviceOpener interface {
	// OpenDevice creates the interface with the overlay address addr and
	// mtu and carries packets between the device and bind, which it opens
	// and, on Close, closes: WireGuard messages the device sends to a peer
	// go to bind.Send with that peer's endpoint (bind.ParseEndpoint of the
	// configured EndpointString), and what bind receives goes to the
	// device as coming from that peer.
	OpenDevice(ctx context.Context, addr netip.Prefix, mtu int, bind conn.Bind) (Device, error)
}

// DeviceServer is an optional ability of a Provisioner: serving the
// in-process device to other programs too (wgdev serves its UAPI socket,
// so wg(8) can show and set it). bind resolves the device's endpoints.
// The node closes what it returns before closing the device.
type DeviceServer interface {
	ServeDevice(dev *device.Device, bind *Bind) (io.Closer, error)
}

// startWireGuard makes the interface and brings WireGuard up on it.
func (n *Node) startWireGuard(ctx context.Context, addr netip.Prefix) error {
	if n.cfg.Device != nil {
		dev, err := n.cfg.Device.OpenDevice(ctx, addr, n.cfg.MTU, n.bind)
		if err != nil {
			return fmt.Errorf("node: WireGuard device: %w", err)
		}
		n.dev = dev
		if err := dev.IpcSet("private_key=" + n.id.Private.RevealHex() + "\n"); err != nil {
			return fmt.Errorf("node: configure WireGuard: %w", err)
		}
		return nil
	}
	tdev, err := n.cfg.Provisioner.Up(ctx, addr, n.cfg.MTU)
	if err != nil {
		return fmt.Errorf("node: interface: %w", err)
	}
	n.tun = newUnreachableTUN(tdev)
	n.tun.gate = &n.bind.gate // before the device reads: never changed after
	if tr, ok := n.relay.(transportReporter); ok {
		n.tun.mtu.relay = tr // before the device reads: never changed after
	}
	dev := device.NewDevice(n.tun, n.bind, device.NewLogger(device.LogLevelSilent, ""))
	n.dev = dev
	if err := dev.IpcSet("private_key=" + n.id.Private.RevealHex() + "\n"); err != nil {
		return fmt.Errorf("node: configure WireGuard: %w", err)
	}
	if err := dev.Up(); err != nil {
		return fmt.Errorf("node: WireGuard up: %w", err)
	}
	if ds, ok := n.cfg.Provisioner.(DeviceServer); ok {
		if n.served, err = ds.ServeDevice(dev, n.bind); err != nil {
			return fmt.Errorf("node: serve WireGuard device: %w", err)
		}
	}
	return nil
}
