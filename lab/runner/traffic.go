package runner

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/proxy"
)

// PingResult is a ping step's outcome.
type PingResult = scenario.PingResult

// Ping sends count UDP echoes from one node to another over the overlay.
// The first may take retries (a WireGuard handshake, a path settling)
// until ctx ends; the others wait at most a second each.
func (l *Lab) Ping(ctx context.Context, from, to string, count int) (PingResult, error) {
	var res PingResult
	src, err := l.node(from)
	if err != nil {
		return res, err
	}
	dst, err := l.overlayAddr(to)
	if err != nil {
		return res, err
	}
	pc, err := src.overlay().ListenPacket(ctx, "udp", ":0")
	if err != nil {
		return res, err
	}
	defer pc.Close()
	stop := context.AfterFunc(ctx, func() { _ = pc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	addr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, EchoPort))
	buf := make([]byte, 256)
	round := func(i int, wait time.Duration) (time.Duration, error) {
		msg := fmt.Appendf(nil, "lattice-lab ping %d %d", i, time.Now().UnixNano())
		start := time.Now()
		if _, err := pc.WriteTo(msg, addr); err != nil {
			if errors.Is(err, proxy.ErrDenied) {
				return 0, err
			}
			// A send that fails at once (no route yet) waits out its
			// round: retrying at once would spin, and in virtual time
			// it would hold the clock still.
			wake := time.NewTimer(time.Until(start.Add(wait)))
			defer wake.Stop()
			select {
			case <-wake.C:
			case <-ctx.Done():
			}
			return 0, err
		}
		_ = pc.SetReadDeadline(start.Add(wait))
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return 0, err
			}
			if string(buf[:n]) == string(msg) {
				return time.Since(start), nil
			}
		}
	}
	// Warm up: the first answer proves the path works at all.
	for i := 0; ; i++ {
		_, err := round(-1-i, 500*time.Millisecond)
		if err == nil {
			break
		}
		if errors.Is(err, proxy.ErrDenied) {
			return res, fmt.Errorf("ping from %s to %s (%v) on udp/%d: %w", from, to, dst, EchoPort, err)
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("no answer from %s (%v) on udp/%d (%s): %w", to, dst, EchoPort, l.pairView(from, to), context.Cause(ctx))
		}
	}
	var total time.Duration
	for i := range count {
		res.Sent++
		rtt, err := round(i, time.Second)
		if ctx.Err() != nil {
			return res, context.Cause(ctx)
		}
		if err == nil {
			res.Received++
			total += rtt
		}
	}
	if res.Received > 0 {
		res.AvgRTT = total / time.Duration(res.Received)
	}
	return res, nil
}

// Transfer sends size bytes from one node to another's sink over TCP and
// checks their SHA-256 on arrival. It returns the time from the first
// byte sent to the sink's answer.
func (l *Lab) Transfer(ctx context.Context, from, to string, size int64) (time.Duration, error) {
	src, err := l.node(from)
	if err != nil {
		return 0, err
	}
	dst, err := l.overlayAddr(to)
	if err != nil {
		return 0, err
	}
	var conn net.Conn
	for {
		attempt, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err = src.overlay().Dial(attempt, "tcp", netip.AddrPortFrom(dst, SinkPort).String())
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("connect to %s: %w", to, err)
		}
	}
	defer conn.Close()
	defer bindConn(ctx, conn)()
	start := time.Now()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	h := sha256.New()
	w := io.MultiWriter(conn, h)
	if _, err := conn.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	if n, err := io.CopyN(w, pattern{}, size); err != nil {
		return 0, fmt.Errorf("send after %d of %d bytes: %w", n, size, err)
	}
	var sum [32]byte
	if _, err := io.ReadFull(conn, sum[:]); err != nil {
		return 0, fmt.Errorf("wait for %s's checksum: %w", to, err)
	}
	if want := h.Sum(nil); string(sum[:]) != string(want) {
		return 0, fmt.Errorf("SHA-256 mismatch: sent %x, %s received %x", want[:8], to, sum[:8])
	}
	return time.Since(start), nil
}

// Fetch GETs rawURL from a node over the overlay; a node name as the
// URL's host means that node's overlay address.
func (l *Lab) Fetch(ctx context.Context, from, rawURL string) (int, string, error) {
	src, err := l.node(from)
	if err != nil {
		return 0, "", err
	}
	u, err := l.resolveURL(rawURL)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{DialContext: src.overlay().Dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	return get(ctx, &http.Client{Transport: tr}, u)
}

// resolveURL replaces a node name in u's host by its overlay address.
func (l *Lab) resolveURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return raw, nil
	}
	a, err := l.overlayAddr(strings.TrimSuffix(host, ".lattice"))
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	u.Host = net.JoinHostPort(a.String(), port)
	return u.String(), nil
}

func get(ctx context.Context, c *http.Client, u string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// EchoConn connects node from's host to an echo server started on host to
// for this one connection, over the underlay: through from's NATs, as any
// program on the node's machine would. Closing the connection stops the
// server.
func (l *Lab) EchoConn(ctx context.Context, from, to string) (net.Conn, error) {
	pn := l.plan.Node(from)
	if pn == nil {
		return nil, fmt.Errorf("no node %q", from)
	}
	ph := l.plan.Host(to)
	if ph == nil || len(ph.Config.Interfaces) == 0 {
		return nil, fmt.Errorf("no host %q", to)
	}
	addr := netip.AddrPortFrom(ph.Config.Interfaces[0].Addr, 0)
	ln, err := l.hostNet(to).Listen(ctx, "tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("echo server on %s: %w", to, err)
	}
	e := &echoConn{ln: ln, done: make(chan struct{})}
	go e.serve()
	c, err := l.hostNet(pn.Host).Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		_ = e.stop()
		return nil, fmt.Errorf("dial %s's echo server at %v from %s: %w", to, ln.Addr(), from, err)
	}
	e.Conn = c
	return e, nil
}

// echoConn is a client connection and the one-connection echo server it
// talks to.
type echoConn struct {
	net.Conn
	ln   net.Listener
	done chan struct{} // closed when serve returns

	mu   sync.Mutex // guards peer
	peer net.Conn   // the server's side, once accepted
}

func (e *echoConn) serve() {
	defer close(e.done)
	c, err := e.ln.Accept()
	if err != nil {
		return
	}
	e.mu.Lock()
	e.peer = c
	e.mu.Unlock()
	_, _ = io.Copy(c, c)
	_ = c.Close()
}

// stop closes the server and waits for it.
func (e *echoConn) stop() error {
	err := e.ln.Close()
	e.mu.Lock()
	if e.peer != nil {
		_ = e.peer.Close()
	}
	e.mu.Unlock()
	<-e.done
	return err
}

// Close closes the connection and stops its server.
func (e *echoConn) Close() error {
	err := e.Conn.Close()
	return errors.Join(err, e.stop())
}

// pairView says, for an exchange that failed, what each side of a pair
// sees of the other: the path, the last WireGuard handshake, and the
// bytes each way over each path.
func (l *Lab) pairView(a, b string) string {
	now := time.Now()
	side := func(from, to string) string {
		rn, err := l.node(from)
		if err != nil {
			return err.Error()
		}
		for _, st := range rn.status() {
			if st.Peer.Name != to {
				continue
			}
			hs := "no handshake"
			if !st.LastHandshake.IsZero() {
				hs = "handshake " + scenario.FormatDuration(now.Sub(st.LastHandshake).Round(time.Millisecond)) + " ago"
			}
			return fmt.Sprintf("%s sees %s %s, %s, sent %d B direct %d B relayed, received %d B direct %d B relayed",
				from, to, scenario.PathDetail(st), hs, st.TxDirect, st.TxRelay, st.RxDirect, st.RxRelay)
		}
		return from + " does not know " + to
	}
	return side(a, b) + "; " + side(b, a)
}
