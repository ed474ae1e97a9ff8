package node

import (
	"encoding/binary"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/internal/inet"
)

// fakeTUN hands out queued packets on Read and records Writes.
type fakeTUN struct {
	in      chan []byte
	mu      sync.Mutex
	written [][]byte
}

func (f *fakeTUN) File() *os.File           { return nil }
func (f *fakeTUN) MTU() (int, error)        { return 1420, nil }
func (f *fakeTUN) Name() (string, error)    { return "fake0", nil }
func (f *fakeTUN) Events() <-chan tun.Event { return nil }
func (f *fakeTUN) BatchSize() int           { return 1 }
func (f *fakeTUN) Close() error             { return nil }
func (f *fakeTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	p := <-f.in
	sizes[0] = copy(bufs[0][offset:], p)
	return 1, nil
}

func (f *fakeTUN) Write(bufs [][]byte, offset int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range bufs {
		f.written = append(f.written, append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}

func (f *fakeTUN) writes() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.written...)
}

// ipv4 builds an IPv4 packet from src to dst carrying payload.
func ipv4(src, dst string, proto byte, fragOff uint16, payload []byte) []byte {
	p := make([]byte, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(len(p)))
	binary.BigEndian.PutUint16(p[6:8], fragOff)
	p[8], p[9] = 64, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[12:16], s[:])
	copy(p[16:20], d[:])
	binary.BigEndian.PutUint16(p[10:12], inet.Checksum(p[:20]))
	copy(p[20:], payload)
	return p
}

func TestUnreachableTUN(t *testing.T) {
	const self, gone, up = "100.64.0.1", "100.64.1.3", "100.64.1.4"
	syn := make([]byte, 20) // a TCP header: ports, seq, SYN
	binary.BigEndian.PutUint16(syn[0:2], 40000)
	binary.BigEndian.PutUint16(syn[2:4], 7)
	binary.BigEndian.PutUint32(syn[4:8], 0x01020304)
	syn[12], syn[13] = 5<<4, 0x02
	icmpErr := []byte{3, 3, 0, 0, 0, 0, 0, 0}
	tests := []struct {
		name      string
		pkt       []byte
		wantPass  bool
		wantReply bool
	}{
		{"TCP to an offline peer", ipv4(self, gone, 6, 0, syn), false, true},
		{"UDP to an offline peer", ipv4(self, gone, 17, 0, []byte{1, 2, 3, 4, 0, 12, 0, 0, 'h', 'i', '!', '!'}), false, true},
		{"TCP to an online peer", ipv4(self, up, 6, 0, syn), true, false},
		{"ICMP error to an offline peer: dropped, not answered", ipv4(self, gone, 1, 0, icmpErr), false, false},
		{"a later fragment to an offline peer: dropped, not answered", ipv4(self, gone, 17, 100, syn), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTUN{in: make(chan []byte, 1)}
			u := newUnreachableTUN(f)
			defer u.Close()
			u.setOffline(netip.MustParseAddr(gone), true)
			u.setOffline(netip.MustParseAddr(up), true)
			u.setOffline(netip.MustParseAddr(up), false)

			f.in <- tt.pkt
			bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
			n, err := u.Read(bufs, sizes, device.MessageTransportHeaderSize)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			if tt.wantPass {
				assert.Equal(t, tt.pkt, bufs[0][device.MessageTransportHeaderSize:device.MessageTransportHeaderSize+sizes[0]])
			} else {
				assert.Zero(t, sizes[0], "WireGuard skips an empty packet")
			}
			if !tt.wantReply {
				require.Never(t, func() bool { return len(f.writes()) > 0 }, 50*time.Millisecond, 5*time.Millisecond)
				return
			}
			require.Eventually(t, func() bool { return len(f.writes()) == 1 }, time.Second, time.Millisecond)
			r := f.writes()[0]
			require.Len(t, r, 20+8+28)
			assert.Zero(t, inet.Checksum(r[:20]), "IPv4 header checksum")
			assert.Equal(t, uint16(len(r)), binary.BigEndian.Uint16(r[2:4]))
			assert.Equal(t, byte(1), r[9], "ICMP")
			assert.Equal(t, netip.MustParseAddr(gone).AsSlice(), r[12:16], "from the offline peer's address")
			assert.Equal(t, netip.MustParseAddr(self).AsSlice(), r[16:20])
			assert.Equal(t, []byte{3, 1}, r[20:22], "destination unreachable: host")
			assert.Zero(t, inet.Checksum(r[20:]), "ICMP checksum")
			assert.Equal(t, tt.pkt[:28], r[28:], "quotes the header and 64 bits of data")
		})
	}
}
