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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/netx"
)

// Ports of the test services every node serves on its overlay address.
const (
	EchoPort = 7  // UDP echo (RFC 862)
	HTTPPort = 80 // "hello from NAME", /bytes/N
	SinkPort = 9  // TCP: 8-byte length, data; answers the data's SHA-256
)

// overlayServers are a node's test services.
type overlayServers struct {
	pc   net.PacketConn
	web  *http.Server
	sink net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex // guards the following fields
	conns map[net.Conn]struct{}
	done  bool
	once  sync.Once
}

func serveOverlay(n netx.Network, name string) (*overlayServers, error) {
	ctx := context.Background()
	s := &overlayServers{conns: map[net.Conn]struct{}{}}
	var err error
	if s.pc, err = n.ListenPacket(ctx, "udp", fmt.Sprintf(":%d", EchoPort)); err != nil {
		return nil, err
	}
	webLn, err := n.Listen(ctx, "tcp", fmt.Sprintf(":%d", HTTPPort))
	if err != nil {
		s.pc.Close()
		return nil, err
	}
	if s.sink, err = n.Listen(ctx, "tcp", fmt.Sprintf(":%d", SinkPort)); err != nil {
		s.pc.Close()
		webLn.Close()
		return nil, err
	}
	s.web = &http.Server{Handler: helloHandler("hello from " + name), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Go(s.echo)
	s.wg.Go(func() { _ = s.web.Serve(webLn) })
	s.wg.Go(s.acceptSink)
	return s, nil
}

// helloHandler answers "GREETING, you are ADDR" and /bytes/N.
func helloHandler(greeting string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			size, err := strconv.ParseInt(n, 10, 64)
			if err != nil || size < 0 || size > 1<<30 {
				http.Error(w, "bad size", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", n)
			_, _ = io.CopyN(w, pattern{}, size)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8") // never sniffed as HTML
		fmt.Fprintf(w, "%s, you are %s\n", greeting, r.RemoteAddr)  //nolint:gosec // text/plain, set above
	})
}

func (s *overlayServers) echo() {
	buf := make([]byte, 2048)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = s.pc.WriteTo(buf[:n], from)
	}
}

func (s *overlayServers) acceptSink() {
	for {
		c, err := s.sink.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Go(func() { s.serveSink(c) })
		s.mu.Unlock()
	}
}

func (s *overlayServers) serveSink(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	h := sha256.New()
	if _, err := io.CopyN(h, c, int64(binary.BigEndian.Uint64(hdr[:]))); err != nil {
		return
	}
	_, _ = c.Write(h.Sum(nil))
}

// Close stops every service and waits for its goroutines. Idempotent.
func (s *overlayServers) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.done = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		err = errors.Join(s.pc.Close(), s.sink.Close(), s.web.Close())
		s.wg.Wait()
	})
	return err
}

// pattern is an endless deterministic byte stream for transfers: byte i
// of each Read is byte(i*31 + i>>8), which repeats every 64 KiB, so a
// Read copies it from patternTable (a byte at a time it was 7% of a
// data-path benchmark's CPU).
type pattern struct{}

var patternTable = func() (t [1 << 16]byte) {
	for i := range t {
		t[i] = byte(i*31 + i>>8)
	}
	return t
}()

func (pattern) Read(p []byte) (int, error) {
	for n := 0; n < len(p); {
		n += copy(p[n:], patternTable[:])
	}
	return len(p), nil
}

// bindConn applies ctx to conn's deadline and cuts it short when ctx ends.
func bindConn(ctx context.Context, conn net.Conn) (stop func() bool) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	return context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}
