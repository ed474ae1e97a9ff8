package bpf

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openTUN creates TUN device name in the client namespace with address
// 10.99.0.1/24 and returns its file; packets routed to it are read there.
func openTUN(t *testing.T, p pair, name string) *os.File {
	t.Helper()
	var f *os.File
	in(t, p.client, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		var req [unix.IFNAMSIZ + 64]byte
		copy(req[:], name)
		*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
			unix.Close(fd)
			return e
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), "tun")
		return nil
	})
	t.Cleanup(func() { f.Close() })
	ns := p.client[strings.LastIndexByte(p.client, '/')+1:]
	for _, args := range [][]string{{"addr", "add", "10.99.0.1/24", "dev", name}, {"link", "set", name, "up"}} {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	return f
}

// readUDPTo reads packets from the TUN until one carries payload to dst,
// or the deadline passes.
func readUDPTo(t *testing.T, tun *os.File, dst netip.Addr, payload []byte, wait time.Duration) bool {
	t.Helper()
	require.NoError(t, tun.SetReadDeadline(time.Now().Add(wait)))
	buf := make([]byte, 2048)
	d := dst.As4()
	for {
		n, err := tun.Read(buf)
		if err != nil {
			return false
		}
		if n >= 28 && buf[0]>>4 == 4 && bytes.Equal(buf[16:20], d[:]) && bytes.HasSuffix(buf[:n], payload) {
			return true
		}
	}
}

// TestFilterOnTUN attaches to a TUN device (no link-layer header, as the
// overlay interface): the allowed datagram reaches the device's reader,
// the denied one does not and is reported.
func TestFilterOnTUN(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	tun := openTUN(t, p, "lt0")
	ev := make(events, 16)
	pol := mustPolicy(t, p, "default: deny\nrules:\n  - allow: 10.99.0.2\n    proto: udp\n    ports: [7000]\n")
	var f *Filter
	in(t, p.client, func() (err error) {
		f, err = New(Config{Interface: "lt0", Policy: pol, OnEvent: ev.on})
		return err
	})
	defer f.Close()
	send := func(to netip.AddrPort, payload string) {
		t.Helper()
		c, err := dial(t, p, "udp", to, time.Second)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte(payload))
		require.NoError(t, err)
	}
	allowed, denied := netip.MustParseAddrPort("10.99.0.2:7000"), netip.MustParseAddrPort("10.99.0.3:7000")
	send(allowed, "allowed-datagram")
	assert.True(t, readUDPTo(t, tun, allowed.Addr(), []byte("allowed-datagram"), 3*time.Second), "allowed datagram on the TUN")
	send(denied, "denied-datagram")
	assert.False(t, readUDPTo(t, tun, denied.Addr(), []byte("denied-datagram"), 300*time.Millisecond), "denied datagram on the TUN")
	e := ev.next(t, denied)
	assert.Equal(t, "default deny", e.Rule)
	assert.Equal(t, netip.MustParseAddr("10.99.0.1"), e.Src)
}
