package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/netx"
)

// MetricsFlags are --metrics-listen and --metrics-allow-remote, shared by
// every daemon; peer adds the node's per-peer switches.
type MetricsFlags struct {
	Listen      string
	AllowRemote bool
	PerPeer     bool
	PeerLimit   int
}

func (m *MetricsFlags) Add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.Listen, "metrics-listen", "", "serve Prometheus /metrics on this host:port (off if empty; loopback only unless --metrics-allow-remote)")
	f.BoolVar(&m.AllowRemote, "metrics-allow-remote", false, "let --metrics-listen bind a non-loopback address (metrics name peers and traffic volumes)")
}

// AddPeer adds the node's per-peer metric switches (docs/METRICS.md).
func (m *MetricsFlags) AddPeer(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&m.PerPeer, "metrics-per-peer", false, "also export per-peer series (peer label), for at most --metrics-peer-limit peers")
	f.IntVar(&m.PeerLimit, "metrics-peer-limit", metrics.DefaultPeerLimit, "with --metrics-per-peer: the most peers given their own series; the rest are only in the per-path totals")
}

// Check validates the flags before anything starts.
func (m *MetricsFlags) Check() error {
	if m.PeerLimit < 0 {
		return Usagef("--metrics-peer-limit %d: must not be negative", m.PeerLimit)
	}
	if m.Listen == "" {
		return nil
	}
	if err := metrics.CheckListen(m.Listen, m.AllowRemote); err != nil {
		if errors.Is(err, metrics.ErrRemoteListen) {
			return Usagef("--metrics-listen: %w (--metrics-allow-remote)", err)
		}
		return Usagef("--metrics-listen: %w", err)
	}
	return nil
}

// Registry is what a daemon registers its collectors in: runtime and
// process metrics included. It is built even without --metrics-listen,
// so components count the same either way.
func (m *MetricsFlags) Registry() *prometheus.Registry { return metrics.NewRegistry() }

// Start serves /metrics with the runtime metrics and cs when
// --metrics-listen asks for it; see Serve.
func (m *MetricsFlags) Start(ctx context.Context, out io.Writer, who string, log *slog.Logger, cs ...prometheus.Collector) (func(), error) {
	if m.Listen == "" {
		return func() {}, nil
	}
	reg := m.Registry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m.Serve(ctx, reg, out, who, log)
}

// Serve starts /metrics when --metrics-listen asks for it, prints where,
// and returns the function that stops it (a no-op when off).
func (m *MetricsFlags) Serve(ctx context.Context, reg prometheus.Gatherer, out io.Writer, who string, log *slog.Logger) (func(), error) {
	if m.Listen == "" {
		return func() {}, nil
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	ln, err := netx.OS.Listen(ctx, "tcp", m.Listen)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	s := metrics.Serve(ln, reg, log)
	fmt.Fprintf(out, "%s: metrics on %s\n", who, s.URL())
	return func() {
		if err := s.Close(); err != nil && log != nil {
			log.Warn("metrics server", "err", err)
		}
	}, nil
}
