package podinit

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// agentPeerInterface is the sandbox's end of the veth pair.
const agentPeerInterface = Interface + "p"

// packetSocketBuffer is the packet socket's buffer each way: a few
// milliseconds of a fast flow in 64 KB packets (capped by net.core's
// rmem_max and wmem_max).
const packetSocketBuffer = 4 << 20

func setupAgentLink(cfg Config) (agentLink, error) {
	tun, err := openTUN(Interface)
	if err == nil {
		return agentLink{file: tun, kind: "tun", vnet: true}, nil
	}
	if !errors.Is(err, os.ErrPermission) && !errors.Is(err, os.ErrNotExist) {
		return agentLink{}, err
	}
	link, verr := openVeth(cfg.MTU)
	if verr != nil {
		return agentLink{}, fmt.Errorf("%w; and without it: %w", err, verr)
	}
	return link, nil
}

// openVeth makes the veth pair and a packet socket on the sandbox's end
// that receives the IPv4 frames the agent sends (a socket bound to one
// protocol, unlike ETH_P_ALL, does not see its own frames go out).
func openVeth(mtu int) (agentLink, error) {
	if err := addVeth(Interface, agentPeerInterface, mtu); err != nil {
		return agentLink{}, fmt.Errorf("creating veth %s: %w", Interface, err)
	}
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return agentLink{}, err
	}
	defer unix.Close(ctl)
	if err := setIfFlags(ctl, agentPeerInterface, unix.IFF_UP|unix.IFF_NOARP); err != nil {
		return agentLink{}, err
	}
	agentMAC, err := hwAddr(ctl, Interface)
	if err != nil {
		return agentLink{}, err
	}
	peerMAC, err := hwAddr(ctl, agentPeerInterface)
	if err != nil {
		return agentLink{}, err
	}
	index, err := ifIndex(agentPeerInterface)
	if err != nil {
		return agentLink{}, err
	}
	proto := htons(unix.ETH_P_IP)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto))
	if err != nil {
		return agentLink{}, fmt.Errorf("packet socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, packetSocketBuffer)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, packetSocketBuffer)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: int(index)}); err != nil {
		unix.Close(fd)
		return agentLink{}, fmt.Errorf("packet socket on %s: %w", agentPeerInterface, err)
	}
	// The Ethernet header of every frame to the agent.
	hdr := append(append(append([]byte(nil), agentMAC...), peerMAC...), 0x08, 0x00)
	return agentLink{file: os.NewFile(uintptr(fd), agentPeerInterface), kind: "veth", header: hdr}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func hwAddr(ctl int, name string) ([]byte, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(ctl, unix.SIOCGIFHWADDR, ifr); err != nil {
		return nil, fmt.Errorf("%s: MAC address: %w", name, err)
	}
	// struct ifreq: the name, then a struct sockaddr whose sa_data (after
	// the 2-byte family) holds the address.
	raw := unsafe.Slice((*byte)(unsafe.Pointer(ifr)), unsafe.Sizeof(*ifr))
	return append([]byte(nil), raw[unix.IFNAMSIZ+2:unix.IFNAMSIZ+8]...), nil
}

// addVeth creates the veth pair name and peer, both with mtu.
func addVeth(name, peer string, mtu int) error {
	var ifi unix.IfInfomsg
	ifi.Family = unix.AF_UNSPEC
	info := structBytes(unsafe.Pointer(&ifi), unix.SizeofIfInfomsg)
	peerMsg := append(append(append([]byte(nil), info...), nlAttr(unix.IFLA_IFNAME, cstring(peer))...), nlAttr(unix.IFLA_MTU, u32(uint32(mtu)))...)
	const vethInfoPeer = 1 // VETH_INFO_PEER
	linkInfo := append(nlAttr(unix.IFLA_INFO_KIND, []byte("veth")), nlAttr(unix.IFLA_INFO_DATA, nlAttr(vethInfoPeer, peerMsg))...)
	body := append(append(append(info, nlAttr(unix.IFLA_IFNAME, cstring(name))...), nlAttr(unix.IFLA_MTU, u32(uint32(mtu)))...), nlAttr(unix.IFLA_LINKINFO, linkInfo)...)
	return nlRequest(unix.RTM_NEWLINK, body)
}

func cstring(s string) []byte { return append([]byte(s), 0) }
