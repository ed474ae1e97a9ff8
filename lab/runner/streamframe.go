package runner

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// A stream (the stream step) is a sequence of frames on a TCP connection,
// after the receiver has told the sender, in 8 bytes, the offset it has
// checked up to; the sender resumes there. A frame is
//
//	offset  uint64  where its payload starts in the stream
//	length  uint32  payload bytes, at most maxStreamFrame; endFrame marks
//	                the last frame, which has no payload
//	sum     [32]byte SHA-256 of the payload; in the end frame, of the
//	                whole stream
//	payload [length]byte
//
// and the receiver answers the end frame with one byte: 1 if it holds
// every byte and the sums match, else 0.
const (
	streamHeaderLen = 8 + 4 + sha256.Size
	maxStreamFrame  = 64 << 10
	endFrame        = ^uint32(0)
)

// errFrame marks a frame that breaks the format; the receiver hangs up.
var errFrame = errors.New("bad stream frame")

// streamFrame is a decoded frame header; end marks the end frame.
type streamFrame struct {
	off  int64
	n    int
	sum  [sha256.Size]byte
	end  bool
	data []byte
}

// readStreamFrame reads one frame into buf (at least maxStreamFrame).
func readStreamFrame(r io.Reader, buf []byte) (streamFrame, error) {
	var hdr [streamHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return streamFrame{}, err
	}
	off := binary.BigEndian.Uint64(hdr[:8])
	n := binary.BigEndian.Uint32(hdr[8:12])
	f := streamFrame{off: int64(off), end: n == endFrame}
	copy(f.sum[:], hdr[12:])
	switch {
	case off > 1<<62:
		return f, fmt.Errorf("%w: offset %d", errFrame, off)
	case f.end:
		return f, nil
	case n == 0 || n > maxStreamFrame:
		return f, fmt.Errorf("%w: %d bytes of payload, want 1 to %d", errFrame, n, maxStreamFrame)
	}
	f.n = int(n)
	f.data = buf[:n]
	if _, err := io.ReadFull(r, f.data); err != nil {
		return f, err
	}
	return f, nil
}

// appendStreamFrame appends a data frame for payload at off.
func appendStreamFrame(b []byte, off int64, payload []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	sum := sha256.Sum256(payload)
	b = append(b, sum[:]...)
	return append(b, payload...)
}

// appendEndFrame appends the end frame of a stream of size bytes whose
// SHA-256 is sum.
func appendEndFrame(b []byte, size int64, sum [sha256.Size]byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = binary.BigEndian.AppendUint32(b, endFrame)
	return append(b, sum[:]...)
}

// streamState is what a stream's receiver has checked: every byte offset
// below got was accepted intact, counted corrupted, or counted lost.
// It holds no lock; the sink guards it.
type streamState struct {
	size   int64
	got    int64
	h      hash.Hash // of the bytes below got, as they arrived
	broken bool      // a gap: h covers no longer the stream
	lost   int64
	dup    int64
	bad    int64
	done   bool
	shaOK  bool

	start, last       time.Time
	maxStall, stallAt time.Duration
}

func newStreamState(size int64, start time.Time) *streamState {
	return &streamState{size: size, h: sha256.New(), start: start, last: start}
}

// data takes a data frame that arrived at now.
func (s *streamState) data(f streamFrame, now time.Time) error {
	if f.off+int64(f.n) > s.size {
		return fmt.Errorf("%w: %d bytes at %d, past the stream's %d", errFrame, f.n, f.off, s.size)
	}
	payload, off := f.data, f.off
	if off > s.got { // bytes never sent: a sender resuming past the receiver
		s.lost += off - s.got
		s.got, s.broken = off, true
	}
	if off < s.got { // bytes sent twice
		overlap := min(off+int64(len(payload)), s.got) - off
		s.dup += overlap
		payload = payload[overlap:]
	}
	if len(payload) == 0 {
		return nil
	}
	if sha256.Sum256(f.data) != f.sum {
		s.bad += int64(len(payload))
	}
	s.h.Write(payload)
	s.got += int64(len(payload))
	if gap := now.Sub(s.last); gap > s.maxStall {
		s.maxStall, s.stallAt = gap, now.Sub(s.start)
	}
	s.last = now
	return nil
}

// end takes the end frame; it reports whether the stream is complete and
// intact.
func (s *streamState) end(f streamFrame) (bool, error) {
	if f.off != s.size {
		return false, fmt.Errorf("%w: the end at %d, the stream has %d bytes", errFrame, f.off, s.size)
	}
	s.done = s.got == s.size
	var sum [sha256.Size]byte
	s.h.Sum(sum[:0])
	s.shaOK = s.done && !s.broken && s.bad == 0 && sum == f.sum
	return s.shaOK, nil
}

// streamPattern fills p with the stream's bytes from offset off: a
// deterministic sequence that does not repeat within a frame, so a
// misplaced frame fails its offset's check.
func streamPattern(p []byte, off int64) {
	for i := range p {
		x := uint64(off) + uint64(i)
		w := (x >> 3) * 0x9E3779B97F4A7C15
		w ^= w >> 29
		p[i] = byte(w >> (8 * (x & 7)))
	}
}

// streamSum is the SHA-256 of a stream of size bytes.
func streamSum(size int64) [sha256.Size]byte {
	h := sha256.New()
	buf := make([]byte, maxStreamFrame)
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		streamPattern(buf[:n], off)
		h.Write(buf[:n])
		off += int64(n)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
