package netstack

import (
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx/netxtest"
)

// TestWireGuardTransfer sends 32 MiB from one Stack to the other through
// two wireguard-go devices and checks what arrived by its SHA-256, which
// the receiver sends back. It also checks that the data path split and
// coalesced segments on the way.
func TestWireGuardTransfer(t *testing.T) {
	const size = 32 << 20
	a, b := wgPair(t)
	ctx := ctxT(t, time.Minute)
	ln, err := b.Listen(ctx, "tcp", netip.AddrPortFrom(addrB.Addr(), 443).String())
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		h := sha256.New()
		if _, err := io.CopyN(h, c, size); err != nil {
			served <- err
			return
		}
		_, err = c.Write(h.Sum(nil))
		served <- err
	}()

	c, err := a.Dial(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	want := sha256.Sum256(payload)
	start := time.Now()
	_, err = c.Write(payload)
	require.NoError(t, err)
	got := make([]byte, sha256.Size)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	elapsed := time.Since(start)
	require.NoError(t, <-served)
	assert.Equal(t, want[:], got, "the receiver saw different data")

	sa, sb := a.TUN().Stats(), b.TUN().Stats()
	t.Logf("%.2f Gbit/s; sender %+v; receiver %+v", float64(size)*8/elapsed.Seconds()/1e9, sa, sb)
	assert.Greater(t, sa.OutSegments, 2*sa.OutPackets, "gVisor's segments were not split: no GSO")
	assert.Greater(t, sb.InCoalesced, sb.InPackets/4, "received segments were not coalesced: no GRO")
	assert.Zero(t, sa.OutDropped+sb.OutDropped+sa.InDropped+sb.InDropped, "dropped packets")
}

// TestConformance runs the netx conformance suite on Stacks.
func TestConformance(t *testing.T) {
	env := func(a, b *Stack) netxtest.Env {
		return netxtest.Env{
			Server: b, Client: a,
			ServerAddr: b.Address().Addr(), ClientAddr: a.Address().Addr(),
			// Nobody has this address: WireGuard has no peer for it,
			// and a wired Stack that is not it drops what it gets.
			Blackhole: netip.AddrPortFrom(netip.MustParseAddr(blackholeFor(b.Address())), 80),
		}
	}
	t.Run("wireguard", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env { return env(wgPair(t)) })
	})
	t.Run("wired", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env { return env(wiredPair(t, addrA, addrB)) })
	})
	t.Run("wired-ipv6", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env { return env(wiredPair(t, addrA6, addrB6)) })
	})
	t.Run("one-stack", func(t *testing.T) {
		netxtest.Run(t, func(t *testing.T) netxtest.Env {
			s := newStack(t, addrA)
			return netxtest.Env{Server: s, Client: s, ServerAddr: addrA.Addr(), ClientAddr: addrA.Addr()}
		})
	})
}

var (
	addrA6 = netip.MustParsePrefix("fd7a:115c:a1e0::2/48")
	addrB6 = netip.MustParsePrefix("fd7a:115c:a1e0::3/48")
)

func blackholeFor(p netip.Prefix) string {
	if p.Addr().Is4() {
		return blackhole.Addr().String()
	}
	return "fd7a:115c:a1e0::c8"
}

// wiredPair returns two Stacks joined back to back (see wire).
func wiredPair(t testing.TB, pa, pb netip.Prefix) (*Stack, *Stack) {
	t.Helper()
	a, b := newStack(t, pa), newStack(t, pb)
	wire(t, a.TUN(), b.TUN())
	return a, b
}

// TestWiredTransfer moves data both ways at once over IPv4 and IPv6
// between wired Stacks, exercising GSO and GRO for both families.
func TestWiredTransfer(t *testing.T) {
	for _, fam := range []struct {
		name   string
		pa, pb netip.Prefix
	}{{"ipv4", addrA, addrB}, {"ipv6", addrA6, addrB6}} {
		t.Run(fam.name, func(t *testing.T) {
			const size = 8 << 20
			a, b := wiredPair(t, fam.pa, fam.pb)
			ctx := ctxT(t, time.Minute)
			ln, err := b.Listen(ctx, "tcp", netip.AddrPortFrom(fam.pb.Addr(), 7).String())
			require.NoError(t, err)
			defer ln.Close()
			// The server echoes everything back.
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
			c, err := a.Dial(ctx, "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
			payload := make([]byte, size)
			_, _ = rand.Read(payload)
			wrote := make(chan error, 1)
			go func() {
				_, err := c.Write(payload)
				wrote <- err
			}()
			got := make([]byte, size)
			_, err = io.ReadFull(c, got)
			require.NoError(t, err)
			require.NoError(t, <-wrote)
			assert.Equal(t, sha256.Sum256(payload), sha256.Sum256(got))
			assert.Positive(t, b.TUN().Stats().InCoalesced)
			assert.Positive(t, a.TUN().Stats().InCoalesced)
		})
	}
}
