package control

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
)

// BenchmarkPeerEventFanout measures one peer change reaching 10,000
// subscribed nodes through a nats-server on loopback: shared, the
// current form (one event on SubjectPeerEvents, which the server hands
// to every subscriber); per-node, the form older clients get (one
// publish per node on its LeafPeers subject), as every change cost
// before. The 10,000 nodes are 10,000 subscriptions over 100 connections
// (10,000 connections would measure the machine's limits, not control).
// ms is the time from the change until every node has it; control-B is
// what control sends per change.
func BenchmarkPeerEventFanout(b *testing.B) {
	for _, form := range []string{"shared", "per-node"} {
		b.Run(form, func(b *testing.B) { benchFanout(b, form == "shared") })
	}
}

func benchFanout(b *testing.B, shared bool) {
	const nodes, conns = 10_000, 100
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(b, err)
	ns.Start()
	require.True(b, ns.ReadyForConnections(10*time.Second))
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	st := NewMemStore()
	populate(b, ctx, st, nodes)
	if !shared {
		for _, n := range st.byID {
			n.SharedEvents = false
		}
	}
	srv, err := New(ctx, Config{Tokens: []JoinToken{{Value: testToken}}, Store: st, NATSURL: ns.ClientURL()})
	require.NoError(b, err)
	defer srv.Close()

	var got atomic.Int64
	done := make(chan struct{}, 1)
	var target atomic.Int64
	handler := func(*nats.Msg) {
		if got.Add(1) == target.Load() {
			done <- struct{}{}
		}
	}
	ids := srv.view.ids
	for c := range conns {
		nc, err := nats.Connect(ns.ClientURL(), nats.SyncQueueLen(1<<16))
		require.NoError(b, err)
		defer nc.Close()
		for i := c; i < nodes; i += conns {
			subj := controlapi.SubjectPeerEvents
			if !shared {
				subj = controlapi.NodeSubject(ids[i], controlapi.LeafPeers)
			}
			_, err := nc.Subscribe(subj, handler)
			require.NoError(b, err)
		}
		require.NoError(b, nc.Flush())
	}
	changed := srv.view.get(ids[0])
	before := srv.Conn().Stats().OutBytes
	b.ResetTimer()
	for i := range b.N {
		// Every node but the changed one, which publishEvent skips in the
		// per-node form and a node's session drops in the shared one.
		want := int64(nodes - 1)
		if shared {
			want = nodes
		}
		target.Store(int64(i+1) * want)
		srv.publishEvent(controlapi.PeerEvent{Type: controlapi.PeerUpdated, Peer: changed.peer()})
		select {
		case <-done:
		case <-ctx.Done():
			b.Fatalf("change %d reached %d of %d nodes", i, got.Load()-int64(i)*want, want)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms")
	b.ReportMetric(float64(srv.Conn().Stats().OutBytes-before)/float64(b.N), "control-B")
}
