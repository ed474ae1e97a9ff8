package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/unixhttp"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
)

// A --userspace node's overlay is its in-process netstack: nothing on the
// host routes to it, so `lattice ping` asks the node, over its status
// socket (owner only), to send each echo request from the netstack.

// overlayPing sends one ICMP echo request over the node's own overlay and
// waits for the reply.
type overlayPing func(ctx context.Context, dst netip.Addr) (time.Duration, error)

// netstackPing is a --userspace node's ping, through the netstack its
// provisioner brought up; nil for any other provisioner.
func netstackPing(p node.Provisioner) overlayPing {
	sp, ok := p.(*netstack.SandboxProvisioner)
	if !ok {
		return nil
	}
	return func(ctx context.Context, dst netip.Addr) (time.Duration, error) {
		s := sp.Stack()
		if s == nil {
			return 0, errors.New("the overlay is not up yet")
		}
		return s.Ping(ctx, dst)
	}
}

// maxSocketPingTimeout bounds one POST /ping's wait.
const maxSocketPingTimeout = 30 * time.Second

// pingReply is POST /ping's answer.
type pingReply struct {
	RTTNanos int64  `json:"rtt_ns,omitempty"`
	Error    string `json:"error,omitempty"`
}

// pingHandler is POST /ping, form dst (an overlay address) and timeout (a
// Go duration, at most maxSocketPingTimeout): one echo from the node's
// netstack. A bad request is 400; a lost reply is 200 with error set.
func pingHandler(n *node.Node, ping overlayPing) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dst, err := netip.ParseAddr(r.FormValue("dst"))
		if err != nil {
			http.Error(w, fmt.Sprintf("ping: dst %q: %v", r.FormValue("dst"), err), http.StatusBadRequest)
			return
		}
		if overlay := n.Address().Masked(); !overlay.Contains(dst) {
			http.Error(w, fmt.Sprintf("ping: dst %v is not in the overlay %v", dst, overlay), http.StatusBadRequest)
			return
		}
		timeout, err := time.ParseDuration(r.FormValue("timeout"))
		if err != nil || timeout <= 0 || timeout > maxSocketPingTimeout {
			http.Error(w, fmt.Sprintf("ping: timeout %q: want a duration in (0, %v]", r.FormValue("timeout"), maxSocketPingTimeout), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		var rep pingReply
		rtt, err := ping(ctx, dst)
		switch {
		case err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)):
			rep.Error = "no reply (timeout)"
		case err != nil:
			rep.Error = err.Error()
		default:
			rep.RTTNanos = max(1, rtt.Nanoseconds())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// socketPinger is the echoer for a --userspace node: each echo is a POST
// /ping on its status socket.
type socketPinger struct{ c *http.Client }

func newSocketPinger(socket string) socketPinger { return socketPinger{unixhttp.Client(socket)} }

func (p socketPinger) Echo(ctx context.Context, dst netip.Addr, _ int) (time.Duration, error) {
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Millisecond, min(time.Until(dl), maxSocketPingTimeout))
	}
	form := url.Values{"dst": {dst.String()}, "timeout": {timeout.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lattice/ping", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, errors.New("no reply (timeout)")
		}
		return 0, fmt.Errorf("ping through the node's socket: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("ping through the node's socket: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("ping through the node's socket: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var rep pingReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return 0, fmt.Errorf("ping through the node's socket: %w", err)
	}
	if rep.Error != "" {
		return 0, errors.New(rep.Error)
	}
	return time.Duration(rep.RTTNanos), nil
}
