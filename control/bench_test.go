package control

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
)

// BenchmarkRegister measures registrations per second over NATS on
// loopback: a joining client's two requests (challenge, proof of key),
// token check, address allocation,
// a registry write (file store: fsync per write; kv: JetStream), peer
// events to every registered node, and the reply.
func BenchmarkRegister(b *testing.B) {
	for _, store := range []string{"file", "kv"} {
		b.Run(store, func(b *testing.B) {
			cfg := Config{Tokens: []JoinToken{{Value: testToken}}, EmbeddedNATS: &EmbeddedNATSConfig{Listen: "127.0.0.1:0"}}
			if store == "file" {
				st, err := OpenFileStore(filepath.Join(b.TempDir(), "r.json"))
				if err != nil {
					b.Fatal(err)
				}
				cfg.Store = st
			} else {
				cfg.KVBucket = "bench"
				cfg.EmbeddedNATS.StoreDir = b.TempDir()
			}
			srv, err := New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			nc, err := nats.Connect(srv.NATS().URL(), nats.SetCustomDialer(Dialer(netx.OS)),
				nats.UserInfo(joinPrefix+"0123456789abcdef0123", testToken), nats.CustomInboxPrefix(InboxPrefix+"."+joinPrefix+"0123456789abcdef0123"))
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			joins := make([]Join, b.N)
			for i := range joins {
				k := key.NewPrivate()
				joins[i] = Join{Token: testToken, Name: "n" + nodeID(k.Public())[1:9], Key: k}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.ResetTimer()
			for i := range b.N {
				if _, err := RegisterOver(ctx, nc, joins[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reg/s")
		})
	}
}
