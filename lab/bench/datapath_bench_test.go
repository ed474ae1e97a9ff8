package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/labfile"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/topology"
)

// BenchmarkLabDataPath runs `lattice-lab bench --only datapath` (the
// quickstart pair, direct and relayed) in the test binary, so the lab's
// overlay path can be profiled with -cpuprofile. Each iteration moves
// 32 MiB each way over both pairs; it reports both figures in Mbit/s.
//
// Beside them, underlay_direct: the same 32 MiB by TCP between two lab
// hosts, with no overlay, on a path with the direct pair's round trip
// (the server to the tablet: the tablet's 10 ms each way, as laptop to
// tablet). datapath_direct over underlay_direct is what the overlay costs
// on top of the lab's own TCP at that round trip.
func BenchmarkLabDataPath(b *testing.B) {
	var l labfile.Loader
	release := l.Hold()
	defer func() { require.NoError(b, release()) }()
	f, err := l.Load("builtin:quickstart", labfile.Options{Kind: labfile.Topology})
	require.NoError(b, err)
	topos := Topologies{Pair: f.Plan, Direct: [2]string{"laptop", "tablet"}, Relay: [2]string{"laptop", "desktop"}}
	sums := map[string]float64{}
	for b.Loop() {
		rep, err := Run(context.Background(), topos, Options{Only: []string{"datapath"}, Bytes: 32 << 20})
		require.NoError(b, err)
		for _, m := range rep.Metrics {
			sums[m.Name] += m.Value
		}
		mbits, err := underlayTCP(b.Context(), f.Plan, "server", "203.0.113.100:5201", "tablet", 32<<20)
		require.NoError(b, err)
		sums["underlay_direct"] += mbits
	}
	for name, v := range sums {
		b.ReportMetric(v/float64(b.N), name+"-Mbit/s")
	}
}

// underlayTCP brings up plan's hosts without nodes and moves size bytes
// by TCP from host src, listening at addr, to host dst, timed as
// runner's Transfer times the overlay's: from the first byte to the
// sender's reading the receiver's SHA-256 of them. It returns Mbit/s.
func underlayTCP(ctx context.Context, plan *topology.Plan, src, addr, dst string, size int64) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := runner.Up(ctx, runner.Config{Plan: plan, Nodes: []string{}})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	from, to := l.Fabric().Host(src), l.Fabric().Host(dst)
	if from == nil || to == nil {
		return 0, fmt.Errorf("no host %s or %s in %s", src, dst, plan.Name)
	}
	ln, err := from.Listen(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	// The receiver dials out (it is behind NATs) and checks what arrives.
	recvErr := make(chan error, 1)
	go func() {
		c, err := to.Dial(ctx, "tcp", addr)
		if err != nil {
			recvErr <- err
			return
		}
		defer c.Close()
		h := sha256.New()
		if _, err := io.CopyN(h, c, size); err != nil {
			recvErr <- fmt.Errorf("receive: %w", err)
			return
		}
		_, err = c.Write(h.Sum(nil))
		recvErr <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(c, h), pattern(), size); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	var sum [32]byte
	if _, err := io.ReadFull(c, sum[:]); err != nil {
		return 0, fmt.Errorf("wait for the checksum: %w", err)
	}
	d := time.Since(start)
	if err := <-recvErr; err != nil {
		return 0, err
	}
	if string(sum[:]) != string(h.Sum(nil)) {
		return 0, fmt.Errorf("SHA-256 mismatch after %d bytes", size)
	}
	return float64(size) * 8 / d.Seconds() / 1e6, nil
}

// pattern is an endless reader of non-constant bytes.
func pattern() io.Reader {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i*31 + i>>8)
	}
	return &repeat{buf: buf}
}

type repeat struct {
	buf []byte
	off int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := copy(p, r.buf[r.off:])
	r.off = (r.off + n) % len(r.buf)
	return n, nil
}
