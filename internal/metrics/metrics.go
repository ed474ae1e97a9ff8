// Package metrics serves Prometheus /metrics for Lattice's daemons: the
// registry every daemon starts from (Go runtime and process metrics) and
// an HTTP server that refuses to listen beyond loopback unless asked.
// The node's collector is here (node.go, shared by cmd/lattice and the
// lab); the other daemons' collectors live beside the state they read (relay/,
// cmd/lattice); the names are in docs/METRICS.md.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrRemoteListen is CheckListen's refusal of an address other hosts can
// reach: metrics name peers, paths and traffic volumes, which an operator
// exposes on purpose or not at all.
var ErrRemoteListen = errors.New("metrics: refusing to listen beyond loopback")

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors, for a daemon to add its own to.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// CheckListen accepts a host:port whose host is a loopback address or
// "localhost", and with allowRemote any host:port. An empty host (":9090")
// means every address, so it is remote.
func CheckListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics: listen address %q: %w", addr, err)
	}
	if allowRemote || host == "localhost" {
		return nil
	}
	a, err := netip.ParseAddr(host)
	if err == nil && a.Unmap().IsLoopback() {
		return nil
	}
	what := host
	if host == "" {
		what = "every address"
	}
	return fmt.Errorf("%w: %s (%s); use 127.0.0.1:PORT, or allow it explicitly", ErrRemoteListen, addr, what)
}

// Server serves GET /metrics from one gatherer until Close.
type Server struct {
	ln   net.Listener
	hs   *http.Server
	log  *slog.Logger
	done chan struct{}
	once sync.Once
	err  error
}

// Serve serves g on ln; it owns ln from then on. log (nil: discard)
// receives the handler's errors.
func Serve(ln net.Listener, g prometheus.Gatherer, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "metrics")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slogPrinter{log}}))
	s := &Server{
		ln:   ln,
		hs:   &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		log:  log,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the metrics endpoint's URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/metrics" }

// Close stops the server, waiting up to 5s for scrapes in flight. It is
// idempotent and returns the serve loop's error, if any.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.hs.Shutdown(ctx); err != nil {
			_ = s.hs.Close()
		}
		<-s.done
	})
	if s.err != nil {
		return fmt.Errorf("metrics: serve: %w", s.err)
	}
	return nil
}

// slogPrinter adapts promhttp's error log to slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("scrape", "err", fmt.Sprint(v...)) }
