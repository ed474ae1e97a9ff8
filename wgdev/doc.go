// Package wgdev is the regular node's WireGuard as operators see it: a
// device that wg(8) and wgctrl show and set.
//
//   - Kernel (kernel_linux.go): kernel WireGuard, `ip link add NAME type
//     wireguard`, configured through wgctrl over netlink (a
//     node.DeviceOpener). The kernel owns the device's UDP socket, so ICE,
//     the relay and the shared port reach it through a Bridge.
//   - Userspace (userspace_linux.go): where the kernel has no WireGuard,
//     wireguard-go in process on the node's own Bind (no bridge), with its
//     UAPI socket in /var/run/wireguard (UAPIServer, uapiserver.go).
//   - Device (device.go): any WireGuard device with its own socket that
//     wgctrl finds, attached through a Bridge; node.Device's UAPI text is
//     translated to wgctrl's configuration and back in uapi.go.
//   - Bridge (bridge.go): one local socket per peer between the device and
//     the node's Bind (see Bridge for the shape).
package wgdev
