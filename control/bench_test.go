package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// BenchmarkRegister measures registrations per second over NATS on
// loopback, with registerClients joining clients at once: each
// registration is a client's two requests (challenge, proof of key),
// token check, address and name claims, a registry write (file store:
// fsync per write; kv: JetStream on control's embedded server;
// kv-cluster: a bucket of 3 replicas on a 3-server cluster), one shared
// peer event and the reply with the first page of peers. The registry
// holds 100 or 10,000 nodes first, written straight into the store (not
// registered one by one: that would take the benchmark's own time).
// p99-ms is the 99th percentile of one registration's latency.
func BenchmarkRegister(b *testing.B) {
	for _, store := range []string{"file", "kv", "kv-cluster"} {
		for _, pre := range []int{100, 10_000} {
			b.Run(fmt.Sprintf("%s/%d", store, pre), func(b *testing.B) { benchRegister(b, store, pre) })
		}
	}
}

const registerClients = 16

func benchRegister(b *testing.B, store string, pre int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A long PresenceTTL: the pre-filled nodes, presumed online at start,
	// would all go offline within the run, a storm of 10,000 events that
	// is not a registration's cost.
	cfg := Config{Tokens: []JoinToken{{Value: testToken}}, EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0"}, PresenceTTL: time.Hour}
	switch store {
	case "file":
		mem := newFileStore("")
		populate(b, ctx, mem, pre)
		mem.path = filepath.Join(b.TempDir(), "r.json")
		_, err := mem.writeSnapshotLocked(mem.path)
		require.NoError(b, err)
		st, err := OpenFileStore(mem.path)
		require.NoError(b, err)
		cfg.Store = st
	case "kv":
		cfg.KVBucket = "bench"
		cfg.EmbeddedNATS.StoreDir = b.TempDir()
	case "kv-cluster":
		c := startNATSCluster(b, 3)
		cfg.EmbeddedNATS = nil
		cfg.NATSURL = c.urls()
		cfg.KVBucket = "bench"
	}
	srv, err := New(ctx, cfg)
	require.NoError(b, err)
	defer srv.Close()
	if store != "file" {
		populate(b, ctx, srv.Store(), pre)
		require.Eventually(b, func() bool { return srv.view.len() == pre }, time.Minute, 10*time.Millisecond, "the view follows the store")
		if store == "kv-cluster" {
			waitReplicasCurrent(b, ctx, srv.Conn(), "KV_bench")
		}
	}
	url := cfg.NATSURL
	if srv.NATS() != nil {
		url = srv.NATS().URL()
	}
	conns := make([]*nats.Conn, registerClients)
	for i := range conns {
		user := fmt.Sprintf("%s%020d", joinPrefix, i)
		nc, err := nats.Connect(url, nats.SetCustomDialer(controlapi.Dialer(netx.OS)),
			nats.UserInfo(user, testToken), nats.CustomInboxPrefix(controlapi.InboxPrefix+"."+user))
		require.NoError(b, err)
		defer nc.Close()
		conns[i] = nc
	}
	joins := make([]controlapi.Join, b.N)
	pubs := make([]key.Public, b.N) // a node knows its public key
	for i := range joins {
		k := key.NewPrivate()
		pubs[i] = k.Public()
		joins[i] = controlapi.Join{Token: testToken, Name: "n" + nodeID(pubs[i])[1:12], Key: k}
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	cpu0 := cpuTime()
	b.ResetTimer()
	for _, nc := range conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N || failed.Load() != nil {
					return
				}
				t0 := time.Now()
				if err := registerLight(ctx, nc, joins[i], pubs[i]); err != nil {
					failed.Store(&err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reg/s")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
	// The process's CPU time (control, NATS and the clients alike) per
	// registration: what the machine's load does not change as much as
	// it changes reg/s on two shared cores.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/reg")
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// registerLight is RegisterOver without decoding the peers of the answer
// (a node decodes its own; here every client shares the benchmark's two
// cores with control, and decoding ~115 peers per registration would
// measure encoding/json instead).
func registerLight(ctx context.Context, nc *nats.Conn, j controlapi.Join, pub key.Public) error {
	type light struct {
		Challenge *controlapi.Challenge `json:"challenge"`
		NodeID    string                `json:"node_id"`
		Error     *controlapi.Error     `json:"error"`
	}
	ask := func(req *controlapi.RegisterRequest) (*light, error) {
		body, _ := json.Marshal(req)
		m, err := nc.RequestWithContext(ctx, controlapi.SubjectRegister, body)
		if err != nil {
			return nil, err
		}
		var l light
		if err := json.Unmarshal(m.Data, &l); err != nil {
			return nil, err
		}
		if l.Error != nil {
			return nil, l.Error
		}
		return &l, nil
	}
	req := &controlapi.RegisterRequest{Token: j.Token, Name: j.Name, PublicKey: pub, SharedEvents: true}
	first, err := ask(req)
	if err != nil {
		return err
	}
	req.Challenge = first.Challenge
	if req.Proof, err = controlapi.ProveKey(j.Key, first.Challenge, j.Name); err != nil {
		return err
	}
	resp, err := ask(req)
	if err == nil && resp.NodeID == "" {
		err = errors.New("registration answered without a node ID")
	}
	return err
}

// waitReplicasCurrent waits until every replica of stream has caught up
// with its leader, so that followers replaying the pre-filled registry
// are not measured as the registrations' cost.
func waitReplicasCurrent(b *testing.B, ctx context.Context, nc *nats.Conn, stream string) {
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	require.Eventually(b, func() bool {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) == 0 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag > 0 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond, "the stream's replicas catch up")
}
