package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/quic-go/quic-go"

	"github.com/latticelab/lattice/key"
)

const (
	// bufSize sizes a connection's read and write buffers. 16 KiB is one
	// full TLS record, so a flushed batch of frames leaves as one record;
	// larger frames are read into their own allocation.
	bufSize = 16 << 10
	// writeBatch bounds how many queued items the writer handles between
	// flushes, so control frames never wait behind an endless packet
	// stream.
	writeBatch = 64
	// ctrlQueueLen bounds control frames (PONG, BIND_ACK, PEER_GONE)
	// waiting for the writer; beyond it they are dropped, which every one
	// of them tolerates.
	ctrlQueueLen = 256
	// idleIntervals is how many keepalive intervals may pass without
	// anything received before a connection is declared dead.
	idleIntervals = 3
	// closeWriteTimeout bounds the final flush and CLOSE frame.
	closeWriteTimeout = time.Second
	// maxDatagramSize bounds the datagram scratch buffer; quic-go never
	// accepts a datagram larger than a QUIC packet.
	maxDatagramSize = 1500
)

// quicPacketSize is the QUIC packet size LRP asks quic-go to start with
// (and never go below). quic-go's default of 1280 leaves datagram room for
// about 1240-byte packets and its path MTU discovery stops short of its
// 1452-byte ceiling, so a 1400-byte packet would never fit a datagram.
// 1452 bytes of UDP payload (1480 bytes of IPv4) crosses any path with a
// 1500-byte MTU; where the path is narrower the QUIC handshake fails and
// the client lands on TCP.
const quicPacketSize = 1452

// MaxDatagramPacket is the largest packet that travels as a QUIC datagram,
// 1408 bytes: one that fills a quicPacketSize QUIC packet exactly (see
// quicConnIDLen). It is also the largest WireGuard message of an overlay
// MTU of 1376, the largest MTU (a multiple of 16: WireGuard pads to 16
// bytes) whose messages fit (node.QUICRelayMTU); larger packets take the
// control stream. quic-go itself would admit two bytes more, in packets
// too large for their 2-byte packet number to fit, which it then drops.
const MaxDatagramPacket = quicPacketSize - 20 - quicConnIDLen - datagramHeaderLen

// quicConnIDLen is the length of the connection IDs each end issues, so
// the length of the destination ID in every short-header packet sent to
// it. quic-go batches packets into one GSO send (UDP_SEGMENT) only while
// each is exactly quicPacketSize bytes, and a short-header packet holding
// one datagram is 20 bytes plus the connection ID longer than its payload
// (type byte, 2-byte packet number, frame type, 16-byte tag; the last frame
// goes without its length). With 19 bytes, a full-size WireGuard message
// toward a QUIC-relayed peer (1408 bytes: 1376 + 32) fills a QUIC packet
// exactly, so a burst of them leaves in one sendmsg instead of one each
// (with quic-go's default of 4 bytes every datagram packet was 15 bytes
// short). The packet number stays 2 bytes while fewer than 32768 packets
// are unacknowledged, which quic-go's congestion window (at most 10000
// packets) keeps true. TestDatagramPacketsFull checks the sizes.
const quicConnIDLen = 19

// wire is one LRP connection seen from either end, over either transport:
// the framed control stream (the TLS connection itself on TCP, one
// bidirectional stream on QUIC), QUIC datagrams, the peer-id tables and the
// writer that owns all output. Whoever builds a wire runs its read loops
// and its writer, calls fail to end it and closeConn once they returned.
type wire struct {
	transport string
	nc        net.Conn     // TCP: the TLS connection
	qc        *quic.Conn   // QUIC
	qs        *quic.Stream // QUIC: the control stream
	cleanup   func()       // closes what the dialer opened under qc, or nil
	br        *bufio.Reader
	bw        *bufio.Writer // owned by the writer once it runs
	pktFrame  frameType     // SEND on the client, RECV on the server

	out    outIDs                          // QUIC: ids this end assigned
	in     inIDs                           // QUIC: ids the other end assigned
	dgBuf  []byte                          // writer-owned datagram scratch
	ctrl   chan frame                      // control frames for the writer
	seen   atomic.Bool                     // something arrived since the last keepalive tick
	onSent func(pkt []byte, datagram bool) // counts a packet written, or nil
	onFall func()                          // counts a datagram fallback, or nil
	padOut atomic.Bool                     // QUIC: the other end reads padded datagrams

	failOnce sync.Once
	done     chan struct{} // closed by fail
	code     CloseCode     // set by fail before done closes
	msg      string
	remote   bool  // the other end closed first
	cause    error // why, when it was an error

	connOnce sync.Once
}

func newTCPWire(nc net.Conn, pktFrame frameType) *wire {
	return &wire{
		transport: transportTCP,
		nc:        nc,
		br:        bufio.NewReaderSize(nc, bufSize),
		bw:        bufio.NewWriterSize(nc, bufSize),
		pktFrame:  pktFrame,
		ctrl:      make(chan frame, ctrlQueueLen),
		done:      make(chan struct{}),
	}
}

func newQUICWire(qc *quic.Conn, qs *quic.Stream, pktFrame frameType, cleanup func()) *wire {
	return &wire{
		transport: transportQUIC,
		qc:        qc,
		qs:        qs,
		cleanup:   cleanup,
		br:        bufio.NewReaderSize(qs, bufSize),
		bw:        bufio.NewWriterSize(qs, bufSize),
		pktFrame:  pktFrame,
		dgBuf:     make([]byte, 0, maxDatagramSize),
		ctrl:      make(chan frame, ctrlQueueLen),
		done:      make(chan struct{}),
	}
}

// fail ends the connection once: it records why, wakes every loop (done
// for the writer; a QUIC close or an immediate read deadline for the
// readers) and bounds the writer's final flush. Later calls do nothing.
func (w *wire) fail(code CloseCode, msg string, cause error, remote bool) {
	w.failOnce.Do(func() {
		msg = closeMessage(msg)
		w.code, w.msg, w.cause, w.remote = code, msg, cleanPeerError(cause), remote
		close(w.done)
		if w.qc != nil {
			_ = w.qc.CloseWithError(quic.ApplicationErrorCode(code), msg)
			return
		}
		now := time.Now()
		_ = w.nc.SetReadDeadline(now)
		_ = w.nc.SetWriteDeadline(now.Add(closeWriteTimeout))
	})
}

// failed reports whether fail was called.
func (w *wire) failed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// closeErr describes how the connection ended, for the owner to report.
func (w *wire) closeErr() error {
	if w.cause != nil {
		return w.cause
	}
	return &CloseError{Code: w.code, Message: w.msg, Remote: w.remote, byClient: w.remote && w.pktFrame == frameRecv}
}

// closeConn releases the connection. Call it after the loops returned.
func (w *wire) closeConn() {
	w.connOnce.Do(func() {
		if w.qc != nil {
			_ = w.qc.CloseWithError(quic.ApplicationErrorCode(w.code), w.msg)
		} else {
			_ = w.nc.Close()
		}
		if w.cleanup != nil {
			w.cleanup()
		}
	})
}

// clearReadDeadline lifts the deadline that bounded the wait for HELLO.
// Server handshake only, before any loop runs.
func (w *wire) clearReadDeadline() {
	if w.qs != nil {
		_ = w.qs.SetReadDeadline(time.Time{})
		return
	}
	_ = w.nc.SetReadDeadline(time.Time{})
}

// markSeen records that something arrived. It writes only when the flag
// changes, so readers on a busy connection do not bounce its cache line.
func (w *wire) markSeen() {
	if !w.seen.Load() {
		w.seen.Store(true)
	}
}

// queueCtrl hands a control frame to the writer without blocking.
func (w *wire) queueCtrl(f frame) bool {
	select {
	case w.ctrl <- f:
		return true
	default:
		return false
	}
}

// writeFrame encodes f into the write buffer. Writer or handshake only.
func (w *wire) writeFrame(f *frame) error {
	var scratch [frameHeaderLen + 1 + key.Size + MaxTokenSize]byte
	b, err := appendFrame(scratch[:0], f)
	if err != nil {
		return err
	}
	_, err = w.bw.Write(b)
	return err
}

// handleIDFrame processes BIND and BIND_ACK, which both ends treat alike.
func (w *wire) handleIDFrame(f *frame) error {
	if w.qc == nil {
		return fmt.Errorf("%w: %s on TCP", ErrProtocol, f.typ)
	}
	if f.typ == frameBindAck {
		return w.out.ack(f.id)
	}
	ack, err := w.in.bind(f.id, f.key)
	if err != nil {
		return err
	}
	if ack {
		w.queueCtrl(frame{typ: frameBindAck, id: f.id})
	}
	return nil
}

// writePacket sends one packet: as a datagram when the key's id is
// acknowledged and the packet fits, as a stream frame otherwise. Writer
// only.
func (w *wire) writePacket(p *outPacket) error {
	if w.qc != nil {
		id, ok := w.out.ackedID(p.key)
		if !ok {
			var bind bool
			id, ok, bind = w.out.lookup(p.key)
			if bind {
				if err := w.writeFrame(&frame{typ: frameBind, id: id, key: p.key}); err != nil {
					return err
				}
			}
		}
		if ok {
			sent, err := w.sendDatagram(w.dgBuf, id, p.pkt)
			if sent || err != nil {
				return err
			}
		}
	}
	if err := writePacketFrame(w.bw, w.pktFrame, p.key, p.pkt); err != nil {
		return err
	}
	w.sent(p.pkt, false)
	return nil
}

// writeFeatures tells a QUIC peer which optional datagram forms this end
// reads. Writer or handshake only.
func (w *wire) writeFeatures() error {
	if w.qc == nil {
		return nil
	}
	return w.writeFrame(&frame{typ: frameFeatures, data: []byte{featurePaddedDatagrams}})
}

// handleFeatures records what the other end's FEATURES frame announced.
func (w *wire) handleFeatures(f *frame) {
	if w.qc != nil && len(f.data) > 0 && f.data[0]&featurePaddedDatagrams != 0 {
		w.padOut.Store(true)
	}
}

// appendPacketDatagram appends pkt's datagram for peer id: padded when
// the other end reads padding and pkt is a little short of full size.
func (w *wire) appendPacketDatagram(dst []byte, id uint32, pkt []byte) []byte {
	if pad, ok := paddedLen(pkt); ok && w.padOut.Load() {
		return appendPaddedDatagram(dst, id, pkt, pad)
	}
	return appendDatagram(dst, id, pkt)
}

// sendDatagram sends pkt as a datagram for peer id, assembled in scratch
// (at least maxDatagramSize bytes), padded to fill its QUIC packet when
// it is a little short and the other end reads padding. sent is false,
// with a nil error, when the packet does not fit a datagram right now and
// must go on the stream. Safe for concurrent use (quic-go copies the
// datagram).
func (w *wire) sendDatagram(scratch []byte, id uint32, pkt []byte) (sent bool, err error) {
	if len(pkt) <= MaxDatagramPacket {
		err := w.qc.SendDatagram(w.appendPacketDatagram(scratch[:0], id, pkt))
		if err == nil {
			w.sent(pkt, true)
			return true, nil
		}
		var tooLarge *quic.DatagramTooLargeError
		if !errors.As(err, &tooLarge) {
			return false, err
		}
	}
	if w.onFall != nil {
		w.onFall()
	}
	return false, nil
}

func (w *wire) sent(pkt []byte, datagram bool) {
	if w.onSent != nil {
		w.onSent(pkt, datagram)
	}
}

// writeLoop owns the connection's output until the wire fails: packets
// from q and control frames. It flushes whenever it runs out of queued
// work or has handled writeBatch items, so bursts share TLS records and
// syscalls; control frames go first in every batch. On exit it writes a
// CLOSE frame (TCP) unless the peer closed.
func (w *wire) writeLoop(q *pktQueue) {
	batch := make([]outPacket, 0, writeBatch)
	for {
		var err error
		select {
		case <-w.done:
			w.writeClose()
			return
		case f := <-w.ctrl:
			err = w.writeFrame(&f)
		case <-q.ready:
		}
	ctrl:
		for i := 0; err == nil && i < writeBatch; i++ {
			select {
			case f := <-w.ctrl:
				err = w.writeFrame(&f)
			default:
				break ctrl
			}
		}
		batch = q.pop(batch[:0], writeBatch)
		for i := range batch {
			if err == nil {
				err = w.writePacket(&batch[i])
			}
			batch[i].release()
		}
		if len(batch) == writeBatch {
			// More may be queued: come back after the flush.
			select {
			case q.ready <- struct{}{}:
			default:
			}
		}
		if err == nil && w.bw.Buffered() > 0 {
			err = w.bw.Flush()
		}
		if err != nil {
			if !w.failed() {
				w.fail(CloseNormal, "", fmt.Errorf("relay: write %s: %w", w.transport, err), false)
			}
			return
		}
	}
}

// watchdog fails the wire once nothing has arrived for idleIntervals
// keepalive intervals and, when ping is set, queues a PING every interval.
// It runs apart from the writer so that a writer stuck on a dead TCP peer
// (a full send buffer, retransmitting for minutes) cannot keep the
// connection alive: fail's deadlines unblock both loops.
func (w *wire) watchdog(keepalive time.Duration, ping bool) {
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	idle := 0
	var seq uint64
	for {
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
		if w.seen.Swap(false) {
			idle = 0
		} else if idle++; idle >= idleIntervals {
			w.fail(CloseIdle, fmt.Sprintf("nothing received for %v", time.Duration(idle)*keepalive), nil, false)
			return
		}
		if ping {
			seq++
			f := frame{typ: framePing}
			binary.BigEndian.PutUint64(f.ping[:], seq)
			w.queueCtrl(f)
		}
	}
}

// writeClose tells a TCP peer why the connection ends. QUIC carries the
// code in CONNECTION_CLOSE instead, sent by fail.
func (w *wire) writeClose() {
	if w.qc != nil || w.remote {
		return
	}
	f := frame{typ: frameClose, reason: uint8(w.code), data: []byte(w.msg)}
	if w.writeFrame(&f) == nil {
		_ = w.bw.Flush()
	}
}

// remoteClose turns a peer's CLOSE frame or QUIC application close into
// a CloseError.
func remoteClose(code uint8, msg string) *CloseError {
	return &CloseError{Code: CloseCode(code), Message: closeMessage(msg), Remote: true}
}

// peerClosed ends w on the peer's CLOSE frame (fail cleans its message).
// CLOSE is a TCP frame: on QUIC the close code travels in CONNECTION_CLOSE,
// so a CLOSE on the control stream is a violation, and the caller fails w
// with the error returned.
func (w *wire) peerClosed(f *frame) error {
	if w.qc != nil {
		return fmt.Errorf("%w: %s on QUIC", ErrProtocol, f.typ)
	}
	w.fail(CloseCode(f.reason), string(f.data), nil, true)
	return nil
}

// closeMessage bounds a close message to MaxCloseMessage bytes of valid
// UTF-8 and replaces control and format characters with '?'. A peer's
// message ends up in logs, errors and status output: raw, a newline or an
// escape sequence in it could forge a log line or rewrite a terminal.
func closeMessage(msg string) string {
	if len(msg) > MaxCloseMessage {
		msg = msg[:MaxCloseMessage]
	}
	// ToValidUTF8 first: Map would turn each invalid byte into a 3-byte
	// U+FFFD and break the bound.
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, strings.ToValidUTF8(msg, "?"))
}

// cleanPeerError returns err, or, when err is a QUIC peer's close whose
// reason phrase closeMessage would change (a code beyond a CloseCode's
// 8 bits, or a transport close, carry one too), err printing that phrase
// cleaned.
func cleanPeerError(err error) error {
	var ae *quic.ApplicationError
	var te *quic.TransportError
	var phrase string
	switch {
	case errors.As(err, &ae) && ae.Remote:
		phrase = ae.ErrorMessage
	case errors.As(err, &te) && te.Remote:
		phrase = te.ErrorMessage
	}
	if closeMessage(phrase) == phrase {
		return err
	}
	return &peerQuotingError{err: err, phrase: phrase}
}

// peerQuotingError is an error whose text ends in a QUIC peer's reason
// phrase (quic-go puts it last); it prints the phrase cleaned.
type peerQuotingError struct {
	err    error
	phrase string
}

func (e *peerQuotingError) Error() string {
	s := e.err.Error()
	i := strings.LastIndex(s, e.phrase)
	if i < 0 {
		return closeMessage(s)
	}
	return s[:i] + closeMessage(e.phrase) + s[i+len(e.phrase):]
}

func (e *peerQuotingError) Unwrap() error { return e.err }

// asRemoteClose recognises a QUIC error that carries the peer's close code.
func asRemoteClose(err error) (*CloseError, bool) {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode <= 0xff {
		return remoteClose(uint8(ae.ErrorCode), ae.ErrorMessage), true
	}
	return nil, false
}

// readDatagrams delivers QUIC datagrams to handle until the connection
// ends. cache is this loop's own copy of the id table (ids never change).
func (w *wire) readDatagrams(handle func(src key.Public, pkt []byte), dropped func(dropReason)) {
	ctx := w.qc.Context()
	cache := make(map[uint32]key.Public)
	for {
		b, err := w.qc.ReceiveDatagram(ctx)
		if err != nil {
			return
		}
		w.markSeen()
		id, pkt, err := decodeDatagram(b)
		if err != nil {
			dropped(dropMalformed)
			continue
		}
		src, ok := cache[id]
		if !ok {
			if src, ok = w.in.lookup(id); !ok {
				dropped(dropUnknownID)
				continue
			}
			cache[id] = src
		}
		handle(src, pkt)
	}
}

// readError fails w after its control stream returned err, and reports
// whether the peer broke the protocol.
func (w *wire) readError(err error) (protocol bool) {
	switch {
	case w.failed():
		return false
	case errors.Is(err, ErrProtocol):
		w.fail(CloseProtocol, err.Error(), err, false)
		return true
	}
	if ce, ok := asRemoteClose(err); ok {
		w.fail(ce.Code, ce.Message, nil, true)
		return false
	}
	w.fail(CloseNormal, "", fmt.Errorf("relay: read %s: %w", w.transport, err), true)
	return false
}
