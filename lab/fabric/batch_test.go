package fabric

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// batchConn is what the node's mux asserts a lab socket to be
// (node/batchconn.go).
type batchConn interface {
	ReadBatchFrom(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error)
	WriteBatchTo(bufs [][]byte, addr netip.AddrPort) error
}

// batchSockets opens a socket on port txPort of a host behind a full-cone
// NAT and one on the server's rxPort; both close at cleanup.
func batchSockets(t *testing.T, txPort, rxPort uint16) (w *world, h *Host, tx, rx net.PacketConn) {
	t.Helper()
	w = newWorld(t, Config{})
	h = w.addSite(t, profile(t, "full-cone"), 1).hosts[0]
	ctx := ctxT(t, 5*time.Second)
	tx, err := h.ListenPacket(ctx, "udp4", fmt.Sprintf(":%d", txPort))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Close() })
	rx, err = w.server.ListenPacket(ctx, "udp4", netip.AddrPortFrom(serverIP, rxPort).String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rx.Close() })
	return w, h, tx, rx
}

// A batch crosses a NAT router in order, every datagram intact, and a
// batch read drains what is queued in one call.
func TestUDPBatchThroughNAT(t *testing.T) {
	w, _, tx, rx := batchSockets(t, 4000, 5000)
	btx, ok := tx.(batchConn)
	require.True(t, ok, "a lab socket batches")
	brx := rx.(batchConn)

	var bufs [][]byte
	for i := range 40 {
		bufs = append(bufs, fmt.Appendf(nil, "datagram %02d %s", i, make([]byte, i*30)))
	}
	require.NoError(t, btx.WriteBatchTo(bufs, netip.AddrPortFrom(serverIP, 5000)))

	in := make([][]byte, 64)
	for i := range in {
		in[i] = make([]byte, 2048)
	}
	sizes, from := make([]int, len(in)), make([]netip.AddrPort, len(in))
	var got []string
	require.NoError(t, rx.SetReadDeadline(time.Now().Add(2*time.Second)))
	for len(got) < len(bufs) {
		n, err := brx.ReadBatchFrom(in, sizes, from)
		require.NoError(t, err)
		require.Positive(t, n)
		for i := range n {
			got = append(got, string(in[i][:sizes[i]]))
			assert.Equal(t, netip.MustParseAddrPort("203.0.113.10:4000"), from[i], "the NAT's full-cone mapping keeps the port")
		}
	}
	for i, b := range bufs {
		assert.Equal(t, string(b), got[i], "datagram %d", i)
	}
	st := w.sites[0].router.Stats()
	assert.Equal(t, uint64(len(bufs)), st.Forwarded)
}

func TestUDPBatchErrors(t *testing.T) {
	_, h, tx, rx := batchSockets(t, 4001, 5001)
	ctx := ctxT(t, 5*time.Second)
	dst := netip.AddrPortFrom(serverIP, 5001)

	t.Run("too big midway: the ones before are sent", func(t *testing.T) {
		err := tx.(batchConn).WriteBatchTo([][]byte{[]byte("one"), []byte("two"), make([]byte, 1473), []byte("four")}, dst)
		require.ErrorIs(t, err, syscall.EMSGSIZE)
		var oe *net.OpError
		require.ErrorAs(t, err, &oe)
		in, sizes, from := [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}, make([]int, 3), make([]netip.AddrPort, 3)
		require.NoError(t, rx.SetReadDeadline(time.Now().Add(2*time.Second)))
		var got []string
		for len(got) < 2 {
			n, err := rx.(batchConn).ReadBatchFrom(in, sizes, from)
			require.NoError(t, err)
			for i := range n {
				got = append(got, string(in[i][:sizes[i]]))
			}
		}
		assert.Equal(t, []string{"one", "two"}, got)
	})
	t.Run("truncated to the buffer", func(t *testing.T) {
		require.NoError(t, tx.(batchConn).WriteBatchTo([][]byte{[]byte("0123456789")}, dst))
		in, sizes, from := [][]byte{make([]byte, 4)}, make([]int, 1), make([]netip.AddrPort, 1)
		require.NoError(t, rx.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, err := rx.(batchConn).ReadBatchFrom(in, sizes, from)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		assert.Equal(t, "0123", string(in[0][:sizes[0]]))
	})
	t.Run("deadline", func(t *testing.T) {
		require.NoError(t, rx.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		in, sizes, from := [][]byte{make([]byte, 4)}, make([]int, 1), make([]netip.AddrPort, 1)
		_, err := rx.(batchConn).ReadBatchFrom(in, sizes, from)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	})
	t.Run("connected socket refuses WriteBatchTo", func(t *testing.T) {
		c, err := h.Dial(ctx, "udp4", dst.String())
		require.NoError(t, err)
		defer c.Close()
		err = c.(batchConn).WriteBatchTo([][]byte{[]byte("x")}, dst)
		require.ErrorIs(t, err, net.ErrWriteToConnected)
	})
	t.Run("closed", func(t *testing.T) {
		c, err := h.ListenPacket(ctx, "udp4", ":0")
		require.NoError(t, err)
		require.NoError(t, c.Close())
		require.ErrorIs(t, c.(batchConn).WriteBatchTo([][]byte{[]byte("x")}, dst), net.ErrClosed)
		_, err = c.(batchConn).ReadBatchFrom([][]byte{make([]byte, 4)}, make([]int, 1), make([]netip.AddrPort, 1))
		require.ErrorIs(t, err, net.ErrClosed)
	})
}
