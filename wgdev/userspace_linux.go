package wgdev

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/node"
)

// Userspace is the regular node's WireGuard where the kernel has none:
// wireguard-go in process on node.KernelProvisioner's TUN device and the
// node's own Bind (no bridge), and its UAPI socket in
// /var/run/wireguard/NAME.sock, so wg(8) and wgctrl show and set it. wg
// show lists a peer's current direct address as its endpoint, and none
// while it is on the relay; wg set cannot set an endpoint (the node's
// paths choose it).
type Userspace struct {
	node.KernelProvisioner

	mu   sync.Mutex // guards name
	name string
}

var (
	_ node.Provisioner  = (*Userspace)(nil)
	_ node.DeviceServer = (*Userspace)(nil)
)

// Up implements node.Provisioner.
func (u *Userspace) Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	dev, err := u.KernelProvisioner.Up(ctx, addr, mtu)
	if err != nil {
		return nil, err
	}
	name, err := dev.Name()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("wgdev: TUN name: %w", err)
	}
	u.mu.Lock()
	u.name = name
	u.mu.Unlock()
	return dev, nil
}

// ServeDevice implements node.DeviceServer: the UAPI socket.
func (u *Userspace) ServeDevice(dev *device.Device, bind *node.Bind) (io.Closer, error) {
	u.mu.Lock()
	name := u.name
	u.mu.Unlock()
	ln, err := ListenUAPI(name)
	if err != nil {
		// The socket directory is the file system's, not the network
		// namespace's: a device of the same name in another namespace
		// holds it. The node works without; only wg(8) cannot see it.
		if u.Logger != nil {
			u.Logger.Warn("wg(8) cannot show this interface", "err", err)
		}
		return nopCloser{}, nil
	}
	return NewUAPIServer(ln, UAPIConfig{Device: dev, Endpoint: DirectEndpoint(bind), Logger: u.Logger})
}

// ListenUAPI listens on /var/run/wireguard/NAME.sock (0600, removed on
// close), where wg(8) and wgctrl look for wireguard-go devices.
func ListenUAPI(name string) (net.Listener, error) {
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		return nil, fmt.Errorf("wgdev: UAPI socket for %s: %w", name, err)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("wgdev: UAPI socket for %s: %w", name, err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
	return ln, nil
}

// DirectEndpoint shows a node endpoint as the peer's current direct
// address, or as nothing while the peer is on the relay.
func DirectEndpoint(bind *node.Bind) func(string) string {
	return func(s string) string {
		ep, err := bind.ParseEndpoint(s)
		if err != nil {
			return s
		}
		if e, ok := ep.(*node.Endpoint); ok {
			if a, ok := e.Path.Direct(); ok {
				return a.String()
			}
		}
		return ""
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
