// Command agenttool is what the namespace-isolation tests and benchmarks
// run as the sandbox's agent: it tries each way around the sandbox, sends
// UDP, and sends bulk TCP, directly or through SOCKS5.
//
//	agenttool escape STATE-DIR SANDBOX-PID LOOPBACK-ADDR HOST-ADDR
//	agenttool udp ADDR MESSAGE
//	agenttool send ADDR BYTES [SOCKS5-ADDR USER PASSWORD]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: agenttool escape|udp|send ...")
	}
	var err error
	switch a := os.Args[2:]; os.Args[1] {
	case "escape":
		if len(a) != 4 {
			fail("usage: agenttool escape STATE-DIR SANDBOX-PID LOOPBACK-ADDR HOST-ADDR")
		}
		escape(a[0], a[1], a[2], a[3])
		return
	case "udp":
		if len(a) != 2 {
			fail("usage: agenttool udp ADDR MESSAGE")
		}
		err = udp(a[0], a[1])
	case "send":
		if len(a) != 2 && len(a) != 5 {
			fail("usage: agenttool send ADDR BYTES [SOCKS5-ADDR USER PASSWORD]")
		}
		err = send(a)
	default:
		fail("agenttool: unknown command " + os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}

// escape prints "ok CHECK: why" for each way around the sandbox that
// failed, "ESCAPED CHECK" for each that worked.
func escape(state, pidStr, loopback, host string) {
	pid, _ := strconv.Atoi(pidStr)
	check := func(name string, err error) {
		if err != nil {
			fmt.Printf("ok %s: %v\n", name, err)
		} else {
			fmt.Printf("ESCAPED %s\n", name)
		}
	}
	read := func(name string) error {
		_, err := os.ReadFile(filepath.Join(state, name))
		return err
	}
	check("read credentials", read("credentials.json"))
	check("read audit log", read("audit.jsonl"))
	check("write state dir", os.WriteFile(filepath.Join(state, "planted"), []byte("x"), 0o600))
	check("unmount state dir", unix.Unmount(state, unix.MNT_DETACH))
	check("read credentials after unmount", read("credentials.json"))
	// A bind of the state dir's parent without what covers the state dir
	// would show it: the kernel refuses to leave locked mounts behind, and
	// Landlock refuses every mount.
	parent, target := filepath.Dir(state), filepath.Dir(filepath.Dir(state))
	err := unix.Mount(parent, target, "", unix.MS_BIND, "")
	check("bind the state dir's parent", err)
	if err == nil {
		_, err = os.ReadFile(filepath.Join(target, filepath.Base(state), "credentials.json"))
		check("read credentials through the bind", err)
	}
	dial := func(addr string) error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	check("host loopback", dial(loopback))
	start := time.Now()
	err = dial(host)
	check("host network", err)
	if took := time.Since(start); err != nil && took > 2*time.Second {
		fmt.Printf("SLOW host network refusal: %v\n", took)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err == nil {
		unix.Close(fd)
	}
	check("raw socket", err)
	check("signal sandbox", unix.Kill(pid, 0))
	check("ptrace sandbox", unix.PtraceAttach(pid))
	_, err = os.Stat(fmt.Sprintf("/proc/%d/root", pid))
	check("sandbox /proc entry", err)
	check("ptrace init", unix.PtraceAttach(1))
	check("device down", ifDown("lattice0"))
}

func ifDown(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

func udp(addr, msg string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1500)
	for range 5 {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			fmt.Printf("udp reply: %s\n", buf[:n])
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return fmt.Errorf("udp refused: %w", err) // an ICMP error came back
		}
	}
	return errors.New("udp: no reply")
}

// send writes BYTES to ADDR and waits for the peer to close, so the time
// it takes is the transfer's.
func send(a []string) error {
	n, err := strconv.ParseInt(a[1], 10, 64)
	if err != nil {
		return err
	}
	var c net.Conn
	if len(a) == 5 {
		c, err = socks5(a[2], a[3], a[4], a[0])
	} else {
		c, err = net.Dial("tcp", a[0])
	}
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	for n > 0 {
		w := min(n, int64(len(buf)))
		if _, err := c.Write(buf[:w]); err != nil {
			return err
		}
		n -= w
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, c)
	return err
}

// socks5 connects to dst through a SOCKS5 proxy with username and
// password authentication (RFC 1928, RFC 1929).
func socks5(proxy, user, pass, dst string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(dst)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, err
	}
	req := []byte{5, 1, 2, 1, byte(len(user))}
	req = append(append(req, user...), byte(len(pass)))
	req = append(req, pass...)
	req = append(req, 5, 1, 0, 3, byte(len(host)))
	req = append(append(req, host...), byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	// method choice (2), auth status (2), reply header (4) + IPv4 (6)
	resp := make([]byte, 2+2+4+6)
	if _, err := io.ReadFull(c, resp); err != nil {
		c.Close()
		return nil, err
	}
	if resp[1] != 2 || resp[3] != 0 || resp[5] != 0 {
		c.Close()
		return nil, fmt.Errorf("socks5: refused (% x)", resp)
	}
	return c, nil
}
