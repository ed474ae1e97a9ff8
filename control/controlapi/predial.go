package controlapi

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/netx"
)

// A node opens two NATS connections to control as it starts: one to
// register, then its session with the credentials registration gave.
// NATS binds a connection's permissions at login, so the session cannot
// be the registration's connection; but its TCP connection (and the
// server's INFO, which a server sends on accepting it) need no
// credentials. A Predialer opens that connection while the node
// registers, so that the session starts at its login: two round trips
// fewer. The node starts it once its registration's connection is up
// (Join.Connected), two round trips (challenge, proof) before the
// registration ends: a node that cannot reach control dials nothing
// more.

// maxPredialAge is how long a connection dialed ahead may wait for its
// login. nats-server closes a client that has not logged in within its
// auth timeout (2 s unless configured); half of it leaves room.
const maxPredialAge = time.Second

// Predialer is a netx.Network whose first Dial to control's NATS server
// is served by a connection dialed ahead (see Start); every other Dial,
// and that one if the connection failed or waited too long, goes to the
// Network it wraps. Its methods are safe for concurrent use.
type Predialer struct {
	netx.Network
	addr string        // host:port to dial ahead; "" if none
	done chan struct{} // closed when the dial ended

	// The dial's outcome, set before done closes.
	conn net.Conn
	err  error
	at   time.Time // when conn was up

	mu      sync.Mutex         // guards the following fields
	started bool               // Start ran
	cancel  context.CancelFunc // ends the dial ahead
	taken   bool               // a Dial has conn (or waits for it)
	closed  bool               // Close ran
}

var _ netx.Network = (*Predialer)(nil)

// NewPredialer returns a Predialer of the NATS server of controlURL (a
// node's tls:// or nats:// control URL) on n. For an HTTP control URL, or
// one that does not parse, it never dials ahead.
func NewPredialer(n netx.Network, controlURL string) *Predialer {
	p := &Predialer{Network: n, done: make(chan struct{})}
	u, err := url.Parse(controlURL)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" {
		return p
	}
	p.addr = u.Host
	if u.Port() == "" {
		p.addr = net.JoinHostPort(u.Hostname(), "4222") // nats.go's default
	}
	return p
}

// Start dials ahead, once; not after Close.
func (p *Predialer) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addr == "" || p.started || p.closed {
		return
	}
	p.started = true
	var ctx context.Context
	ctx, p.cancel = context.WithTimeout(context.Background(), 10*time.Second)
	go func() {
		defer close(p.done)
		p.conn, p.err = p.Network.Dial(ctx, "tcp", p.addr)
		p.at = time.Now()
	}()
}

// Dial serves the first dial of control's server with the connection
// dialed ahead, if it is up and fresh; it dials anew otherwise.
func (p *Predialer) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if address != p.addr || !strings.HasPrefix(network, "tcp") || !p.take() {
		return p.Network.Dial(ctx, network, address)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.release()
		return nil, ctx.Err()
	}
	if p.err == nil && time.Since(p.at) <= maxPredialAge {
		return p.conn, nil
	}
	if p.conn != nil {
		p.conn.Close()
	}
	return p.Network.Dial(ctx, network, address)
}

// take claims the connection dialed ahead; false if a Dial or Close did.
func (p *Predialer) take() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started || p.taken || p.closed {
		return false
	}
	p.taken = true
	return true
}

// release gives the connection up after a Dial that took it gave up
// waiting: the next Dial may take it, or Close closes it.
func (p *Predialer) release() {
	p.mu.Lock()
	p.taken = false
	closed := p.closed
	p.mu.Unlock()
	if closed {
		p.closeConn()
	}
}

// closeConn waits for the dial ahead and closes what it brought.
func (p *Predialer) closeConn() {
	<-p.done
	if p.conn != nil {
		p.conn.Close()
	}
}

// Close stops the dial ahead and closes its connection if no Dial took
// it. Dials after Close go to the wrapped Network.
func (p *Predialer) Close() error {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	owns := p.started && !p.taken && !p.closed
	p.closed = true
	p.mu.Unlock()
	if owns {
		p.closeConn()
	}
	return nil
}
