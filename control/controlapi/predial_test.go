package controlapi

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// countingNet is netx.OS counting its dials and the connections it made
// that were closed.
type countingNet struct {
	netx.Network
	dials  atomic.Int32
	mu     sync.Mutex
	conns  []*closeCounted
	delay  time.Duration // before each dial
	failed error         // if set, every dial fails with it
}

type closeCounted struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeCounted) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (n *countingNet) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	n.dials.Add(1)
	if n.delay > 0 {
		select {
		case <-time.After(n.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if n.failed != nil {
		return nil, n.failed
	}
	c, err := n.Network.Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	cc := &closeCounted{Conn: c}
	n.mu.Lock()
	n.conns = append(n.conns, cc)
	n.mu.Unlock()
	return cc, nil
}

// listen accepts TCP connections on loopback and keeps them open.
func listen(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String()
}

func TestPredialer(t *testing.T) {
	addr := listen(t)
	for _, tt := range []struct {
		name string
		url  string
		// dial is the address the session dials.
		dial string
		// age is how long the connection waits before the dial.
		age time.Duration
		// notStarted: the registration never connected.
		notStarted bool
		wantDials  int32 // on the wrapped network, ahead and at the dial
		wantServed bool  // the dial got the connection dialed ahead
	}{
		{name: "served", url: "nats://" + addr, dial: addr, wantDials: 1, wantServed: true},
		{name: "tls served", url: "tls://" + addr + "?sha256=00", dial: addr, wantDials: 1, wantServed: true},
		{name: "too old for the server's auth timeout", url: "nats://" + addr, dial: addr, age: maxPredialAge + 100*time.Millisecond, wantDials: 2},
		{name: "another server", url: "nats://" + addr, dial: "127.0.0.1:1", wantDials: 2},
		{name: "HTTP control URL: nothing ahead", url: "https://" + addr, dial: addr, wantDials: 1},
		{name: "not started: nothing ahead", url: "nats://" + addr, dial: addr, notStarted: true, wantDials: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &countingNet{Network: netx.OS}
			p := NewPredialer(n, tt.url)
			if !tt.notStarted {
				p.Start()
			}
			if tt.age > 0 {
				<-p.done
				time.Sleep(tt.age) // the connection's age is the point
			}
			ctx := ctxT(t)
			c, err := p.Dial(ctx, "tcp", tt.dial)
			if tt.dial == "127.0.0.1:1" {
				require.Error(t, err) // nothing listens there
			} else {
				require.NoError(t, err)
				defer c.Close()
			}
			require.NoError(t, p.Close())
			assert.Equal(t, tt.wantDials, n.dials.Load(), "dials")
			n.mu.Lock()
			defer n.mu.Unlock()
			if tt.wantServed {
				require.Len(t, n.conns, 1)
				assert.Same(t, n.conns[0], c, "the connection dialed ahead")
				assert.False(t, n.conns[0].closed.Load(), "handed out, not closed")
				return
			}
			for _, cc := range n.conns {
				if cc != c {
					assert.True(t, cc.closed.Load(), "a connection no dial took is closed")
				}
			}
		})
	}
}

func TestPredialerSecondDialDialsAnew(t *testing.T) {
	addr := listen(t)
	n := &countingNet{Network: netx.OS}
	p := NewPredialer(n, "nats://"+addr)
	p.Start()
	defer p.Close()
	c1, err := p.Dial(ctxT(t), "tcp", addr)
	require.NoError(t, err)
	defer c1.Close()
	c2, err := p.Dial(ctxT(t), "tcp", addr) // a reconnect
	require.NoError(t, err)
	defer c2.Close()
	assert.NotSame(t, c1, c2)
	assert.Equal(t, int32(2), n.dials.Load())
}

func TestPredialerFailedDialDialsAnew(t *testing.T) {
	addr := listen(t)
	n := &countingNet{Network: netx.OS, failed: assert.AnError}
	p := NewPredialer(n, "nats://"+addr)
	p.Start()
	defer p.Close()
	_, err := p.Dial(ctxT(t), "tcp", addr)
	require.ErrorIs(t, err, assert.AnError, "the fresh dial's error")
	assert.Equal(t, int32(2), n.dials.Load(), "ahead, then anew")
}

// A dial that gives up while the dial ahead is still under way leaves
// the connection to the next dial.
func TestPredialerDialCanceled(t *testing.T) {
	addr := listen(t)
	n := &countingNet{Network: netx.OS, delay: 100 * time.Millisecond}
	p := NewPredialer(n, "nats://"+addr)
	p.Start()
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Dial(ctx, "tcp", addr)
	require.ErrorIs(t, err, context.Canceled)
	c, err := p.Dial(ctxT(t), "tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, int32(1), n.dials.Load(), "the second dial got the connection dialed ahead")
}

func TestPredialAddress(t *testing.T) {
	for url, want := range map[string]string{
		"nats://127.0.0.1":            "127.0.0.1:4222", // nats.go's default port
		"tls://control.example:7422":  "control.example:7422",
		"nats://[::1]":                "[::1]:4222",
		"https://control.example:443": "",
		"nats://":                     "",
	} {
		n := &countingNet{Network: netx.OS, failed: assert.AnError}
		p := NewPredialer(n, url)
		assert.Equal(t, want, p.addr, url)
		p.Start()
		require.NoError(t, p.Close())
		p.Start() // after Close: nothing
		if want == "" {
			assert.Zero(t, n.dials.Load(), "%s: nothing to dial ahead", url)
		}
	}
}
