package wgdev

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"

	"github.com/latticelab/lattice/node"
)

// UAPIServer answers the cross-platform userspace protocol (the one
// wg(8) and wgctrl speak to wireguard-go) on a listener, for a
// node.Device. get answers carry each endpoint through Endpoint, since
// the node's device names peers, not addresses.
type UAPIServer struct {
	ln       net.Listener
	dev      node.Device
	endpoint func(string) string
	log      *slog.Logger

	mu     sync.Mutex // guards the following
	conns  map[net.Conn]struct{}
	closed bool

	wg   sync.WaitGroup
	once sync.Once
}

// UAPIConfig configures NewUAPIServer.
type UAPIConfig struct {
	// Device answers the requests. Required.
	Device node.Device
	// Endpoint rewrites an endpoint= value of a get answer; "" leaves
	// the line out. If nil, values pass as they are.
	Endpoint func(string) string
	// Logger; if nil, logs are discarded.
	Logger *slog.Logger
}

// uapiTimeout bounds one connection's idle time: wg(8) sends its
// request at once.
const uapiTimeout = 10 * time.Second

// NewUAPIServer serves cfg.Device on ln until Close, which closes ln.
func NewUAPIServer(ln net.Listener, cfg UAPIConfig) (*UAPIServer, error) {
	if cfg.Device == nil {
		return nil, errors.New("wgdev: uapi: no Device")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ep := cfg.Endpoint
	if ep == nil {
		ep = func(s string) string { return s }
	}
	s := &UAPIServer{ln: ln, dev: cfg.Device, endpoint: ep, log: log.With("component", "uapi"), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *UAPIServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			_ = c.SetDeadline(time.Now().Add(uapiTimeout))
			if err := s.serve(c); !errors.Is(err, io.EOF) { // serve returns only on an error
				s.log.Debug("uapi connection", "err", err)
			}
		}()
	}
}

// serve answers the operations on one connection until it ends.
func (s *UAPIServer) serve(rw io.ReadWriter) error {
	r := bufio.NewReaderSize(rw, 4096)
	w := bufio.NewWriter(rw)
	for {
		op, err := readLine(r)
		if err != nil {
			return err
		}
		var errno int64
		switch op {
		case "get=1":
			end, err := readLine(r)
			if err != nil {
				return err
			}
			if end != "" {
				errno = ipc.IpcErrorInvalid
				break
			}
			body, err := s.dev.IpcGet()
			if err != nil {
				errno = errnoOf(err)
				break
			}
			_, _ = w.WriteString(s.rewrite(body))
		case "set=1":
			body, err := readBody(r)
			if err != nil {
				return err
			}
			if err := s.dev.IpcSet(body); err != nil {
				s.log.Info("uapi set refused", "err", err)
				errno = errnoOf(err)
			}
		default:
			return fmt.Errorf("wgdev: uapi: unknown operation %q", truncate(op, 32))
		}
		fmt.Fprintf(w, "errno=%d\n\n", errno)
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// rewrite passes a get body's endpoint= values through s.endpoint.
func (s *UAPIServer) rewrite(body string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			v = s.endpoint(strings.TrimSuffix(v, "\n"))
			if v == "" {
				continue
			}
			line = "endpoint=" + v + "\n"
		}
		b.WriteString(line)
	}
	return b.String()
}

// readLine reads one line without its newline; a line longer than the
// reader's buffer is an error.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("wgdev: uapi: line too long")
		}
		return "", err
	}
	return string(line[:len(line)-1]), nil
}

// readBody reads a set body up to its blank line, bounded.
func readBody(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for n := 0; ; n++ {
		if n > maxUAPILines {
			return "", fmt.Errorf("wgdev: uapi: more than %d lines", maxUAPILines)
		}
		line, err := readLine(r)
		if err != nil {
			return "", err
		}
		if line == "" {
			return b.String(), nil
		}
		b.WriteString(line + "\n")
	}
}

// errnoOf is the errno a UAPI answer reports for err: wireguard-go's own
// when it has one, else EINVAL.
func errnoOf(err error) int64 {
	var ipcErr *device.IPCError
	if errors.As(err, &ipcErr) {
		return ipcErr.ErrorCode()
	}
	return ipc.IpcErrorInvalid
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Close stops accepting, ends the open connections and waits for them.
func (s *UAPIServer) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.ln.Close()
		s.wg.Wait()
	})
	return nil
}
