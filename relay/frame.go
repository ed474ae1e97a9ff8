package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/latticelab/lattice/key"
)

// Wire constants; docs/LRP.md is the specification they implement.
const (
	// ProtocolVersion is the LRP version this package speaks, carried in
	// the ALPN and in HELLO/WELCOME.
	ProtocolVersion = 1
	// ALPN is the TLS application protocol of LRP version 1, on QUIC and
	// on TCP alike.
	ALPN = "lrp/1"

	// MaxFrameBody bounds a frame body: its length field is 16 bits.
	MaxFrameBody = 0xFFFF
	// MaxPacketSize is the largest packet LRP relays: a SEND or RECV body
	// is the 32-byte key followed by the packet.
	MaxPacketSize = MaxFrameBody - key.Size
	// MaxTokenSize bounds the token in a HELLO frame.
	MaxTokenSize = 256
	// MaxCloseMessage bounds the explanation in a CLOSE frame (and in a
	// QUIC CONNECTION_CLOSE reason).
	MaxCloseMessage = 256

	frameHeaderLen    = 3 // type u8, body length u16
	datagramHeaderLen = 5 // type u8, peer id u32
)

// frameType is the first byte of a frame.
type frameType uint8

const (
	frameHello    frameType = 0x01 // client → server: version, key, token
	frameWelcome  frameType = 0x02 // server → client: version, keepalive
	frameSend     frameType = 0x03 // client → server: destination key, packet
	frameRecv     frameType = 0x04 // server → client: source key, packet
	framePing     frameType = 0x05 // either way: 8 opaque bytes
	framePong     frameType = 0x06 // either way: the ping's 8 bytes
	framePeerGone frameType = 0x07 // server → client: key, reason
	frameBind     frameType = 0x08 // either way, QUIC only: id, key
	frameBindAck  frameType = 0x09 // either way, QUIC only: id
	frameClose    frameType = 0x0a // either way: close code, message

	// Types from 0x0b up are unknown to version 1: receivers skip them
	// (their length is bounded like any other), so later revisions can add
	// optional frames without a version bump. 0x00 is never valid.
	firstUnknownFrame frameType = 0x0b

	// frameFeatures (optional, QUIC only, either way: a flags byte) says
	// which optional datagram forms the sender reads. Version 1 receivers
	// that do not know it skip it, so nobody sends those forms to them.
	frameFeatures frameType = 0x0b

	// datagramPacket is the type byte of a QUIC datagram carrying a packet.
	datagramPacket = 0x10
	// datagramPadded is a packet datagram followed by padding and a byte
	// counting the padding, sent only to an end that announced
	// featurePaddedDatagrams (see paddedLen).
	datagramPadded = 0x11
)

// featurePaddedDatagrams is the FEATURES flag of an end that reads
// datagramPadded.
const featurePaddedDatagrams = 0x01

// maxDatagramPad bounds the padding added to a datagram: packets up to
// this many bytes short of MaxDatagramPacket are padded to fill a QUIC
// packet, so quic-go batches them (it continues a GSO batch only after a
// full-size packet). gVisor's full TCP segments under the QUIC-relay MSS
// are 16 bytes short: it sizes them for the largest options it might send
// (28 bytes), not the 12 it does.
const maxDatagramPad = 32

var frameNames = [...]string{"invalid", "HELLO", "WELCOME", "SEND", "RECV", "PING", "PONG", "PEER_GONE", "BIND", "BIND_ACK", "CLOSE", "FEATURES"}

func (t frameType) String() string {
	if int(t) < len(frameNames) {
		return frameNames[t]
	}
	return fmt.Sprintf("frame-0x%02x", uint8(t))
}

// GoneReason says why the relay could not deliver to a peer.
type GoneReason uint8

const (
	// GoneNotHere: the destination is not connected to this relay.
	GoneNotHere GoneReason = 1
	// GoneDisconnected: the destination was connected and has left.
	GoneDisconnected GoneReason = 2
)

func (r GoneReason) String() string {
	switch r {
	case GoneNotHere:
		return "not-here"
	case GoneDisconnected:
		return "disconnected"
	}
	return fmt.Sprintf("gone-reason-%d", uint8(r))
}

// frame is one decoded frame. Which fields are meaningful depends on typ;
// data aliases the buffer the frame was decoded from.
type frame struct {
	typ       frameType
	version   uint8      // HELLO, WELCOME
	key       key.Public // HELLO (the client's), SEND (to), RECV (from), PEER_GONE, BIND
	id        uint32     // BIND, BIND_ACK; never 0
	keepalive uint32     // WELCOME: the server's ping interval in milliseconds
	ping      [8]byte    // PING, PONG
	reason    uint8      // PEER_GONE: GoneReason; CLOSE: CloseCode
	data      []byte     // HELLO: token; SEND, RECV: packet; CLOSE: message; unknown: body
}

// errIncomplete means the buffer ends inside a frame: more bytes are
// needed, nothing is wrong yet.
var errIncomplete = errors.New("relay: incomplete frame")

// bodyBounds returns the smallest and largest body a frame of type t may
// have. Every length is checked against these before a byte of the body is
// read, so no peer can make us buffer more than a frame type allows.
func bodyBounds(t frameType) (lo, hi int) {
	switch t {
	case frameHello:
		return 1 + key.Size + 1, 1 + key.Size + MaxTokenSize
	case frameWelcome:
		return 5, 5
	case frameSend, frameRecv:
		return key.Size + 1, MaxFrameBody
	case framePing, framePong:
		return 8, 8
	case framePeerGone:
		return key.Size + 1, key.Size + 1
	case frameBind:
		return 4 + key.Size, 4 + key.Size
	case frameBindAck:
		return 4, 4
	case frameClose:
		return 1, 1 + MaxCloseMessage
	case 0:
		return -1, -1
	}
	return 0, MaxFrameBody
}

func checkBodyLen(t frameType, n int) error {
	lo, hi := bodyBounds(t)
	if lo < 0 {
		return fmt.Errorf("%w: frame type 0x00", ErrProtocol)
	}
	if n < lo || n > hi {
		if lo == hi {
			return fmt.Errorf("%w: %s body is %d bytes, want %d", ErrProtocol, t, n, lo)
		}
		return fmt.Errorf("%w: %s body is %d bytes, want %d..%d", ErrProtocol, t, n, lo, hi)
	}
	return nil
}

// decodeBody parses the body of a frame whose length checkBodyLen accepted.
func decodeBody(t frameType, b []byte) (frame, error) {
	f := frame{typ: t}
	switch t {
	case frameHello:
		f.version = b[0]
		copy(f.key[:], b[1:])
		f.data = b[1+key.Size:]
	case frameWelcome:
		f.version = b[0]
		f.keepalive = binary.BigEndian.Uint32(b[1:])
	case frameSend, frameRecv:
		copy(f.key[:], b)
		f.data = b[key.Size:]
	case framePing, framePong:
		copy(f.ping[:], b)
	case framePeerGone:
		copy(f.key[:], b)
		f.reason = b[key.Size]
	case frameBind, frameBindAck:
		f.id = binary.BigEndian.Uint32(b)
		if f.id == 0 {
			return frame{}, fmt.Errorf("%w: %s with peer id 0", ErrProtocol, t)
		}
		if t == frameBind {
			copy(f.key[:], b[4:])
		}
	case frameClose:
		f.reason = b[0]
		f.data = b[1:]
	default:
		f.data = b
	}
	return f, nil
}

// decodeFrame decodes the frame at the start of b and returns it with the
// number of bytes it occupies. It returns errIncomplete when b ends inside
// the frame and an error wrapping ErrProtocol when the frame is invalid;
// it never reads past b and never panics.
func decodeFrame(b []byte) (frame, int, error) {
	if len(b) < frameHeaderLen {
		return frame{}, 0, errIncomplete
	}
	t := frameType(b[0])
	n := int(binary.BigEndian.Uint16(b[1:]))
	if err := checkBodyLen(t, n); err != nil {
		return frame{}, 0, err
	}
	if len(b) < frameHeaderLen+n {
		return frame{}, 0, errIncomplete
	}
	f, err := decodeBody(t, b[frameHeaderLen:frameHeaderLen+n])
	if err != nil {
		return frame{}, 0, err
	}
	return f, frameHeaderLen + n, nil
}

// readFrame reads one frame from br, whose buffer should hold at least
// maxBufferedFrame bytes. The frame's data aliases br's buffer for bodies
// that fit it (valid until the next read) and a fresh slice otherwise. A
// stream that ends cleanly between frames returns io.EOF; one that ends
// inside a frame returns io.ErrUnexpectedEOF.
func readFrame(br *bufio.Reader) (frame, error) {
	hdr, err := br.Peek(frameHeaderLen)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	t := frameType(hdr[0])
	n := int(binary.BigEndian.Uint16(hdr[1:]))
	if err := checkBodyLen(t, n); err != nil {
		return frame{}, err
	}
	var body []byte
	if frameHeaderLen+n <= br.Size() {
		b, err := br.Peek(frameHeaderLen + n)
		if err != nil {
			return frame{}, eofInFrame(err)
		}
		body = b[frameHeaderLen:]
		_, _ = br.Discard(frameHeaderLen + n) // cannot fail: Peek returned the bytes
	} else {
		_, _ = br.Discard(frameHeaderLen)
		body = make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return frame{}, eofInFrame(err)
		}
	}
	return decodeBody(t, body)
}

func eofInFrame(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// bodyLen returns the length of f's encoded body.
func (f *frame) bodyLen() int {
	switch f.typ {
	case frameHello:
		return 1 + key.Size + len(f.data)
	case frameWelcome:
		return 5
	case frameSend, frameRecv:
		return key.Size + len(f.data)
	case framePing, framePong:
		return 8
	case framePeerGone:
		return key.Size + 1
	case frameBind:
		return 4 + key.Size
	case frameBindAck:
		return 4
	case frameClose:
		return 1 + len(f.data)
	}
	return len(f.data)
}

// appendFrame appends f's encoding to dst. The caller keeps f within the
// bounds decodeFrame enforces; appendFrame checks them too and fails with
// ErrProtocol rather than emit a frame the peer must reject.
func appendFrame(dst []byte, f *frame) ([]byte, error) {
	n := f.bodyLen()
	if err := checkBodyLen(f.typ, n); err != nil {
		return dst, err
	}
	dst = append(dst, byte(f.typ), byte(n>>8), byte(n))
	switch f.typ {
	case frameHello:
		dst = append(dst, f.version)
		dst = append(dst, f.key[:]...)
		dst = append(dst, f.data...)
	case frameWelcome:
		dst = append(dst, f.version)
		dst = binary.BigEndian.AppendUint32(dst, f.keepalive)
	case frameSend, frameRecv:
		dst = append(dst, f.key[:]...)
		dst = append(dst, f.data...)
	case framePing, framePong:
		dst = append(dst, f.ping[:]...)
	case framePeerGone:
		dst = append(dst, f.key[:]...)
		dst = append(dst, f.reason)
	case frameBind:
		dst = binary.BigEndian.AppendUint32(dst, f.id)
		dst = append(dst, f.key[:]...)
	case frameBindAck:
		dst = binary.BigEndian.AppendUint32(dst, f.id)
	case frameClose:
		dst = append(dst, f.reason)
		dst = append(dst, f.data...)
	default:
		dst = append(dst, f.data...)
	}
	return dst, nil
}

// writePacketFrame writes a SEND or RECV frame without assembling it in a
// separate buffer first.
func writePacketFrame(bw *bufio.Writer, t frameType, dst key.Public, pkt []byte) error {
	if len(pkt) == 0 || len(pkt) > MaxPacketSize {
		return fmt.Errorf("relay: write %s frame: %d-byte packet: %w", t, len(pkt), ErrPacketSize)
	}
	var hdr [frameHeaderLen + key.Size]byte
	n := key.Size + len(pkt)
	hdr[0], hdr[1], hdr[2] = byte(t), byte(n>>8), byte(n)
	copy(hdr[frameHeaderLen:], dst[:])
	if _, err := bw.Write(hdr[:]); err != nil {
		return err
	}
	_, err := bw.Write(pkt)
	return err
}

// appendDatagram appends a packet datagram: type, the sender's peer id for
// the other end of the relay, then the packet.
func appendDatagram(dst []byte, id uint32, pkt []byte) []byte {
	dst = append(dst, datagramPacket)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return append(dst, pkt...)
}

// paddedLen returns how many padding bytes a padded datagram of pkt
// carries (besides its count byte) so that it is as long as a plain one
// of MaxDatagramPacket bytes, and false when pkt is not worth padding:
// already full size, too large, or more than maxDatagramPad short.
func paddedLen(pkt []byte) (int, bool) {
	short := MaxDatagramPacket - len(pkt)
	if short <= 0 || short > maxDatagramPad {
		return 0, false
	}
	return short - 1, true
}

// appendPaddedDatagram appends a padded packet datagram: type, peer id,
// the packet, pad zero bytes and the count of them.
func appendPaddedDatagram(dst []byte, id uint32, pkt []byte, pad int) []byte {
	dst = append(dst, datagramPadded)
	dst = binary.BigEndian.AppendUint32(dst, id)
	dst = append(dst, pkt...)
	for range pad {
		dst = append(dst, 0)
	}
	return append(dst, byte(pad))
}

// decodeDatagram parses a QUIC datagram, plain or padded. pkt aliases b.
func decodeDatagram(b []byte) (id uint32, pkt []byte, err error) {
	if len(b) <= datagramHeaderLen {
		return 0, nil, fmt.Errorf("%w: %d-byte datagram", ErrProtocol, len(b))
	}
	switch b[0] {
	case datagramPacket:
	case datagramPadded:
		// The count byte and the padding it counts leave at least one
		// packet byte.
		pad := int(b[len(b)-1])
		if len(b)-datagramHeaderLen < pad+2 {
			return 0, nil, fmt.Errorf("%w: %d-byte datagram padded by %d", ErrProtocol, len(b), pad)
		}
		b = b[:len(b)-1-pad]
	default:
		return 0, nil, fmt.Errorf("%w: datagram type 0x%02x", ErrProtocol, b[0])
	}
	if len(b)-datagramHeaderLen > MaxPacketSize {
		return 0, nil, fmt.Errorf("%w: %d-byte datagram", ErrProtocol, len(b))
	}
	id = binary.BigEndian.Uint32(b[1:])
	if id == 0 {
		return 0, nil, fmt.Errorf("%w: datagram with peer id 0", ErrProtocol)
	}
	return id, b[datagramHeaderLen:], nil
}
