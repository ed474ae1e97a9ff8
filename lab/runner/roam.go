package runner

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/netx"
)

var timeZero time.Time

var (
	_ netx.Network   = (*roamingNet)(nil)
	_ net.PacketConn = (*roamingConn)(nil)
)

// roamingNet is a node's network that can move from one fabric host to
// another, as a laptop's does when it leaves home for a café: its UDP
// sockets keep their port and carry on from the new host's address (so
// the peer sees a new source, behind a new NAT), and its TCP connections
// break, as they would.
type roamingNet struct {
	mu      sync.Mutex // guards the following fields
	cur     *fabric.Host
	network string
	pcs     map[*roamingConn]struct{}
	conns   map[net.Conn]struct{}
}

func newRoamingNet(h *fabric.Host, network string) *roamingNet {
	return &roamingNet{cur: h, network: network, pcs: map[*roamingConn]struct{}{}, conns: map[net.Conn]struct{}{}}
}

func (r *roamingNet) host() *fabric.Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Dial implements netx.Network.
func (r *roamingNet) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := r.host().Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	return &trackedConn{Conn: c, r: r}, nil
}

// Listen implements netx.Network; listeners stay on the first host.
func (r *roamingNet) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	return r.host().Listen(ctx, network, address)
}

// ListenPacket implements netx.Network.
func (r *roamingNet) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	h := r.host()
	pc, err := h.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	rc := &roamingConn{r: r, network: network, pc: pc}
	r.mu.Lock()
	r.pcs[rc] = struct{}{}
	r.mu.Unlock()
	return rc, nil
}

// Interfaces implements netx.Network: the current host's.
func (r *roamingNet) Interfaces() ([]netx.Interface, error) { return r.host().Interfaces() }

// Move puts the node on host h: every UDP socket is reopened there on its
// port, every TCP connection is cut.
func (r *roamingNet) Move(ctx context.Context, h *fabric.Host, network string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for rc := range r.pcs {
		errs = append(errs, rc.moveTo(ctx, h))
	}
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
	r.cur, r.network = h, network
	return errors.Join(errs...)
}

// Close closes what is still open. The node closes its own sockets first.
func (r *roamingNet) Close() error {
	r.mu.Lock()
	var pcs []*roamingConn
	for rc := range r.pcs {
		pcs = append(pcs, rc)
	}
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	for _, rc := range pcs {
		rc.Close()
	}
	return nil
}

type trackedConn struct {
	net.Conn
	r *roamingNet
}

func (c *trackedConn) Close() error {
	c.r.mu.Lock()
	delete(c.r.conns, c.Conn)
	c.r.mu.Unlock()
	return c.Conn.Close()
}

// roamingConn is a UDP socket that survives a move.
type roamingConn struct {
	r       *roamingNet
	network string

	mu      sync.Mutex // guards the following fields
	pc      net.PacketConn
	closed  bool
	readDL  time.Time
	writeDL time.Time
}

func (c *roamingConn) current() net.PacketConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pc
}

// moveTo reopens the socket on h at the same port; a ReadFrom blocked on
// the old socket returns and carries on on the new one.
func (c *roamingConn) moveTo(ctx context.Context, h *fabric.Host) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	port := c.pc.LocalAddr().(*net.UDPAddr).Port
	pc, err := h.ListenPacket(ctx, c.network, net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	_ = pc.SetReadDeadline(c.readDL)
	_ = pc.SetWriteDeadline(c.writeDL)
	old := c.pc
	c.pc = pc
	return old.Close()
}

func (c *roamingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		pc := c.current()
		n, addr, err := pc.ReadFrom(b)
		if err == nil {
			return n, addr, nil
		}
		c.mu.Lock()
		moved := c.pc != pc && !c.closed
		c.mu.Unlock()
		if !moved {
			return n, addr, err
		}
	}
}

func (c *roamingConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	return c.current().WriteTo(b, addr)
}

func (c *roamingConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	pc := c.pc
	c.mu.Unlock()
	c.r.mu.Lock()
	delete(c.r.pcs, c)
	c.r.mu.Unlock()
	return pc.Close()
}

func (c *roamingConn) LocalAddr() net.Addr { return c.current().LocalAddr() }

func (c *roamingConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDL, c.writeDL = t, t
	pc := c.pc
	c.mu.Unlock()
	return pc.SetDeadline(t)
}

func (c *roamingConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDL = t
	pc := c.pc
	c.mu.Unlock()
	return pc.SetReadDeadline(t)
}

func (c *roamingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDL = t
	pc := c.pc
	c.mu.Unlock()
	return pc.SetWriteDeadline(t)
}
