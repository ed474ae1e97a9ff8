package fabric

import (
	"context"
	"net"

	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/netx"
)

// A KernelHost is a netx.Network: its sockets are the kernel's, created
// inside the namespace (a socket stays in the namespace it was made in,
// whichever thread uses it later), so in-process components such as a
// node or a service run on it as on any lab host, over the kernel's own
// TCP/IP instead of a gVisor stack.
var _ netx.Network = (*KernelHost)(nil)

// Dial implements netx.Network.
func (k *KernelHost) Dial(ctx context.Context, network, address string) (c net.Conn, err error) {
	err = netns.Do(k.NetnsPath(), func() error {
		c, err = netx.OS.Dial(ctx, network, address)
		return err
	})
	return c, err
}

// Listen implements netx.Network.
func (k *KernelHost) Listen(ctx context.Context, network, address string) (ln net.Listener, err error) {
	err = netns.Do(k.NetnsPath(), func() error {
		ln, err = netx.OS.Listen(ctx, network, address)
		return err
	})
	return ln, err
}

// ListenPacket implements netx.Network.
func (k *KernelHost) ListenPacket(ctx context.Context, network, address string) (pc net.PacketConn, err error) {
	err = netns.Do(k.NetnsPath(), func() error {
		pc, err = netx.OS.ListenPacket(ctx, network, address)
		return err
	})
	return pc, err
}

// Interfaces implements netx.Network: the namespace's lo and eth0 (and
// whatever a program there added, such as wg0).
func (k *KernelHost) Interfaces() (ifs []netx.Interface, err error) {
	err = netns.Do(k.NetnsPath(), func() error {
		ifs, err = netx.OS.Interfaces()
		return err
	})
	return ifs, err
}

// KernelHost returns the named kernel host or nil.
func (f *Fabric) KernelHost(name string) *KernelHost {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kernelHosts[name]
}

// Name is the host's name in the fabric.
func (k *KernelHost) Name() string { return k.name }
