package runner

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/latticelab/lattice/sandbox"
)

// SOCKS5Fetch fetches rawURL through a pod sandbox's SOCKS5 proxy from
// the sandbox's own host, as an agent there would: it speaks RFC 1928
// with RFC 1929 authentication (none if auth is false) and lets the proxy
// resolve the name.
func (l *Lab) SOCKS5Fetch(ctx context.Context, name, rawURL string, auth bool) (int, string, error) {
	rn, err := l.node(name)
	if err != nil {
		return 0, "", err
	}
	pod, ok := rn.(*podNode)
	if !ok {
		return 0, "", fmt.Errorf("node %s is not a pod sandbox", name)
	}
	proxyAddr := pod.pod.Status().SOCKS5
	if proxyAddr == "" {
		return 0, "", fmt.Errorf("sandbox %s has no SOCKS5 proxy", name)
	}
	creds := pod.pod.ProxyCredentials()
	host := l.hostNet(pod.plan.Host)
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		c, err := host.Dial(ctx, "tcp", proxyAddr)
		if err != nil {
			return nil, err
		}
		stop := bindConn(ctx, c)
		defer stop()
		user, pass := creds.Username, creds.Password
		if !auth {
			user, pass = "", ""
		}
		if err := socks5Connect(c, addr, user, pass); err != nil {
			c.Close()
			return nil, err
		}
		_ = c.SetDeadline(timeZero)
		return c, nil
	}
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	return get(ctx, &http.Client{Transport: tr}, rawURL)
}

// socks5Connect asks the proxy on c to connect to addr (host:port).
func socks5Connect(c net.Conn, addr, user, pass string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return err
	}
	// Each is sent after a one-byte length (RFC 1928 section 5, RFC 1929).
	for _, f := range []struct{ what, v string }{{"user name", user}, {"password", pass}, {"host name", host}} {
		if len(f.v) > 255 {
			return fmt.Errorf("socks5: %s of %d bytes: at most 255 fit the protocol", f.what, len(f.v))
		}
	}
	method := byte(0x00)
	if user != "" {
		method = 0x02
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var reply [2]byte
	if _, err := io.ReadFull(r, reply[:]); err != nil {
		return fmt.Errorf("socks5 greeting: %w", err)
	}
	if reply[1] != method {
		return fmt.Errorf("socks5: the proxy refused authentication method %d (answered %#x)", method, reply[1])
	}
	if method == 0x02 {
		msg := append([]byte{1, byte(len(user))}, user...)
		msg = append(append(msg, byte(len(pass))), pass...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, reply[:]); err != nil {
			return fmt.Errorf("socks5 auth: %w", err)
		}
		if reply[1] != 0 {
			return errors.New("socks5: the proxy refused the credentials")
		}
	}
	req := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		req = append(append(req, 1), a.AsSlice()...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		return err
	}
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return fmt.Errorf("socks5 connect: %w", err)
	}
	if head[1] != 0 {
		return fmt.Errorf("socks5: connect to %s refused with reply %d (%s)", addr, head[1], socksReply(head[1]))
	}
	skip := map[byte]int{1: 4 + 2, 4: 16 + 2}[head[3]]
	if head[3] == 3 {
		n, err := r.ReadByte()
		if err != nil {
			return err
		}
		skip = int(n) + 2
	}
	if _, err := io.CopyN(io.Discard, r, int64(skip)); err != nil {
		return err
	}
	if r.Buffered() > 0 {
		return errors.New("socks5: data before the reply ended")
	}
	return nil
}

func socksReply(b byte) string {
	if s, ok := map[byte]string{1: "general failure", 2: "not allowed by ruleset", 3: "network unreachable",
		4: "host unreachable", 5: "connection refused", 6: "TTL expired", 7: "command not supported"}[b]; ok {
		return s
	}
	return "unknown"
}

// Egress asks a pod sandbox to connect to addr and reports whether its
// egress policy allowed it (the connection itself may still fail).
func (l *Lab) Egress(ctx context.Context, name, addr string) (allowed bool, detail string, err error) {
	rn, err := l.node(name)
	if err != nil {
		return false, "", err
	}
	pod, ok := rn.(*podNode)
	if !ok {
		return false, "", fmt.Errorf("node %s is not a pod sandbox", name)
	}
	if u, perr := l.resolveURL("http://" + addr); perr == nil {
		if pu, _ := url.Parse(u); pu != nil {
			addr = pu.Host
		}
	}
	c, derr := pod.pod.Dial(ctx, "tcp", addr)
	switch {
	case derr == nil:
		c.Close()
		return true, "connected", nil
	case errors.Is(derr, sandbox.ErrDenied):
		return false, derr.Error(), nil
	}
	return true, "allowed, but: " + derr.Error(), nil
}

// AgentRun runs argv as the agent of a gvisor sandbox: in a runsc
// container in the sandbox's pod, as `lattice sandbox run` would.
func (l *Lab) AgentRun(ctx context.Context, name string, argv []string) (AgentResult, error) {
	rn, err := l.node(name)
	if err != nil {
		return AgentResult{}, err
	}
	gv, ok := rn.(*gvisorNode)
	if !ok {
		return AgentResult{}, fmt.Errorf("node %s is not a gvisor sandbox", name)
	}
	return gv.child.run(ctx, argv)
}

// Forward connects from a peer to a sandbox's overlay port and fetches
// what the forward's target on the sandbox's host serves.
func (l *Lab) Forward(ctx context.Context, name string, port uint16, from string) (int, string, error) {
	addr, err := l.overlayAddr(name)
	if err != nil {
		return 0, "", err
	}
	return l.Fetch(ctx, from, fmt.Sprintf("http://%s/", netip.AddrPortFrom(addr, port)))
}
