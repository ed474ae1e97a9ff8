package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// NewSOCKS5 returns a SOCKS5 proxy (RFC 1928) that serves CONNECT and, if
// cfg.ListenPacket is set, UDP ASSOCIATE; see the package documentation
// for what else is and is not implemented.
func NewSOCKS5(cfg Config) (*Server, error) {
	return newServer(cfg, "socks5")
}

// Protocol constants, RFC 1928 §3-4 and RFC 1929 §2.
const (
	socksVersion byte = 0x05
	authVersion  byte = 0x01 // of the username/password subnegotiation

	methodNoAuth       byte = 0x00
	methodUserPass     byte = 0x02
	methodNoAcceptable byte = 0xff

	authSuccess byte = 0x00
	authFailure byte = 0x01

	cmdConnect      byte = 0x01
	cmdBind         byte = 0x02
	cmdUDPAssociate byte = 0x03
)

// noAddr is the BND address of failure replies.
var noAddr = addr{ip: netip.IPv4Unspecified()}

// serveSOCKS runs one client connection: negotiation and request under the
// handshake deadline, then the command until either side ends it.
func (s *Server) serveSOCKS(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if err := s.negotiate(c); err != nil {
		s.log.Debug("socks5 negotiation failed", "client", c.RemoteAddr(), "err", err)
		return
	}
	cmd, dst, err := readRequest(c)
	switch {
	case errors.Is(err, errVersion):
		s.fail(c, repGeneralFailure)
	case errors.Is(err, errATYP):
		s.fail(c, repATYPNotSupported)
	case err != nil && !errors.Is(err, errBadHost):
		s.log.Debug("socks5 request unreadable", "client", c.RemoteAddr(), "err", err)
	case cmd == cmdConnect:
		s.connect(c, dst, err)
	case cmd == cmdUDPAssociate:
		s.associate(c, dst, err)
	default: // BIND and unknown commands
		s.fail(c, repCommandNotSupported)
	}
}

// negotiate reads the greeting, selects the one method the configuration
// allows and, for username/password, authenticates (RFC 1929).
func (s *Server) negotiate(c net.Conn) error {
	var buf [2 + 255]byte
	if _, err := io.ReadFull(c, buf[:2]); err != nil {
		return fmt.Errorf("proxy: read greeting: %w", err)
	}
	if buf[0] != socksVersion {
		// Nothing to reply: a client of another version cannot parse a
		// SOCKS5 answer. Closing is what RFC 1928 implies.
		return fmt.Errorf("%w: version 0x%02x", errVersion, buf[0])
	}
	methods := buf[2 : 2+int(buf[1])]
	if _, err := io.ReadFull(c, methods); err != nil {
		return fmt.Errorf("proxy: read methods: %w", err)
	}
	want := methodNoAuth
	if s.auth != nil {
		want = methodUserPass
	}
	if !bytes.Contains(methods, []byte{want}) {
		_, _ = c.Write([]byte{socksVersion, methodNoAcceptable})
		if s.auth != nil {
			s.loginFailed(c.RemoteAddr(), "", ReasonNoCredentials)
		}
		return fmt.Errorf("%w among %x", errMethod, methods)
	}
	if _, err := c.Write([]byte{socksVersion, want}); err != nil {
		return fmt.Errorf("proxy: write method: %w", err)
	}
	if want == methodUserPass {
		return s.authenticate(c)
	}
	return nil
}

// authenticate runs the RFC 1929 subnegotiation. Both fields are at most
// 255 bytes by format, so the reads are bounded without a check.
func (s *Server) authenticate(c net.Conn) error {
	var hdr [2]byte
	var user, pass [255]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("proxy: read auth: %w", err)
	}
	if hdr[0] != authVersion {
		_, _ = c.Write([]byte{authVersion, authFailure})
		s.loginFailed(c.RemoteAddr(), "", ReasonMalformed)
		return fmt.Errorf("%w: subnegotiation version 0x%02x", errAuth, hdr[0])
	}
	u := user[:hdr[1]]
	if _, err := io.ReadFull(c, u); err != nil {
		return fmt.Errorf("proxy: read username: %w", err)
	}
	if _, err := io.ReadFull(c, hdr[:1]); err != nil {
		return fmt.Errorf("proxy: read password length: %w", err)
	}
	p := pass[:hdr[0]]
	if _, err := io.ReadFull(c, p); err != nil {
		return fmt.Errorf("proxy: read password: %w", err)
	}
	if !s.auth.match(u, p) {
		_, _ = c.Write([]byte{authVersion, authFailure})
		s.loginFailed(c.RemoteAddr(), string(u), ReasonBadCredentials)
		return errAuth
	}
	if _, err := c.Write([]byte{authVersion, authSuccess}); err != nil {
		return fmt.Errorf("proxy: write auth status: %w", err)
	}
	return nil
}

// readRequest reads VER CMD RSV ATYP DST.ADDR DST.PORT (RFC 1928 §4). An
// error wrapping errBadHost comes with the command (the request was read
// whole); RSV is not checked, as most servers do not.
func readRequest(r io.Reader) (cmd byte, dst addr, err error) {
	var buf [4 + 1 + 255 + 2]byte
	if _, err := io.ReadFull(r, buf[:4]); err != nil {
		return 0, addr{}, fmt.Errorf("proxy: read request: %w", err)
	}
	if buf[0] != socksVersion {
		return 0, addr{}, fmt.Errorf("%w: request version 0x%02x", errVersion, buf[0])
	}
	cmd, atyp := buf[1], buf[3]
	have := 4
	if atyp == atypDomain {
		if _, err := io.ReadFull(r, buf[4:5]); err != nil {
			return cmd, addr{}, fmt.Errorf("proxy: read request address: %w", err)
		}
		have = 5
	}
	n, err := addrLen(atyp, buf[4])
	if err != nil {
		return cmd, addr{}, err
	}
	if _, err := io.ReadFull(r, buf[have:4+n]); err != nil {
		return cmd, addr{}, fmt.Errorf("proxy: read request address: %w", err)
	}
	dst, err = parseAddr(atyp, buf[4:4+n])
	return cmd, dst, err
}

// reply writes VER REP RSV ATYP BND.ADDR BND.PORT. The write gets its own
// deadline: a slow dial may have used up the handshake's.
func (s *Server) reply(c net.Conn, rep byte, bnd addr) bool {
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	b := appendAddr([]byte{socksVersion, rep, 0}, bnd)
	if _, err := c.Write(b); err != nil {
		s.log.Debug("socks5 reply failed", "client", c.RemoteAddr(), "err", err)
		return false
	}
	return true
}

// fail sends a failure reply and lingers briefly before the caller
// closes c: closing a socket with unread input (the rest of a request
// with an unknown address type, data the client sent optimistically)
// sends a reset, which can destroy the reply before the client reads it.
func (s *Server) fail(c net.Conn, rep byte) {
	if !s.reply(c, rep, noAddr) {
		return
	}
	cw, ok := c.(closeWriter)
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(min(lingerTimeout, s.cfg.HandshakeTimeout)))
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// Bounds of fail's lingering.
const (
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 16 << 10
)

// connect serves CONNECT: dial, reply with the upstream socket's local
// address as BND (RFC 1928 §6), splice. badHost is the parse error of a
// destination name the proxy refuses without dialing.
func (s *Server) connect(c net.Conn, dst addr, badHost error) {
	if badHost != nil {
		s.report(c.RemoteAddr(), "tcp", dst.String(), badHost)
		s.fail(c, replyCode(badHost))
		return
	}
	up, err := s.dial(s.ctx, c.RemoteAddr(), "tcp", dst.String())
	if err != nil {
		s.fail(c, replyCode(err))
		return
	}
	if !s.track(up) {
		_ = up.Close()
		return
	}
	defer s.untrack(up)
	if !s.reply(c, repSucceeded, addrOf(up.LocalAddr())) {
		_ = up.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	Splice(c, up)
}
