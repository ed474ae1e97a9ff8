package wgdev

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sync"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/latticelab/lattice/node"
)

// Device is a WireGuard device with its own UDP socket, configured and
// read through wgctrl (netlink for the kernel module, the UAPI socket for
// a wireguard-go process), its packets carried by a Bridge. It is the
// node.Device of Kernel.
type Device struct {
	name    string
	client  *wgctrl.Client
	bridge  *Bridge
	log     *slog.Logger
	onClose func()

	mu    sync.Mutex // serializes IpcSet; guards peers
	peers map[wgtypes.Key]string

	closeOnce sync.Once
}

var _ node.Device = (*Device)(nil)

// AttachConfig configures Attach.
type AttachConfig struct {
	// Name of the device as wgctrl finds it. Required.
	Name string
	// Bind carries the device's packets to peers (the node's). Required.
	Bind conn.Bind
	// Logger; if nil, logs are discarded.
	Logger *slog.Logger
}

// Attach takes over an existing WireGuard device that is up and
// listening: its peers' packets go through a Bridge over cfg.Bind.
func Attach(cfg AttachConfig) (*Device, error) {
	if cfg.Name == "" {
		return nil, errors.New("wgdev: attach: no device name")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("wgdev: wgctrl: %w", err)
	}
	wd, err := client.Device(cfg.Name)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("wgdev: read device %s: %w", cfg.Name, err)
	}
	dev, err := deviceAddr(cfg.Name, wd.ListenPort)
	if err != nil {
		client.Close()
		return nil, err
	}
	br, err := NewBridge(BridgeConfig{Bind: cfg.Bind, Device: dev, Logger: log})
	if err != nil {
		client.Close()
		return nil, err
	}
	log.Info("WireGuard device attached through the bridge", "device", cfg.Name, "type", wd.Type.String(), "port", wd.ListenPort)
	return &Device{name: cfg.Name, client: client, bridge: br, log: log, peers: map[wgtypes.Key]string{}}, nil
}

// deviceAddr is the loopback address of the socket of device name,
// listening on port as wgctrl read it. wgctrl takes a userspace device's
// port as any decimal number the UAPI socket answers, so one outside
// 1-65535 is refused rather than truncated into another port.
func deviceAddr(name string, port int) (netip.AddrPort, error) {
	switch {
	case port == 0:
		return netip.AddrPort{}, fmt.Errorf("wgdev: device %s has no listen port (is it up?)", name)
	case port < 0 || port > math.MaxUint16:
		return netip.AddrPort{}, fmt.Errorf("wgdev: device %s: listen port %d out of range", name, port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)), nil
}

// Name is the device's interface name.
func (d *Device) Name() string { return d.name }

// Bridge is the bridge carrying the device's packets.
func (d *Device) Bridge() *Bridge { return d.bridge }

// IpcSet implements node.Device: the UAPI text becomes a wgctrl
// configuration, each endpoint the bridge's local address for that peer.
func (d *Device) IpcSet(uapi string) error {
	req, err := parseSet(uapi)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, ep := range req.endpoints {
		local, err := d.bridge.Endpoint(ep)
		if err != nil {
			return fmt.Errorf("wgdev: %s: peer %s: %w", d.name, req.cfg.Peers[i].PublicKey, err)
		}
		req.cfg.Peers[i].Endpoint = net.UDPAddrFromAddrPort(local)
		d.peers[req.cfg.Peers[i].PublicKey] = ep
	}
	if err := d.client.ConfigureDevice(d.name, req.cfg); err != nil {
		return fmt.Errorf("wgdev: configure %s: %w", d.name, err)
	}
	keep := map[wgtypes.Key]bool{}
	for _, p := range req.cfg.Peers {
		keep[p.PublicKey] = !p.Remove
	}
	for pk, ep := range d.peers {
		if k, named := keep[pk]; (named && !k) || (!named && req.cfg.ReplacePeers) {
			d.bridge.Remove(ep)
			delete(d.peers, pk)
		}
	}
	return nil
}

// IpcGet implements node.Device: the device as wgctrl reads it, with
// the bridge's local addresses named as the node's endpoints again.
func (d *Device) IpcGet() (string, error) {
	wd, err := d.client.Device(d.name)
	if err != nil {
		return "", fmt.Errorf("wgdev: read %s: %w", d.name, err)
	}
	if wd.ListenPort != int(d.bridge.device.Port()) {
		d.log.Warn("the device's listen port moved away from the bridge; peers are unreachable", "device", d.name, "port", wd.ListenPort, "bridge", d.bridge.device.Port())
	}
	return renderGet(wd, func(a *net.UDPAddr) string {
		if name, ok := d.bridge.Name(a.AddrPort()); ok {
			return name
		}
		return a.String()
	}), nil
}

// Close implements node.Device: the bridge stops, then the device goes
// (for Kernel, the interface is deleted).
func (d *Device) Close() {
	d.closeOnce.Do(func() {
		d.bridge.Close()
		if d.onClose != nil {
			d.onClose()
		}
		d.client.Close()
	})
}
