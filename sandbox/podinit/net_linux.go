package podinit

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// agentLink is the agent's end of the network as the sandbox gets it: a
// file whose reads and writes are packets, and the link header each
// carries.
type agentLink struct {
	file   *os.File
	kind   string // "tun" or "veth"
	header []byte // written before each packet, stripped from each read
	vnet   bool   // a virtio_net_hdr before each packet (Reply.VnetHdr)
}

// setupAgentNetwork makes the agent's network namespace: lo up and one
// interface, Interface, with the overlay address (whose prefix is the
// overlay's route) and the default route. Every destination goes to the
// sandbox, which asks the egress policy about each flow: a route that
// depended on the policy would go stale when the policy is reloaded.
//
// The interface is a TUN device when /dev/net/tun can be opened (it is
// mode 0666 on most distributions). Where it cannot (a 0600 device node,
// none in the container), it is one end of a veth pair made inside the
// namespace, and the sandbox gets a packet socket bound to the other end:
// the socket stays in the namespace it was made in, as a TUN device does.
func setupAgentNetwork(cfg Config) (agentLink, error) {
	link, err := setupAgentLink(cfg)
	if err != nil {
		return agentLink{}, err
	}
	if err := configureAgentInterface(cfg, link.kind); err != nil {
		_ = link.file.Close()
		return agentLink{}, err
	}
	return link, nil
}

func configureAgentInterface(cfg Config, kind string) error {
	if cfg.Bits < 0 || cfg.Bits > 32 {
		return fmt.Errorf("agent address %v/%d: want 0-32 bits", cfg.Addr, cfg.Bits)
	}
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	defer unix.Close(ctl)
	if err := setIfFlags(ctl, "lo", unix.IFF_UP); err != nil {
		return err
	}
	if err := ifIoctlAddr(ctl, unix.SIOCSIFADDR, cfg.Addr); err != nil {
		return err
	}
	if err := ifIoctlAddr(ctl, unix.SIOCSIFNETMASK, mask4(cfg.Bits)); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq(Interface)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(cfg.MTU))
	if err := unix.IoctlIfreq(ctl, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("%s: MTU %d: %w", Interface, cfg.MTU, err)
	}
	flags := uint16(unix.IFF_UP)
	if kind == "veth" {
		// No ARP: the kernel sends every packet to the interface's own
		// MAC address, and the sandbox's packet socket takes them all.
		flags |= unix.IFF_NOARP
	}
	if err := setIfFlags(ctl, Interface, flags); err != nil {
		return err
	}
	if err := addDefaultRoute(Interface); err != nil {
		return err
	}
	// The agent's ping uses an ICMP datagram socket, which needs its group
	// in this range; raw sockets need CAP_NET_RAW, which it lacks. No
	// IPv6: the overlay is IPv4 and nothing else should leak around it.
	for _, s := range []struct{ path, value string }{
		{"/proc/sys/net/ipv4/ping_group_range", "0 0"}, // gid 0 is the only one mapped
		{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "1"},
		{"/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"},
	} {
		if err := os.WriteFile(s.path, []byte(s.value), 0); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("sysctl %s: %w", s.path, err)
		}
	}
	return nil
}

// mask4 is the IPv4 netmask of a prefix of bits bits.
func mask4(bits int) [4]byte {
	var m [4]byte
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// openTUN makes a TUN device (no packet information header; a
// virtio_net_hdr before each IP packet), non-blocking for the Go poller.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("creating TUN device %s: %w", name, err)
	}
	// Checksum and TCP segmentation offload: the agent's kernel hands
	// the sandbox TCP segments of up to 64 KB with the pseudo-header in
	// their checksum, for the sandbox to cut at the overlay's MTU. A
	// kernel that refuses them segments itself; the header stays.
	_ = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM|unix.TUN_F_TSO4)
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}

func setIfFlags(ctl int, name string, flags uint16) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(ctl, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | flags)
	if err := unix.IoctlIfreq(ctl, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: up: %w", name, err)
	}
	return nil
}

func ifIoctlAddr(ctl int, req uint, a [4]byte) error {
	ifr, err := unix.NewIfreq(Interface)
	if err != nil {
		return err
	}
	if err := ifr.SetInet4Addr(a[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(ctl, req, ifr); err != nil {
		return fmt.Errorf("%s: address %v: %w", Interface, a, err)
	}
	return nil
}

// addDefaultRoute adds 0.0.0.0/0 dev name.
func addDefaultRoute(name string) error {
	index, err := ifIndex(name)
	if err != nil {
		return err
	}
	rt := unix.RtMsg{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_BOOT, Scope: unix.RT_SCOPE_LINK, Type: unix.RTN_UNICAST}
	body := append(structBytes(unsafe.Pointer(&rt), unix.SizeofRtMsg), nlAttr(unix.RTA_OIF, u32(index))...)
	if err := nlRequest(unix.RTM_NEWROUTE, body); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

func ifIndex(name string) (uint32, error) {
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ctl)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(ctl, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("%s: index: %w", name, err)
	}
	return ifr.Uint32(), nil
}

// nlRequest sends one rtnetlink request that creates something and waits
// for its acknowledgement.
func nlRequest(typ uint16, body []byte) error {
	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(nl)
	h := unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr + len(body)), Type: typ,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, Seq: 1}
	msg := append(structBytes(unsafe.Pointer(&h), unix.SizeofNlMsghdr), body...)
	if err := unix.Sendto(nl, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(nl, buf, 0)
	if err != nil {
		return err
	}
	// The answer is an NLMSG_ERROR whose first field is 0 or -errno.
	if n < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(buf[4:6]) != unix.NLMSG_ERROR {
		return fmt.Errorf("unexpected answer of %d bytes", n)
	}
	if code := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

// nlAttr is one netlink attribute, padded to 4 bytes.
func nlAttr(typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(l))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	copy(b[unix.SizeofRtAttr:], data)
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func structBytes(p unsafe.Pointer, size int) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(p), size)...)
}
