package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dataPacket is a WireGuard transport message carrying data, tagged tag.
func dataPacket(tag byte) []byte {
	b := make([]byte, transportMin+16)
	b[0], b[transportMin] = 4, tag
	return b
}

// TestKeepForReplay: the ring keeps the last replayLen data packets sent,
// across batches, oldest first, and nothing else (keepalives, handshakes).
func TestKeepForReplay(t *testing.T) {
	p := &Path{}
	keepalive := make([]byte, transportMin)
	keepalive[0] = 4
	init, _ := handshakeMessages()

	p.keepForReplay([][]byte{keepalive, init})
	assert.Nil(t, p.replay.Load(), "no data sent: no ring")

	var batch [][]byte
	for i := range 20 {
		batch = append(batch, dataPacket(byte(i)))
		if i%5 == 0 {
			batch = append(batch, keepalive)
		}
	}
	p.keepForReplay(batch)
	tags := func() []byte {
		var out []byte
		for _, b := range p.replay.Load().recent(time.Now().UnixNano()) {
			out = append(out, b[transportMin])
		}
		return out
	}
	assert.Equal(t, []byte{12, 13, 14, 15, 16, 17, 18, 19}, tags(), "the last 8 of a long batch")

	p.keepForReplay([][]byte{dataPacket(20), keepalive, dataPacket(21)})
	assert.Equal(t, []byte{14, 15, 16, 17, 18, 19, 20, 21}, tags(), "a later batch goes after")

	batch[len(batch)-1][transportMin] = 99
	assert.Equal(t, []byte{14, 15, 16, 17, 18, 19, 20, 21}, tags(), "the ring keeps copies")
	require.Empty(t, p.replay.Load().recent(time.Now().Add(replayFor+time.Second).UnixNano()), "too old to send again")
}

// BenchmarkKeepForReplay: the ring's cost per packet sent, in batches of
// 45 full-size data packets (a 64 KB segment from the agent's TUN).
func BenchmarkKeepForReplay(b *testing.B) {
	p := &Path{}
	batch := make([][]byte, 45)
	for i := range batch {
		batch[i] = make([]byte, 1452)
		batch[i][0] = 4
	}
	b.SetBytes(int64(len(batch) * 1452))
	b.ResetTimer()
	for b.Loop() {
		p.keepForReplay(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/packet")
}
