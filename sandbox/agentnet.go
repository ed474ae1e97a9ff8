package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/latticelab/lattice/proxy"
)

// dnsTTL is the TTL of the agent's DNS answers: short, since a peer's
// address can change when it re-registers.
const dnsTTL = 5

// agentDial makes a flow the agent's gateway terminated: to AgentDNS:53
// the sandbox's own name server, anything else the egress dialer, which
// asks the policy and audits exactly as for the proxies.
func (d *PodDriver) agentDial(ctx context.Context, network, address string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr() == AgentDNS {
		if network != "udp" || ap.Port() != 53 {
			return nil, fmt.Errorf("sandbox: %s/%s: the agent's name server answers UDP port 53 only", address, network)
		}
		return d.dnsConn(), nil
	}
	return d.egress.dial(ctx, network, address)
}

// agentPing answers whether dst replies to ICMP echo, if the policy
// allows the agent to ask. Only overlay destinations are pinged (through
// the netstack); outside the overlay the sandbox has no ICMP socket.
func (d *PodDriver) agentPing(ctx context.Context, dst netip.Addr) error {
	e := d.egress
	r := Resolution{Addr: dst, Overlay: e.overlay.Contains(dst)}
	if r.Overlay {
		r.Peer = e.peerName(dst)
	}
	if err := e.decide("icmp", netip.AddrPortFrom(dst, 0), r); err != nil {
		return err
	}
	if !r.Overlay {
		return fmt.Errorf("sandbox: ping %v: no ICMP outside the overlay", dst)
	}
	_, err := d.Stack().Ping(ctx, dst)
	return err
}

// dnsConn is one DNS flow from the agent: each datagram written is a query,
// each read its answer. It is one end of a pipe whose other end a
// goroutine serves until the gateway closes the flow.
func (d *PodDriver) dnsConn() net.Conn {
	agent, server := net.Pipe()
	go func() {
		defer server.Close()
		buf := make([]byte, 4096)
		for {
			n, err := server.Read(buf)
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			answer := answerDNS(buf[:n], func(name string) (netip.Addr, error) {
				r, err := d.egress.resolve(ctx, name)
				return r.Addr, err
			})
			cancel()
			if answer == nil {
				continue
			}
			if _, err := server.Write(answer); err != nil {
				return
			}
		}
	}()
	return agent
}

// answerDNS answers one DNS query with resolve: A records for IPv4
// answers, an empty answer for AAAA (the agent has no IPv6), NXDOMAIN for
// names nobody knows. It returns nil for what is no query at all.
func answerDNS(query []byte, resolve func(string) (netip.Addr, error)) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if err != nil || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			rh.RCode = dnsmessage.RCodeNotImplemented
		}
		return buildDNS(rh, nil, nil)
	}
	var answers []dnsmessage.Resource
	switch {
	case q.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeRefused
	case q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeAAAA:
		a, err := resolve(strings.TrimSuffix(q.Name.String(), "."))
		switch {
		case errors.Is(err, proxy.ErrNoHost):
			rh.RCode = dnsmessage.RCodeNameError
		case err != nil:
			rh.RCode = dnsmessage.RCodeServerFailure
		case q.Type == dnsmessage.TypeA && a.Is4():
			answers = append(answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
				Body:   &dnsmessage.AResource{A: a.As4()},
			})
		}
	}
	return buildDNS(rh, &q, answers)
}

func buildDNS(h dnsmessage.Header, q *dnsmessage.Question, answers []dnsmessage.Resource) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		if b.StartQuestions() != nil || b.Question(*q) != nil {
			return nil
		}
	}
	if b.StartAnswers() != nil {
		return nil
	}
	for _, a := range answers {
		if b.AResource(a.Header, *a.Body.(*dnsmessage.AResource)) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// sysctlReader reads a sysctl under /proc/sys by its dotted name.
type sysctlReader func(name string) (string, bool)

func readSysctl(name string) (string, bool) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// namespacesUnavailable explains why the agent's namespaces could not be
// made: the sysctl or security module that forbids them, and the fix.
func namespacesUnavailable(err error, sysctl sysctlReader) error {
	const alt = "or pass --isolation proxy (the agent then runs in the host's namespaces with proxy variables)"
	for _, s := range []struct{ name, bad, fix string }{
		{"kernel.unprivileged_userns_clone", "0", "set it to 1 (sysctl -w kernel.unprivileged_userns_clone=1)"},
		{"user.max_user_namespaces", "0", "set it above 0 (sysctl -w user.max_user_namespaces=15000)"},
		{"kernel.apparmor_restrict_unprivileged_userns", "1", "set it to 0, or give the lattice binary an AppArmor profile that allows userns"},
	} {
		if v, ok := sysctl(s.name); ok && v == s.bad {
			return fmt.Errorf("sandbox: namespace isolation: unprivileged user namespaces are disabled (%s=%s): %s, %s: %w", s.name, v, s.fix, alt, err)
		}
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("sandbox: namespace isolation: creating user, network, mount and PID namespaces was refused: a seccomp profile (Docker's default, Kubernetes' RuntimeDefault) or a security module forbids unshare/clone with CLONE_NEWUSER; allow it (e.g. seccomp Unconfined for this container), %s: %w", alt, err)
	}
	return fmt.Errorf("sandbox: namespace isolation: starting the agent's init: %w (%s)", err, alt)
}
