package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// A live lab (lattice-lab up) answers on a unix socket in its state
// directory. Each connection carries one request, a JSON line, and one
// JSON line back; a capture's answer is followed by the pcapng stream
// until the client hangs up.

// LiveRequest is one request to a live lab.
type LiveRequest struct {
	// Op is info, do, capture or down.
	Op string `json:"op"`
	// Step is do's step, in YAML as a scenario's steps list holds it.
	Step string `json:"step,omitempty"`
	// Target is capture's network or host.
	Target string `json:"target,omitempty"`
}

// LiveResponse is a live lab's answer.
type LiveResponse struct {
	Error string `json:"error,omitempty"`
	// Invalid says the request itself was wrong (a step that does not
	// parse or names nothing), not that carrying it out failed.
	Invalid bool      `json:"invalid,omitempty"`
	Info    *LiveInfo `json:"info,omitempty"`
	// Lines are do's progress, Detail its result.
	Lines  []string `json:"lines,omitempty"`
	Detail string   `json:"detail,omitempty"`
}

// maxRequest bounds a request line.
const maxRequest = 1 << 20

// LiveConfig configures a LiveServer.
type LiveConfig struct {
	// Socket is the unix socket's path; its directory should be the
	// owner's alone. Required.
	Socket string
	// Info is added to every info answer (PID, state directory).
	Info LiveInfo
	// Logger receives connection errors. If nil, they are discarded.
	Logger *slog.Logger
}

// LiveServer serves a lab's control socket.
type LiveServer struct {
	l      *Lab
	cfg    LiveConfig
	log    *slog.Logger
	ln     *net.UnixListener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	down   chan struct{}
	downMu sync.Once

	stepMu sync.Mutex // one step at a time, as on a timeline

	mu       sync.Mutex // guards the following fields
	location map[string]string
	captured map[string]bool
	conns    map[net.Conn]struct{}
}

// ServeLive listens on cfg.Socket (mode 0600) and serves l until Close.
func ServeLive(l *Lab, cfg LiveConfig) (*LiveServer, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_ = os.Remove(cfg.Socket) // a socket left by a killed lab
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("live: listen: %w", err)
	}
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("live: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &LiveServer{l: l, cfg: cfg, log: log.With("component", "live"), ln: ln, ctx: ctx, cancel: cancel,
		down: make(chan struct{}), location: map[string]string{}, captured: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Down is closed when a client asked the lab to go down.
func (s *LiveServer) Down() <-chan struct{} { return s.down }

// Close stops listening, ends captures and running requests, and waits
// for them. Idempotent.
func (s *LiveServer) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		err = s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		_ = os.Remove(s.cfg.Socket)
	})
	return err
}

func (s *LiveServer) accept() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		if err := checkPeer(c); err != nil {
			s.log.Warn("refused a connection", "err", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.serve(c)
		})
	}
}

func (s *LiveServer) serve(c net.Conn) {
	br := bufio.NewReaderSize(io.LimitReader(c, maxRequest+1), 4096)
	line, err := br.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		var more []byte
		more, err = br.ReadSlice('\n')
		line = append(line, more...)
	}
	if err != nil {
		s.reply(c, LiveResponse{Error: "live: read request: " + err.Error(), Invalid: true})
		return
	}
	var req LiveRequest
	if err := json.Unmarshal(line, &req); err != nil {
		s.reply(c, LiveResponse{Error: "live: bad request: " + err.Error(), Invalid: true})
		return
	}
	switch req.Op {
	case "info":
		info := s.l.Info()
		info.PID, info.StateDir, info.Socket = s.cfg.Info.PID, s.cfg.Info.StateDir, s.cfg.Socket
		s.reply(c, LiveResponse{Info: &info})
	case "do":
		s.reply(c, s.do(req.Step))
	case "capture":
		s.capture(c, req.Target)
	case "down":
		s.reply(c, LiveResponse{Detail: "going down"})
		s.downMu.Do(func() { close(s.down) })
	default:
		s.reply(c, LiveResponse{Error: fmt.Sprintf("live: unknown op %q", req.Op), Invalid: true})
	}
}

func (s *LiveServer) reply(c net.Conn, r LiveResponse) {
	b, _ := json.Marshal(r)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(b, '\n')); err != nil {
		s.log.Debug("reply", "err", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
}
