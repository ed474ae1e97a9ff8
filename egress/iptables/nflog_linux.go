package iptables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/netns"
)

// nflogSocket is a netlink socket bound to one NFLOG group.
type nflogSocket struct {
	fd int
	f  *os.File // for the deadline-free blocking read Close interrupts
}

// openNFLOG binds group in the network namespace at ns ("" for the
// process's), copying the first maxLoggedBytes of each packet.
func openNFLOG(ns string, group uint16) (*nflogSocket, error) {
	var s *nflogSocket
	open := func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("iptables: NFLOG socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("iptables: NFLOG bind: %w", err)
		}
		s = &nflogSocket{fd: fd, f: os.NewFile(uintptr(fd), "nflog")}
		return nil
	}
	var err error
	if ns == "" {
		err = open()
	} else {
		err = netns.Do(ns, open)
	}
	if err != nil {
		return nil, err
	}
	bind := []byte{1} // NFULNL_CFG_CMD_BIND
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, maxLoggedBytes)
	mode[4] = 2 // NFULNL_COPY_PACKET
	// One record per datagram, at once: the kernel otherwise batches up
	// to 100 for up to a second, and a record still queued when the
	// process stops is lost.
	qthresh := binary.BigEndian.AppendUint32(nil, 1)
	for i, attr := range []struct {
		typ uint16
		val []byte
	}{{1, bind}, {2, mode}, {5, qthresh}} {
		if err := s.config(group, uint32(i+1), attr.typ, attr.val); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// config sends one NFULNL_MSG_CONFIG attribute for group and waits for
// the kernel's acknowledgement.
func (s *nflogSocket) config(group uint16, seq uint32, typ uint16, val []byte) error {
	attrLen := 4 + len(val)
	n := nlmsgHdrLen + nfgenLen + align4(attrLen)
	b := make([]byte, n)
	ne := binary.NativeEndian
	ne.PutUint32(b, uint32(n))
	ne.PutUint16(b[4:], subsysULOG<<8|msgConfig)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(b[8:], seq)
	b[16] = unix.AF_UNSPEC
	binary.BigEndian.PutUint16(b[18:], group)
	ne.PutUint16(b[20:], uint16(attrLen))
	ne.PutUint16(b[22:], typ)
	copy(b[24:], val)
	if err := unix.Sendto(s.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("iptables: NFLOG config: %w", err)
	}
	buf := make([]byte, 4096)
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	var got int
	if err := rc.Read(func(fd uintptr) bool {
		got, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN
	}); err != nil {
		return fmt.Errorf("iptables: NFLOG config: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("iptables: NFLOG config: %w", rerr)
	}
	if got >= nlmsgHdrLen+4 && ne.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if code := int32(ne.Uint32(buf[16:])); code != 0 {
			return fmt.Errorf("iptables: NFLOG config group %d: %w", group, unix.Errno(-code))
		}
	}
	return nil
}

// read blocks for the next datagram; after close it returns os.ErrClosed.
func (s *nflogSocket) read(buf []byte) (int, error) {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN
	}); err != nil {
		return 0, err
	}
	if errors.Is(rerr, unix.ENOBUFS) {
		return 0, nil // the kernel dropped records: carry on with the next
	}
	return n, rerr
}

func (s *nflogSocket) close() error { return s.f.Close() }
