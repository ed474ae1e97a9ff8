package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frames cuts a stream of size bytes from off into frames of n bytes.
func frames(t *testing.T, off, size int64, n int) []byte {
	t.Helper()
	var b []byte
	p := make([]byte, n)
	for ; off < size; off += int64(n) {
		m := int(min(int64(n), size-off))
		streamPattern(p[:m], off)
		b = appendStreamFrame(b, off, p[:m])
	}
	return b
}

// receive reads every frame of wire into a new state of size bytes.
func receive(t *testing.T, wire []byte, size int64) *streamState {
	t.Helper()
	st := newStreamState(size, time.Unix(0, 0))
	r := bytes.NewReader(wire)
	buf := make([]byte, maxStreamFrame)
	now := time.Unix(0, 0)
	for r.Len() > 0 {
		f, err := readStreamFrame(r, buf)
		require.NoError(t, err)
		now = now.Add(time.Millisecond)
		if f.end {
			_, err := st.end(f)
			require.NoError(t, err)
			continue
		}
		require.NoError(t, st.data(f, now))
	}
	return st
}

// TestStreamStateCounts: the receiver counts each byte offset once as
// received, lost or corrupted, and bytes sent twice as duplicated (and
// dropped); only a stream with every byte intact matches the sender's
// SHA-256.
func TestStreamStateCounts(t *testing.T) {
	const size = 10000
	sum := streamSum(size)
	cases := []struct {
		name                 string
		wire                 []byte
		lost, dup, bad, recv int64
		ok                   bool
	}{
		{name: "exact", wire: frames(t, 0, size, 1000), recv: size, ok: true},
		{name: "resumed with an overlap", wire: append(frames(t, 0, 4000, 1000), frames(t, 3500, size, 1000)...), dup: 500, recv: size, ok: true},
		{name: "resumed past the receiver", wire: append(frames(t, 0, 4000, 1000), frames(t, 4500, size, 1000)...), lost: 500, recv: size - 500},
		{name: "a corrupted frame", wire: func() []byte {
			w := frames(t, 0, size, 1000)
			w[streamHeaderLen+3] ^= 1 // the first frame's payload
			return w
		}(), bad: 1000, recv: size - 1000},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			st := receive(t, appendEndFrame(append([]byte(nil), tt.wire...), size, sum), size)
			assert.Equal(t, tt.lost, st.lost, "lost")
			assert.Equal(t, tt.dup, st.dup, "duplicated")
			assert.Equal(t, tt.bad, st.bad, "corrupted")
			assert.Equal(t, tt.recv, st.got-st.lost-st.bad, "received")
			assert.Equal(t, tt.ok, st.shaOK, "SHA-256 matches only a stream with every byte intact (duplicates are dropped before the hash)")
		})
	}
}

// TestStreamStateStall: the longest gap between arrivals is the stall,
// dated when it ended.
func TestStreamStateStall(t *testing.T) {
	start := time.Unix(100, 0)
	st := newStreamState(3000, start)
	p := make([]byte, 1000)
	for i, at := range []time.Duration{10 * time.Millisecond, 3 * time.Second, 3100 * time.Millisecond} {
		streamPattern(p, int64(i*1000))
		f := streamFrame{off: int64(i * 1000), n: 1000, sum: sha256.Sum256(p), data: p}
		require.NoError(t, st.data(f, start.Add(at)))
	}
	assert.Equal(t, 2990*time.Millisecond, st.maxStall)
	assert.Equal(t, 3*time.Second, st.stallAt)
}

// TestStreamFrameErrors: frames that break the format are refused with
// the reason, never taken.
func TestStreamFrameErrors(t *testing.T) {
	buf := make([]byte, maxStreamFrame)
	big := make([]byte, streamHeaderLen)
	big[11] = 0xff // length 255 is fine; make it too long
	big[9] = 0xff
	_, err := readStreamFrame(bytes.NewReader(big), buf)
	assert.ErrorIs(t, err, errFrame)
	assert.ErrorContains(t, err, "bytes of payload")

	zero := make([]byte, streamHeaderLen)
	_, err = readStreamFrame(bytes.NewReader(zero), buf)
	assert.ErrorIs(t, err, errFrame)

	st := newStreamState(100, time.Unix(0, 0))
	f, err := readStreamFrame(bytes.NewReader(frames(t, 50, 200, 100)), buf)
	require.NoError(t, err)
	assert.ErrorContains(t, st.data(f, time.Unix(1, 0)), "past the stream's 100")
	_, err = st.end(streamFrame{off: 99, end: true})
	assert.ErrorContains(t, err, "the end at 99")
}

// FuzzStreamFrames feeds arbitrary bytes to the receiver's parser and
// state: no panic, and every byte offset accounted once.
func FuzzStreamFrames(f *testing.F) {
	var seed testing.T
	f.Add(frames(&seed, 0, 3000, 1000))
	f.Add(appendEndFrame(frames(&seed, 0, 3000, 1000), 3000, streamSum(3000)))
	f.Add(append(frames(&seed, 0, 2000, 1000), frames(&seed, 1500, 3000, 700)...))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, wire []byte) {
		const size = 3000
		st := newStreamState(size, time.Unix(0, 0))
		r := bytes.NewReader(wire)
		buf := make([]byte, maxStreamFrame)
		for {
			fr, err := readStreamFrame(r, buf)
			if err != nil {
				break
			}
			if fr.end {
				_, _ = st.end(fr)
				break
			}
			if st.data(fr, time.Unix(1, 0)) != nil {
				break
			}
		}
		if st.got > size || st.lost < 0 || st.dup < 0 || st.bad < 0 || st.lost+st.bad > st.got {
			t.Fatalf("accounting broken: got %d lost %d dup %d bad %d", st.got, st.lost, st.dup, st.bad)
		}
		if st.shaOK && (st.got != size || st.lost+st.bad != 0) {
			t.Fatalf("SHA-256 ok on an incomplete stream: got %d lost %d bad %d", st.got, st.lost, st.bad)
		}
	})
}

// TestReadResumeOffset: the sender takes the receiver's offset only from 0
// to the stream's size; one of 2^63 or more is not read as negative.
func TestReadResumeOffset(t *testing.T) {
	for _, tc := range []struct {
		off  uint64
		want int64
		err  string
	}{
		{0, 0, ""},
		{1000, 1000, ""},
		{1001, 0, "the receiver is at 1001 of 1000 bytes"},
		{1 << 63, 0, "the receiver is at 9223372036854775808 of 1000 bytes"},
		{math.MaxUint64, 0, "the receiver is at 18446744073709551615 of 1000 bytes"},
	} {
		off, err := readResumeOffset(bytes.NewReader(binary.BigEndian.AppendUint64(nil, tc.off)), 1000)
		if tc.err != "" {
			require.ErrorIs(t, err, errStreamFailed, "offset %d", tc.off)
			assert.Contains(t, err.Error(), tc.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, off)
	}
	_, err := readResumeOffset(bytes.NewReader([]byte{1, 2}), 1000)
	assert.ErrorContains(t, err, "read the receiver's offset")
}
