package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/latticelab/lattice/key"
)

const (
	// maxRouteCache bounds a read loop's cache of destinations.
	maxRouteCache = 4096
	// maxSenders bounds the keys a client remembers as having sent to it,
	// which are told when it disconnects.
	maxSenders = 4096
	// goneInterval spaces PEER_GONE "not here" notifications about one
	// destination to one sender: a sender keeps sending to a peer that is
	// gone until it reacts, and needs telling once, not per packet.
	goneInterval = time.Second
)

// sconn is one authenticated client of the server.
type sconn struct {
	srv    *Server
	key    key.Public
	w      *wire
	sendq  *pktQueue // packets for this client
	lim    *limiter
	closed atomic.Bool // set when the connection is replaced or being torn down

	mu      sync.Mutex // guards the following
	senders map[key.Public]struct{}
	goneAt  map[key.Public]time.Time
}

// routeCache is one read loop's map from destination key to connection,
// so a packet costs no server-wide lock once its destination is known.
type routeCache map[key.Public]*sconn

func (s *Server) serveTCP(nc net.Conn, e *pending) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AuthTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	// A client sends its ClientHello the moment it is connected; a
	// connection that stays silent is not one. (handshakeTLS lifts the
	// deadline once the ClientHello is in.)
	_ = nc.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	hc := &tcpConn{Conn: nc}
	tc := tls.Server(hc, s.tcpTLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		stop()
		_ = nc.Close()
		reason := s.unlessClosing(authTimeout)
		if hc.noALPN {
			reason = authALPN
		}
		if s.pre.done(e) { // an evicted one was counted as such
			s.m.authFail(reason)
		}
		s.log.Debug("tls handshake failed", "remote", nc.RemoteAddr(), "reason", authNames[reason], "err", err)
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	s.handshake(newTCPWire(tc, frameRecv), nc.RemoteAddr(), e, stop)
}

func (s *Server) serveQUIC(qc *quic.Conn, e *pending) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AuthTimeout)
	defer cancel()
	fail := func() {
		_ = qc.CloseWithError(quic.ApplicationErrorCode(CloseNormal), "no hello")
	}
	stop := context.AfterFunc(ctx, fail)
	qs, err := s.controlStream(ctx, qc)
	if err != nil {
		stop()
		fail()
		if s.pre.done(e) {
			reason := s.unlessClosing(authTimeout)
			if closedByPeer(err) {
				reason = authAbandoned
			}
			s.m.authFail(reason)
		}
		s.log.Debug("no control stream", "remote", qc.RemoteAddr(), "err", cleanPeerError(err))
		return
	}
	_ = qs.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	s.handshake(newQUICWire(qc, qs, frameRecv, nil), qc.RemoteAddr(), e, stop)
}

// controlStream waits for the QUIC handshake of an early connection and
// then, at most HelloTimeout, for the client's control stream.
func (s *Server) controlStream(ctx context.Context, qc *quic.Conn) (*quic.Stream, error) {
	select {
	case <-qc.HandshakeComplete():
	case <-qc.Context().Done():
		return nil, fmt.Errorf("quic handshake: %w", context.Cause(qc.Context()))
	case <-ctx.Done():
		return nil, fmt.Errorf("quic handshake: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HelloTimeout)
	defer cancel()
	return qc.AcceptStream(ctx)
}

// handshake reads and checks the HELLO, registers the client, answers
// WELCOME and serves the connection. e is the connection's pre-auth
// entry; stop disarms the AuthTimeout close; if it already fired the
// connection is lost.
func (s *Server) handshake(w *wire, remote net.Addr, e *pending, stop func() bool) {
	inTable := true
	// leave takes the connection out of the pre-auth table and reports
	// whether it had been evicted (and is being closed) meanwhile.
	leave := func() (evicted bool) {
		if !inTable {
			return false
		}
		inTable = false
		return !s.pre.done(e)
	}
	defer leave()
	refuse := func(reason authReason, code CloseCode, msg string) {
		stop()
		if !leave() {
			s.m.authFail(reason)
		}
		s.log.Debug("client refused", "remote", remote, "transport", w.transport, "reason", authNames[reason], "msg", msg)
		w.fail(code, msg, nil, false)
		w.writeClose()
		w.closeConn()
	}

	f, err := readHello(w.br)
	switch {
	case errors.Is(err, ErrProtocol):
		refuse(authMalformed, CloseProtocol, err.Error())
		return
	case errors.Is(err, io.EOF):
		// Closed by the client before any HELLO: a race's loser
		// (client_race.go) or a client that gave up; not a timeout.
		refuse(authAbandoned, CloseProtocol, "closed before HELLO")
		return
	case err != nil:
		refuse(s.unlessClosing(authTimeout), CloseProtocol, "no HELLO")
		return
	}
	w.clearReadDeadline()
	if f.version != ProtocolVersion {
		refuse(authVersion, CloseVersion, fmt.Sprintf("version %d unsupported, want %d", f.version, ProtocolVersion))
		return
	}
	pub, err := VerifyToken(s.cfg.Secret, Token(f.data), s.cfg.Now())
	switch {
	case errors.Is(err, ErrTokenExpired):
		refuse(authExpired, CloseAuthExpired, "token expired")
		return
	case errors.Is(err, ErrTokenInvalid):
		refuse(authInvalid, CloseAuthInvalid, "token invalid")
		return
	case err != nil:
		refuse(authMalformed, CloseAuthInvalid, "token malformed")
		return
	case pub != f.key:
		refuse(authWrongKey, CloseAuthWrongKey, "token issued for another key")
		return
	}
	if leave() {
		stop()
		w.closeConn()
		return
	}

	c := &sconn{
		srv:   s,
		key:   pub,
		w:     w,
		sendq: newPktQueue(s.cfg.QueueLen),
		lim:   newLimiter(s.cfg.PacketRate, max(s.cfg.PacketRate/10, s.cfg.QueueLen)),
	}
	w.onSent = func(pkt []byte, datagram bool) { s.m.sent(len(pkt), datagram) }
	w.onFall = s.m.fallback
	if code, msg, ok := s.register(c); !ok {
		reason := authFull
		if code == CloseNormal {
			reason = authShutdown
		}
		refuse(reason, code, msg)
		return
	}
	welcome := frame{typ: frameWelcome, version: ProtocolVersion, keepalive: uint32(s.cfg.KeepAlive.Milliseconds())}
	err = w.writeFrame(&welcome)
	if err == nil {
		err = w.writeFeatures()
	}
	if err == nil {
		err = w.bw.Flush()
	}
	if !stop() && err == nil {
		err = errors.New("authentication timed out")
	}
	if err != nil {
		w.fail(CloseNormal, "", err, false)
		w.closeConn()
		s.unregister(c)
		return
	}
	s.log.Debug("client connected", "key", pub.ShortString(), "remote", remote, "transport", w.transport)
	c.serve()
}

// unlessClosing returns reason, or authShutdown once Close has begun: a
// handshake that Close cut short timed out through no fault of the client.
func (s *Server) unlessClosing(reason authReason) authReason {
	if s.ctx.Err() != nil {
		return authShutdown
	}
	return reason
}

// readHello reads a connection's first frame, which must be a HELLO. Any
// other type is refused on its header: its body (up to MaxFrameBody
// bytes, where a HELLO's is at most 289) is neither waited for nor
// buffered for an unauthenticated client.
func readHello(br *bufio.Reader) (frame, error) {
	typ, err := br.Peek(1)
	if err != nil {
		return frame{}, err // no byte at all: io.EOF is a clean end
	}
	if t := frameType(typ[0]); t != frameHello {
		return frame{}, fmt.Errorf("%w: %s before HELLO", ErrProtocol, t)
	}
	return readFrame(br)
}

// serve runs the connection until it fails: the writer and (QUIC) the
// datagram reader on their own goroutines, the control stream here.
func (c *sconn) serve() {
	s := c.srv
	stopShutdown := context.AfterFunc(s.ctx, func() {
		c.w.fail(CloseNormal, "relay shutting down", nil, false)
	})
	defer stopShutdown()
	var wg sync.WaitGroup
	wg.Go(func() { c.w.writeLoop(c.sendq) })
	wg.Go(func() { c.w.watchdog(s.cfg.KeepAlive, true) })
	if c.w.qc != nil {
		rc := make(routeCache)
		wg.Go(func() {
			c.w.readDatagrams(func(dst key.Public, pkt []byte) {
				s.m.datagramsIn.Add(1)
				c.forward(rc, dst, pkt, true)
			}, s.m.drop)
		})
	}
	c.readLoop()
	wg.Wait()
	c.w.closeConn()
	s.unregister(c)
	s.log.Debug("client disconnected", "key", c.key.ShortString(), "transport", c.w.transport, "err", c.w.closeErr())
}

func (c *sconn) readLoop() {
	rc := make(routeCache)
	for {
		f, err := readFrame(c.w.br)
		if err != nil {
			c.readFailed(err)
			return
		}
		c.w.markSeen()
		switch f.typ {
		case frameSend:
			c.forward(rc, f.key, f.data, false)
		case framePing:
			c.w.queueCtrl(frame{typ: framePong, ping: f.ping})
		case framePong:
		case frameBind, frameBindAck:
			if err := c.w.handleIDFrame(&f); err != nil {
				c.protocolError(err)
				return
			}
		case frameFeatures:
			c.w.handleFeatures(&f)
		case frameClose:
			if err := c.w.peerClosed(&f); err != nil {
				c.protocolError(err)
			}
			return
		default:
			if f.typ >= firstUnknownFrame {
				continue // reserved for optional extensions
			}
			c.protocolError(fmt.Errorf("%w: unexpected %s from a client", ErrProtocol, f.typ))
			return
		}
	}
}

func (c *sconn) readFailed(err error) {
	if c.w.readError(err) {
		c.srv.m.protocolError()
	}
}

func (c *sconn) protocolError(err error) {
	c.srv.m.protocolError()
	c.w.fail(CloseProtocol, err.Error(), err, false)
}

// forward queues pkt for dst. owned means pkt is the caller's to give
// away (a datagram quic-go allocated); otherwise it is copied.
func (c *sconn) forward(rc routeCache, dst key.Public, pkt []byte, owned bool) {
	if c.w.failed() {
		// The relay closed the connection (replaced, idle, shutting
		// down): what its readers still had buffered is left unread.
		return
	}
	s := c.srv
	s.m.received(len(pkt))
	if !c.lim.allow(time.Now()) {
		s.m.drop(dropRateLimited)
		return
	}
	d := rc[dst]
	if d == nil || d.closed.Load() {
		if d = s.lookup(dst); d == nil || d.closed.Load() {
			delete(rc, dst)
			s.m.drop(dropNoPeer)
			c.notifyGoneLimited(dst)
			return
		}
		if len(rc) >= maxRouteCache {
			clear(rc)
		}
		rc[dst] = d
		d.addSender(c.key)
	}
	var p outPacket
	if owned {
		p = outPacket{key: c.key, pkt: pkt}
	} else {
		p = copyPacket(c.key, pkt)
	}
	if !d.sendq.push(p) {
		p.release()
		s.m.drop(dropQueueFull)
	}
}

func (c *sconn) addSender(k key.Public) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.senders == nil {
		c.senders = make(map[key.Public]struct{})
	}
	if len(c.senders) < maxSenders {
		c.senders[k] = struct{}{}
	}
}

func (c *sconn) takeSenders() []key.Public {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]key.Public, 0, len(c.senders))
	for k := range c.senders {
		out = append(out, k)
	}
	c.senders = nil
	return out
}

// notifyGoneLimited tells c that dst is not here, at most once per
// goneInterval per destination.
func (c *sconn) notifyGoneLimited(dst key.Public) {
	now := time.Now()
	c.mu.Lock()
	if t, ok := c.goneAt[dst]; ok && now.Sub(t) < goneInterval {
		c.mu.Unlock()
		return
	}
	if c.goneAt == nil || len(c.goneAt) >= maxRouteCache {
		c.goneAt = make(map[key.Public]time.Time)
	}
	c.goneAt[dst] = now
	c.mu.Unlock()
	c.notifyGone(dst, GoneNotHere)
}

func (c *sconn) notifyGone(peer key.Public, reason GoneReason) {
	if c.w.queueCtrl(frame{typ: framePeerGone, key: peer, reason: uint8(reason)}) {
		c.srv.m.peerGoneSent()
	}
}

// closedByPeer reports whether err is the QUIC connection's end by the
// client's own close (an application close from its side).
func closedByPeer(err error) bool {
	var ae *quic.ApplicationError
	var te *quic.TransportError
	// A client that closes before the server has confirmed the
	// handshake sends its close as a transport error (RFC 9000 §10.2.3:
	// APPLICATION_ERROR in a Handshake packet), not an application one.
	return errors.As(err, &ae) && ae.Remote || errors.As(err, &te) && te.Remote
}
