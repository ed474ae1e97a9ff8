package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/netx"
)

// metricsFlags are --metrics-listen and --metrics-allow-remote, shared by
// every daemon; peer adds the node's per-peer switches.
type metricsFlags struct {
	listen      string
	allowRemote bool
	perPeer     bool
	peerLimit   int
}

func (m *metricsFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.listen, "metrics-listen", "", "serve Prometheus /metrics on this host:port (off if empty; loopback only unless --metrics-allow-remote)")
	f.BoolVar(&m.allowRemote, "metrics-allow-remote", false, "let --metrics-listen bind a non-loopback address (metrics name peers and traffic volumes)")
}

// addPeer adds the node's per-peer metric switches (docs/METRICS.md).
func (m *metricsFlags) addPeer(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&m.perPeer, "metrics-per-peer", false, "also export per-peer series (peer label), for at most --metrics-peer-limit peers")
	f.IntVar(&m.peerLimit, "metrics-peer-limit", defaultPeerLimit, "with --metrics-per-peer: the most peers given their own series; the rest are only in the per-path totals")
}

// check validates the flags before anything starts.
func (m *metricsFlags) check() error {
	if m.listen == "" {
		return nil
	}
	if m.peerLimit < 0 {
		return usagef("--metrics-peer-limit %d: must not be negative", m.peerLimit)
	}
	if err := metrics.CheckListen(m.listen, m.allowRemote); err != nil {
		return usagef("--metrics-listen: %v (--metrics-allow-remote)", err)
	}
	return nil
}

// registry is what a daemon registers its collectors in: runtime and
// process metrics included. It is built even without --metrics-listen,
// so components count the same either way.
func (m *metricsFlags) registry() *prometheus.Registry { return metrics.NewRegistry() }

// start serves /metrics with the runtime metrics and cs when
// --metrics-listen asks for it; see serve.
func (m *metricsFlags) start(ctx context.Context, out io.Writer, who string, log *slog.Logger, cs ...prometheus.Collector) (func(), error) {
	if m.listen == "" {
		return func() {}, nil
	}
	reg := m.registry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m.serve(ctx, reg, out, who, log)
}

// serve starts /metrics when --metrics-listen asks for it, prints where,
// and returns the function that stops it (a no-op when off).
func (m *metricsFlags) serve(ctx context.Context, reg prometheus.Gatherer, out io.Writer, who string, log *slog.Logger) (func(), error) {
	if m.listen == "" {
		return func() {}, nil
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	ln, err := netx.OS.Listen(ctx, "tcp", m.listen)
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
