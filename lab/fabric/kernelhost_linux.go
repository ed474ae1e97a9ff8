package fabric

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/latticelab/lattice/internal/netns"

	"golang.org/x/sys/unix"
)

// KernelHostConfig declares a real-kernel host: a Linux network namespace
// whose only way out is a TUN device the fabric reads and writes, so its
// packets are routed, NATed, impaired and captured like any lab host's.
// Programs run in it with setns (nsenter --net=/run/netns/NAME): the
// kernel's own TCP/IP, iptables and TUN devices (wg0) all work there. It
// needs root.
type KernelHostConfig struct {
	// Name is the host's name in the fabric. The namespace is named after
	// it, the process and a counter ("lab-NAME-PID-N", see Netns); its
	// interface is "eth0".
	Name string
	// Interface attaches the host to one network, as a HostConfig's do.
	Interface InterfaceConfig
	// Gateway is the default route's next hop, on Interface's network.
	// If zero, the host reaches only its own network.
	Gateway netip.Addr
}

var kernelHostSeq atomic.Uint64

// KernelHost is a network namespace joined to the fabric.
type KernelHost struct {
	name  string
	netns string
	ifc   *Interface
	tun   *os.File
	gw    netip.Addr
	wg    sync.WaitGroup
	once  sync.Once
}

// AddKernelHost creates the namespace and its TUN device and attaches it.
func (f *Fabric) AddKernelHost(cfg KernelHostConfig) (*KernelHost, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: kernel host %q: needs root (network namespaces, TUN devices)", ErrInvalid, cfg.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if err := f.nameFreeLocked("host", cfg.Name); err != nil {
		return nil, err
	}
	ifcs, err := f.buildInterfacesLocked(cfg.Name, []InterfaceConfig{cfg.Interface})
	if err != nil {
		return nil, err
	}
	ifc := ifcs[0]
	for _, a := range ifc.Addrs() {
		if !a.Is4() {
			ifc.close()
			return nil, fmt.Errorf("%w: kernel host %q: address %v: kernel hosts are IPv4 only (IPv6 is for in-process hosts)", ErrInvalid, cfg.Name, a)
		}
	}
	if cfg.Gateway.IsValid() && !ifc.network.contains(cfg.Gateway) {
		ifc.close()
		return nil, fmt.Errorf("%w: kernel host %q: gateway %v is not on %s", ErrInvalid, cfg.Name, cfg.Gateway, ifc.network.name)
	}
	reapOnce.Do(func() {
		reaped, err := ReapNamespaces()
		if len(reaped) > 0 {
			f.log.Info("removed namespaces left by labs that were killed", "namespaces", reaped)
		}
		if err != nil {
			f.log.Warn("could not remove every namespace left by killed labs", "err", err)
		}
	})
	// Unique per process and host: parallel labs may name hosts alike.
	ns := fmt.Sprintf("lab-%s-%d-%d", cfg.Name, os.Getpid(), kernelHostSeq.Add(1))
	k := &KernelHost{name: cfg.Name, netns: ns, ifc: ifc, gw: cfg.Gateway}
	if err := k.setup(); err != nil {
		k.teardown()
		ifc.close()
		return nil, fmt.Errorf("kernel host %q: %w", cfg.Name, err)
	}
	ifc.handle = k.deliver
	if err := attachLocked(ifcs); err != nil {
		k.teardown()
		ifc.close()
		return nil, err
	}
	ifc.start()
	k.wg.Add(1)
	go k.readLoop()
	f.kernelHosts[cfg.Name] = k
	return k, nil
}

// Netns is the namespace's name (under /run/netns).
func (k *KernelHost) Netns() string { return k.netns }

// NetnsPath is the namespace's path, for setns and nsenter --net=.
func (k *KernelHost) NetnsPath() string { return "/run/netns/" + k.netns }

// Interface returns the host's fabric interface.
func (k *KernelHost) Interface() *Interface { return k.ifc }

// Addr is the host's address.
func (k *KernelHost) Addr() netip.Addr { return k.ifc.addr }

func ipCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// reapOnce runs ReapNamespaces before a process's first kernel host.
var reapOnce sync.Once

// nsName matches the namespaces kernel hosts make: lab-HOST-PID-SEQ.
var nsName = regexp.MustCompile(`^lab-.+-([0-9]+)-[0-9]+$`)

// ReapNamespaces deletes the kernel-host namespaces that labs killed
// without a chance to clean up (SIGKILL, a crash) left under /run/netns:
// those whose process is gone. It returns the names it deleted. A fabric
// calls it before its first kernel host.
func ReapNamespaces() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fabric: list namespaces: %w", err)
	}
	var reaped []string
	var errs []error
	for _, e := range entries {
		m := nsName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || !errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			continue // ours, or its lab still runs
		}
		if err := ipCommand("netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		reaped = append(reaped, e.Name())
	}
	return reaped, errors.Join(errs...)
}

// setup makes the namespace, the TUN device in it, its address and routes.
func (k *KernelHost) setup() error {
	_ = exec.Command("ip", "netns", "del", k.netns).Run() // ours, from a killed run with our PID
	if err := ipCommand("netns", "add", k.netns); err != nil {
		return err
	}
	fd, err := k.openTUN("eth0")
	if err != nil {
		return err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	k.tun = os.NewFile(uintptr(fd), "tun")
	pfx := netip.PrefixFrom(k.ifc.addr, k.ifc.network.prefix.Bits())
	cmds := [][]string{
		{"-n", k.netns, "link", "set", "lo", "up"},
		{"-n", k.netns, "addr", "add", pfx.String(), "dev", "eth0"},
	}
	for _, a := range k.ifc.aliases {
		// Aliases: a two-address RFC 5780 STUN server, or any program
		// that binds a second address, runs in the namespace.
		cmds = append(cmds, []string{"-n", k.netns, "addr", "add", netip.PrefixFrom(a, pfx.Bits()).String(), "dev", "eth0"})
	}
	cmds = append(cmds, []string{"-n", k.netns, "link", "set", "eth0", "mtu", fmt.Sprint(k.ifc.mtu), "up"})
	for _, args := range cmds {
		if err := ipCommand(args...); err != nil {
			return err
		}
	}
	if k.gw.IsValid() {
		// A TUN has no link layer: the default route names the device,
		// and the fabric sends what leaves it to the gateway.
		if err := ipCommand("-n", k.netns, "route", "add", "default", "dev", "eth0"); err != nil {
			return err
		}
	}
	return nil
}

// openTUN creates a TUN device (no packet info) inside the namespace.
func (k *KernelHost) openTUN(name string) (int, error) {
	fd := -1
	err := netns.Do(k.NetnsPath(), func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		var req [unix.IFNAMSIZ + 64]byte
		copy(req[:], name)
		*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", e)
		}
		return nil
	})
	return fd, err
}

// readLoop frames what the kernel sends and puts it on the network.
func (k *KernelHost) readLoop() {
	defer k.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, err := k.tun.Read(buf)
		if err != nil {
			return
		}
		if n < 20 {
			continue
		}
		var dst netip.Addr
		et := uint16(etherTypeIPv4)
		switch buf[0] >> 4 {
		case 4:
			dst = netip.AddrFrom4([4]byte(buf[16:20]))
		case 6:
			if n < 40 {
				continue
			}
			dst = netip.AddrFrom16([16]byte(buf[24:40]))
			et = etherTypeIPv6
		default:
			continue
		}
		nh := dst
		if !k.ifc.network.prefix.Contains(dst) && k.gw.IsValid() {
			nh = k.gw
		}
		nb := k.ifc.network.neighbor(nh)
		if nb == nil {
			continue
		}
		f := getFrame(ethHeaderLen + n)
		writeEth(f, nb.mac, k.ifc.mac, et)
		copy(f[ethHeaderLen:], buf[:n])
		k.ifc.transmit(f)
	}
}

// deliver writes received frames into the namespace.
func (k *KernelHost) deliver(batch [][]byte) {
	for _, f := range batch {
		if len(f) > ethHeaderLen {
			_, _ = k.tun.Write(f[ethHeaderLen:])
		}
		putFrame(f)
	}
}

func (k *KernelHost) teardown() {
	if k.tun != nil {
		k.tun.Close()
	}
	_ = exec.Command("ip", "netns", "del", k.netns).Run()
}

// close detaches the host and removes its namespace. Idempotent.
func (k *KernelHost) close() error {
	var err error
	k.once.Do(func() {
		k.ifc.close()
		if k.tun != nil {
			err = k.tun.Close()
		}
		k.wg.Wait()
		if e := ipCommand("netns", "del", k.netns); e != nil && !errors.Is(e, os.ErrNotExist) {
			err = errors.Join(err, e)
		}
	})
	return err
}
