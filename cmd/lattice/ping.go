package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/node"
)

func newPingCmd() *cobra.Command {
	var stateDir string
	var cfg pingConfig
	cmd := &cobra.Command{
		Use:   "ping PEER",
		Short: "Ping a peer over the overlay; each reply says direct or relay and the round trip",
		Long: `ping sends ICMP echo requests to PEER's overlay address (PEER is a peer's name or
overlay address) through this host's overlay interface, and for each reply
prints the round trip and the path the running node uses for PEER at that
moment (direct with its endpoint, or relay), read from the node's status socket.
When the path changes during the run it says so ("path upgraded: relay -> direct (reason)").
--until-direct stops at the first reply over a direct path and fails if none
comes within -c pings, as 'tailscale ping' does.

With a kernel interface the echo requests go through the host's routing to
it, which needs root (raw ICMP) or a ping_group_range that includes the user.
A 'lattice up --userspace' node's overlay is its in-process network stack,
which the host cannot reach: ping then asks the node, over its status socket,
to send each request from that stack (no privileges needed).`,
		Example: `  lattice ping web-1
  lattice ping -c 20 --until-direct web-1`,
		Args: cobra.ExactArgs(1),
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", cli.DefaultStateDir(), "the running node's --state-dir")
	f.IntVarP(&cfg.count, "count", "c", 10, "stop after this many pings")
	f.BoolVar(&cfg.untilDirect, "until-direct", false, "stop at the first reply over a direct path; fail if none within --count")
	f.DurationVarP(&cfg.interval, "interval", "i", time.Second, "time between pings")
	f.DurationVarP(&cfg.timeout, "timeout", "W", 2*time.Second, "how long to wait for each reply")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case cfg.count <= 0:
			return usagef("--count %d: must be positive", cfg.count)
		case cfg.interval <= 0:
			return usagef("--interval %v: must be positive", cfg.interval)
		case cfg.timeout <= 0:
			return usagef("--timeout %v: must be positive", cfg.timeout)
		case args[0] == "":
			return usagef("PEER is empty: give a peer's name or overlay address")
		}
		socket, err := nodeSocket(stateDir)
		if err != nil {
			return err
		}
		look := func(ctx context.Context) (node.PeerStatus, error) { return findPeer(ctx, socket, args[0]) }
		self, _, err := fetchStatus(cmd.Context(), socket)
		if err != nil {
			return err
		}
		st, err := look(cmd.Context())
		if err != nil {
			return err
		}
		if self.Userspace {
			return pingLoop(cmd.Context(), cmd.OutOrStdout(), st, look, newSocketPinger(socket), cfg)
		}
		p, err := newICMPPinger()
		if err != nil {
			return err
		}
		defer p.Close()
		return pingLoop(cmd.Context(), cmd.OutOrStdout(), st, look, p, cfg)
	}
	return cmd
}

type pingConfig struct {
	count             int
	untilDirect       bool
	interval, timeout time.Duration
}

// echoer sends one echo request and waits for its reply.
type echoer interface {
	Echo(ctx context.Context, dst netip.Addr, seq int) (time.Duration, error)
}

// findPeer asks the node at socket for the peer named (or addressed) peer.
func findPeer(ctx context.Context, socket, peer string) (node.PeerStatus, error) {
	st, _, err := fetchStatus(ctx, socket)
	if err != nil {
		return node.PeerStatus{}, err
	}
	for _, p := range st.Peers {
		if p.Peer.Name == peer || p.Peer.Address.Addr().String() == peer {
			return p, nil
		}
	}
	return node.PeerStatus{}, fmt.Errorf("no peer %q: 'lattice status' lists the peers", peer)
}

// pingLoop pings first's peer cfg.count times, printing each reply with
// the path look reports right after it, and path changes as they happen.
func pingLoop(ctx context.Context, w io.Writer, first node.PeerStatus, look func(context.Context) (node.PeerStatus, error), e echoer, cfg pingConfig) error {
	dst := first.Peer.Address.Addr()
	name := first.Peer.Name
	fmt.Fprintf(w, "PING %s (%s) over %s\n", name, dst, pathText(first))
	prev := first.Path
	var replies, direct int
	for seq := 1; seq <= cfg.count; seq++ {
		if seq > 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cfg.interval):
			}
		}
		ectx, cancel := context.WithTimeout(ctx, cfg.timeout)
		rtt, err := e.Echo(ectx, dst, seq)
		cancel()
		st, lerr := look(ctx)
		if lerr != nil {
			return lerr
		}
		if st.Path != prev {
			fmt.Fprintf(w, "path %s: %s -> %s%s\n", change(prev, st.Path), prev, st.Path, lastReason(st))
			prev = st.Path
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(w, "seq=%d: %v (path %s)\n", seq, err, pathText(st))
			continue
		}
		replies++
		fmt.Fprintf(w, "pong from %s (%s) seq=%d via %s in %s\n", name, dst, seq, pathText(st), rtt.Round(10*time.Microsecond))
		if st.Path == node.PathDirect {
			direct++
			if cfg.untilDirect {
				return nil
			}
		}
	}
	fmt.Fprintf(w, "--- %s: %d sent, %d replies, %d direct\n", name, cfg.count, replies, direct)
	switch {
	case cfg.untilDirect:
		return fmt.Errorf("no direct path to %s after %d pings (%s)", name, cfg.count, lastWhy(ctx, prev, look))
	case replies == 0:
		return fmt.Errorf("no reply from %s", name)
	}
	return nil
}

func pathText(st node.PeerStatus) string {
	if st.Path == node.PathDirect {
		return "direct " + st.Endpoint
	}
	return string(st.Path)
}

func change(from, to node.PathKind) string {
	switch {
	case to == node.PathDirect:
		return "upgraded"
	case from == node.PathDirect:
		return "downgraded"
	}
	return "changed"
}

func lastReason(st node.PeerStatus) string {
	if len(st.History) == 0 {
		return ""
	}
	return " (" + st.History[len(st.History)-1].Reason + ")"
}

func lastWhy(ctx context.Context, path node.PathKind, look func(context.Context) (node.PeerStatus, error)) string {
	st, err := look(ctx)
	if err != nil || st.Why == "" {
		return "path " + string(path)
	}
	return st.Why
}

// icmpPinger sends ICMP echo requests from one socket: raw as root, else
// an unprivileged ping socket.
type icmpPinger struct {
	c  *icmp.PacketConn
	id int
	// raw: the socket is ip4:icmp (we choose the id); a ping socket
	// ("udp4") has the kernel set it.
	raw bool
}

func newICMPPinger() (*icmpPinger, error) {
	var b [2]byte
	_, _ = rand.Read(b[:])
	p := &icmpPinger{id: int(binary.BigEndian.Uint16(b[:])), raw: os.Geteuid() == 0}
	network := "udp4"
	if p.raw {
		network = "ip4:icmp"
	}
	c, err := icmp.ListenPacket(network, "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("ping: ICMP socket (%s; root, or net.ipv4.ping_group_range including this user): %w", network, err)
	}
	p.c = c
	return p, nil
}

func (p *icmpPinger) Close() error { return p.c.Close() }

func (p *icmpPinger) Echo(ctx context.Context, dst netip.Addr, seq int) (time.Duration, error) {
	if !dst.Is4() {
		return 0, fmt.Errorf("ping: %v: only IPv4 overlay addresses", dst)
	}
	payload := make([]byte, 16)
	_, _ = rand.Read(payload)
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: p.id, Seq: seq, Data: payload}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
	if !p.raw {
		to = &net.UDPAddr{IP: dst.AsSlice()}
	}
	deadline := time.Now().Add(2 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	start := time.Now()
	if _, err := p.c.WriteTo(b, to); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	_ = p.c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, _, err := p.c.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, errors.New("no reply (timeout)")
			}
			return 0, fmt.Errorf("receive: %w", err)
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || echo.Seq != seq || string(echo.Data) != string(payload) || (p.raw && echo.ID != p.id) {
			continue
		}
		return time.Since(start), nil
	}
}
