package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/latticelab/lattice/key"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame and datagram
// decoders. Whatever the input: no panic; an error or a frame that
// consumed no more than the input; a decoded frame re-encodes to exactly
// the bytes it came from (so no field is silently dropped or invented);
// and the streaming reader agrees with the slice decoder.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		if b, err := appendFrame(nil, &fr); err == nil && len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{byte(frameSend), 0xff, 0xff})
	f.Add(appendDatagram(nil, 7, []byte("wireguard")))
	f.Add(appendPaddedDatagram(nil, 7, []byte("wireguard"), 5))

	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := decodeFrame(in)
		switch {
		case errors.Is(err, errIncomplete):
		case err != nil:
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode error %v does not wrap ErrProtocol", err)
			}
		default:
			if n < frameHeaderLen || n > len(in) {
				t.Fatalf("consumed %d of %d bytes", n, len(in))
			}
			out, err := appendFrame(nil, &fr)
			if err != nil {
				t.Fatalf("re-encoding a decoded %s: %v", fr.typ, err)
			}
			if !bytes.Equal(out, in[:n]) {
				t.Fatalf("round trip changed the frame:\n in %x\nout %x", in[:n], out)
			}
		}

		got, rerr := readFrame(bufio.NewReaderSize(bytes.NewReader(in), bufSize))
		switch {
		case err == nil:
			if rerr != nil || got.typ != fr.typ || !bytes.Equal(got.data, fr.data) || got.key != fr.key {
				t.Fatalf("readFrame disagrees: %v %+v vs %+v", rerr, got, fr)
			}
		case errors.Is(err, ErrProtocol):
			if !errors.Is(rerr, ErrProtocol) {
				t.Fatalf("readFrame accepted what decodeFrame rejected (%v): %v", err, rerr)
			}
		default: // incomplete: the stream ends inside the frame
			if rerr == nil {
				t.Fatalf("readFrame decoded an incomplete frame")
			}
		}

		id, pkt, err := decodeDatagram(in)
		if err == nil {
			again := appendDatagram(nil, id, pkt)
			if in[0] == datagramPadded {
				// The padding's content is not read.
				pad := int(in[len(in)-1])
				again = appendPaddedDatagram(nil, id, pkt, pad)
				copy(again[len(again)-1-pad:], in[len(in)-1-pad:])
			}
			if id == 0 || len(pkt) == 0 || !bytes.Equal(again, in) {
				t.Fatalf("datagram round trip: id %d pkt %x from %x", id, pkt, in)
			}
		} else if !errors.Is(err, ErrProtocol) {
			t.Fatalf("datagram error %v does not wrap ErrProtocol", err)
		}
	})
}

// FuzzVerifyToken checks token verification against arbitrary strings:
// no panic; every error wraps one of the token sentinels; a token that
// verifies is exactly what IssueToken makes of its key and expiry (no
// second encoding of one token); InspectToken reads what VerifyToken
// reads and fails exactly when the token is malformed.
func FuzzVerifyToken(f *testing.F) {
	good := IssueToken(testSecret, key.Public{1, 2, 3}, time.Unix(2_000_000_000, 0))
	f.Add(string(good), int64(0))
	f.Add(string(good), int64(3_000_000_000))
	f.Add(string(good[:len(good)-1])+"A", int64(0))
	f.Add("", int64(0))
	f.Add(strings.Repeat("A", tokenLen), int64(0))
	f.Add(string(IssueToken([]byte(strings.Repeat("x", MinSecretSize)), key.Public{1}, time.Unix(1, 0))), int64(0))

	f.Fuzz(func(t *testing.T, tok string, now int64) {
		pub, err := VerifyToken(testSecret, Token(tok), time.Unix(now, 0))
		ipub, exp, ierr := InspectToken(Token(tok))
		if (ierr != nil) != errors.Is(err, ErrTokenMalformed) {
			t.Fatalf("inspect %v, verify %v", ierr, err)
		}
		if ierr != nil && !errors.Is(ierr, ErrTokenMalformed) {
			t.Fatalf("inspect error %v does not wrap ErrTokenMalformed", ierr)
		}
		switch {
		case err == nil:
			if ipub != pub {
				t.Fatalf("inspect read key %x, verify %x", ipub, pub)
			}
			if again := IssueToken(testSecret, pub, exp); string(again) != tok {
				t.Fatalf("verified %q, which re-issues as %q", tok, again)
			}
			if !time.Unix(now, 0).Before(exp) {
				t.Fatalf("verified a token expired at %v at %v", exp, time.Unix(now, 0))
			}
		case errors.Is(err, ErrTokenMalformed), errors.Is(err, ErrTokenInvalid):
		case errors.Is(err, ErrTokenExpired):
			if time.Unix(now, 0).Before(exp) {
				t.Fatalf("expired at %v, yet %v is before", exp, time.Unix(now, 0))
			}
		default:
			t.Fatalf("error %v wraps no token sentinel", err)
		}
	})
}

// FuzzServerHandshake plays an unauthenticated peer: the input is the
// plaintext byte stream a client sends after its TLS handshake (a HELLO,
// or anything, then frames of any size), fed to the server's handshake
// and, if the HELLO verifies, to the connection's read loop until the
// stream ends. Whatever it is, the server does not panic, the connection
// ends, nothing of it stays registered or pending, and it is counted
// exactly once: as a connection, or as one refusal.
func FuzzServerHandshake(f *testing.F) {
	k := key.Public{4, 5, 6}
	hello := func(tok Token) []byte {
		b, err := appendFrame(nil, &frame{typ: frameHello, version: ProtocolVersion, key: k, data: []byte(tok)})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	valid := hello(IssueToken(testSecret, k, time.Unix(2_000_000_000, 0)))
	big := make([]byte, MaxPacketSize)
	send, _ := appendFrame(nil, &frame{typ: frameSend, key: key.Public{7}, data: big})
	ping, _ := appendFrame(nil, &frame{typ: framePing})
	f.Add(valid)
	f.Add(append(append([]byte{}, valid...), send...))
	f.Add(append(append(append([]byte{}, valid...), ping...), 0xff, 0xff, 0xff))
	f.Add(append(append([]byte{}, valid...), byte(frameSend), 0xff, 0xff))
	f.Add(hello(IssueToken(testSecret, k, time.Unix(1, 0))))
	f.Add(hello(IssueToken(testSecret, key.Public{8}, time.Unix(2_000_000_000, 0))))
	f.Add(hello("short"))
	// Packets pipelined behind a refused HELLO (docs/LRP.md §1).
	f.Add(append(hello(IssueToken(testSecret, k, time.Unix(1, 0))), send...))
	f.Add(append(hello(IssueToken(testSecret, key.Public{8}, time.Unix(2_000_000_000, 0))), send...))
	f.Add(append(hello(IssueToken([]byte("another secret, just as long...."), k, time.Unix(2_000_000_000, 0))), send...))
	f.Add(send)
	f.Add([]byte{byte(frameHello), 0xff, 0xff})
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, in []byte) {
		s := handshakeServer()
		defer s.cancel()
		srv, cli := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, cli) }()
		go func() {
			_, _ = cli.Write(in)
			_ = cli.Close()
		}()
		e, _, _ := s.pre.admit(netip.MustParseAddr("192.0.2.1"), time.Unix(0, 0), func() { _ = srv.Close() })
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.handshake(newTCPWire(srv, frameRecv), srv.RemoteAddr(), e, func() bool { return true })
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the handshake of %d bytes did not end", len(in))
		}
		_ = cli.Close()
		st := s.Stats()
		var refusals uint64
		for _, n := range st.AuthFailures {
			refusals += n
		}
		if refusals+st.Connections[transportTCP] != 1 {
			t.Fatalf("counted %d refusals %v and %d connections", refusals, st.AuthFailures, st.Connections[transportTCP])
		}
		if refusals != 0 && st.PacketsIn != 0 {
			t.Fatalf("refused (%v), yet %d packets behind the HELLO were read", st.AuthFailures, st.PacketsIn)
		}
		if all, _ := s.pre.len(netip.Addr{}); all != 0 || len(s.clients) != 0 || st.Clients[transportTCP] != 0 {
			t.Fatalf("left behind: %d pending, %d registered", all, len(s.clients))
		}
	})
}

// handshakeServer is a Server with no listeners, enough for handshake and
// the connections it serves.
func handshakeServer() *Server {
	cfg := ServerConfig{Secret: testSecret, Now: func() time.Time { return time.Unix(1_900_000_000, 0) }}
	if err := cfg.setDefaults(); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		pre:     newPreauth(cfg.MaxPending, cfg.MaxPendingPerSource),
		clients: make(map[key.Public]*sconn),
	}
}
