package fabric

import (
	"crypto/sha256"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/vtime"
	"github.com/latticelab/lattice/netx/netxtest"
)

// TestTCPLossAtZeroLatency: bulk TCP between lab hosts over links with no
// delay but with loss, in virtual time. Every round trip takes exactly no
// time there, and a loss recovery that marks segments lost by elapsed
// time (RACK, its reorder window a quarter of a zero RTT) ping-pongs with
// the receiver at one instant, so the clock never moves again (a node
// test stopped so in CI). The transfer must finish with the clock moving.
func TestTCPLossAtZeroLatency(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	for _, loss := range []float64{0.01, 0.05} {
		dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name(), Timeout: 30 * time.Second, BusyTimeout: 60 * time.Second})
		synctest.Test(t, func(t *testing.T) {
			t.Cleanup(dog.Pulse())
			w := newWorld(t, Config{Seed: 7})
			s := w.addSite(t, profile(t, "full-cone"), 1)
			h := s.hosts[0]
			for _, ifc := range []*Interface{h.FabricInterfaces()[0], s.router.Uplink()} {
				require.NoError(t, ifc.SetImpairments(Egress, link.Impairments{Loss: loss}))
				require.NoError(t, ifc.SetImpairments(Ingress, link.Impairments{Loss: loss}))
			}
			l, err := w.server.Listen(t.Context(), "tcp", ":9")
			require.NoError(t, err)
			defer l.Close()
			sum := netxtest.SinkDigest(l)
			c, err := h.Dial(ctxT(t, 10*time.Second), "tcp", netip.AddrPortFrom(serverIP, 9).String())
			require.NoError(t, err)
			data := make([]byte, 8<<20)
			for i := range data {
				data[i] = byte(i*31 + i>>8)
			}
			start := time.Now()
			_, err = c.Write(data)
			require.NoError(t, err)
			cw, ok := c.(interface{ CloseWrite() error })
			require.True(t, ok, "%T has no CloseWrite", c)
			require.NoError(t, cw.CloseWrite())
			select {
			case got := <-sum:
				assert.Equal(t, sha256.Sum256(data), got)
			case <-time.After(10 * time.Minute):
				t.Fatal("8 MiB did not arrive within 10 min of network time")
			}
			t.Logf("loss %.0f%%: 8 MiB in %v of network time", loss*100, time.Since(start))
			_ = c.Close()
		})
		require.NoError(t, dog.Stop())
	}
}
