package pcapng

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll decodes a whole capture.
func readAll(t *testing.T, b []byte) (*Reader, []Packet) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	var pkts []Packet
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r, pkts
		}
		require.NoError(t, err)
		pkts = append(pkts, p)
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{Comment: "scenario: symmetric NAT"})
	require.NoError(t, err)

	ifcs := []Interface{
		{Name: "nat-a/wan", Description: "NAT A public side"},
		{Name: "nat-a/lan", LinkType: LinkTypeEthernet, SnapLen: 64},
	}
	for i, ifc := range ifcs {
		id, err := w.AddInterface(ifc)
		require.NoError(t, err)
		require.Equal(t, i, id)
	}

	at := time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC)
	big := bytes.Repeat([]byte{0xab}, 100)
	tests := []struct {
		name string
		in   Packet
		want Packet // as Reader returns it
	}{
		{
			name: "nanoseconds, inbound, comment",
			in:   Packet{Interface: 0, Time: at, Data: []byte{0x45, 1, 2}, Dir: DirInbound, Comment: "mapped"},
			want: Packet{Interface: 0, Time: at, Data: []byte{0x45, 1, 2}, OrigLen: 3, Dir: DirInbound, Comment: "mapped"},
		},
		{
			name: "outbound, no comment",
			in:   Packet{Interface: 0, Time: at.Add(time.Nanosecond), Data: []byte{0x60, 0, 0, 0}, Dir: DirOutbound},
			want: Packet{Interface: 0, Time: at.Add(time.Nanosecond), Data: []byte{0x60, 0, 0, 0}, OrigLen: 4, Dir: DirOutbound},
		},
		{
			name: "no options at all",
			in:   Packet{Interface: 1, Time: at, Data: []byte{1, 2, 3, 4, 5}},
			want: Packet{Interface: 1, Time: at, Data: []byte{1, 2, 3, 4, 5}, OrigLen: 5},
		},
		{
			name: "truncated to SnapLen",
			in:   Packet{Interface: 1, Time: at, Data: big, Comment: "dropped by address-and-port-dependent filtering: no mapping for udp"},
			want: Packet{Interface: 1, Time: at, Data: big[:64], OrigLen: 100, Comment: "dropped by address-and-port-dependent filtering: no mapping for udp"},
		},
		{
			name: "OrigLen beyond captured data",
			in:   Packet{Interface: 0, Time: at, Data: big[:10], OrigLen: 1500, Dir: DirOutbound},
			want: Packet{Interface: 0, Time: at, Data: big[:10], OrigLen: 1500, Dir: DirOutbound},
		},
		{
			name: "empty packet, unicode comment",
			in:   Packet{Interface: 0, Time: at, Comment: "Zürich → 東京"},
			want: Packet{Interface: 0, Time: at, Data: []byte{}, Comment: "Zürich → 東京"},
		},
		{
			name: "long comment cut at a character boundary",
			in:   Packet{Interface: 0, Time: at, Data: []byte{0x45}, Comment: strings.Repeat("é", 40000)},
			want: Packet{Interface: 0, Time: at, Data: []byte{0x45}, OrigLen: 1, Comment: strings.Repeat("é", 32767)},
		},
		{
			name: "Unix epoch",
			in:   Packet{Interface: 0, Time: time.Unix(0, 0), Data: []byte{0x45}},
			want: Packet{Interface: 0, Time: time.Unix(0, 0).UTC(), Data: []byte{0x45}, OrigLen: 1},
		},
		{
			name: "before the epoch clamps to it",
			in:   Packet{Interface: 0, Time: time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), Data: []byte{0x45}},
			want: Packet{Interface: 0, Time: time.Unix(0, 0).UTC(), Data: []byte{0x45}, OrigLen: 1},
		},
		{
			name: "after 2554 clamps to the last nanosecond a uint64 counts",
			in:   Packet{Interface: 0, Time: time.Date(2600, 1, 1, 0, 0, 0, 0, time.UTC), Data: []byte{0x45}},
			want: Packet{Interface: 0, Time: time.Date(2554, 7, 21, 23, 34, 33, 709551615, time.UTC), Data: []byte{0x45}, OrigLen: 1},
		},
		{
			name: "local time zone comes back as UTC",
			in:   Packet{Interface: 1, Time: at.In(time.FixedZone("CET", 3600)), Data: []byte{0x45}},
			want: Packet{Interface: 1, Time: at, Data: []byte{0x45}, OrigLen: 1},
		},
	}
	for _, tt := range tests {
		require.NoError(t, w.WritePacket(tt.in), tt.name)
	}
	require.NoError(t, w.Close())

	r, got := readAll(t, buf.Bytes())
	assert.Equal(t, Options{Application: "lattice-lab", Comment: "scenario: symmetric NAT"}, r.Section())
	assert.Equal(t, []Interface{
		{Name: "nat-a/wan", Description: "NAT A public side", LinkType: LinkTypeRaw, SnapLen: DefaultSnapLen},
		{Name: "nat-a/lan", LinkType: LinkTypeEthernet, SnapLen: 64},
	}, r.Interfaces())
	require.Len(t, got, len(tests))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, got[i])
		})
	}
}

// TestEncoding pins the exact bytes of each block against the layout in
// draft-ietf-opsawg-pcapng, so Writer and Reader cannot agree on a mistake.
func TestEncoding(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{Application: "ab"})
	require.NoError(t, err)
	_, err = w.AddInterface(Interface{Name: "x"})
	require.NoError(t, err)
	require.NoError(t, w.WritePacket(Packet{
		Time: time.Unix(1, 2), Data: []byte("hello"), Dir: DirOutbound, Comment: "hi",
	}))
	require.NoError(t, w.Flush())

	want := strings.Join([]string{
		// SHB: type, length 40, magic, version 1.0, section length -1,
		// shb_userappl "ab", opt_endofopt, length.
		"0a0d0d0a 28000000 4d3c2b1a 0100 0000 ffffffffffffffff",
		"0400 0200 61620000", "00000000", "28000000",
		// IDB: type, length 40, LINKTYPE_RAW, reserved, snaplen 262144,
		// if_name "x", if_tsresol 9, opt_endofopt, length.
		"01000000 28000000 6500 0000 00000400",
		"0200 0100 78000000", "0900 0100 09000000", "00000000", "28000000",
		// EPB: type, length 60, interface 0, timestamp 1000000002 ns,
		// caplen 5, origlen 5, "hello" + 3 bytes padding, epb_flags
		// outbound, opt_comment "hi", opt_endofopt, length.
		"06000000 3c000000 00000000 00000000 02ca9a3b 05000000 05000000",
		"68656c6c6f000000", "0200 0400 02000000", "0100 0200 68690000", "00000000", "3c000000",
	}, "")
	assert.Equal(t, strings.ReplaceAll(want, " ", ""), hex.EncodeToString(buf.Bytes()))
}

func TestWriterErrors(t *testing.T) {
	long := strings.Repeat("x", 70000)
	tests := []struct {
		name    string
		do      func(w *Writer) error
		wantErr string
		is      error
	}{
		{
			name:    "unknown interface",
			do:      func(w *Writer) error { return w.WritePacket(Packet{Interface: 1}) },
			wantErr: "pcapng: write packet: interface 1: unknown interface",
			is:      ErrUnknownInterface,
		},
		{
			name:    "negative interface",
			do:      func(w *Writer) error { return w.WritePacket(Packet{Interface: -1}) },
			wantErr: "pcapng: write packet: interface -1: unknown interface",
			is:      ErrUnknownInterface,
		},
		{
			name:    "invalid direction",
			do:      func(w *Writer) error { return w.WritePacket(Packet{Dir: 3}) },
			wantErr: "pcapng: write packet: direction 3: invalid argument",
			is:      ErrInvalid,
		},
		{
			name:    "OrigLen below captured length",
			do:      func(w *Writer) error { return w.WritePacket(Packet{Data: make([]byte, 10), OrigLen: 5}) },
			wantErr: "pcapng: write packet: original length 5 with 10 bytes captured: invalid argument",
			is:      ErrInvalid,
		},
		{
			name:    "OrigLen beyond 32 bits",
			do:      func(w *Writer) error { return w.WritePacket(Packet{OrigLen: 1 << 32}) },
			wantErr: "pcapng: write packet: original length 4294967296 with 0 bytes captured: invalid argument",
			is:      ErrInvalid,
		},
		{
			name:    "negative OrigLen",
			do:      func(w *Writer) error { return w.WritePacket(Packet{OrigLen: -1}) },
			wantErr: "pcapng: write packet: original length -1 with 0 bytes captured: invalid argument",
			is:      ErrInvalid,
		},
		{
			name: "snap length too large",
			do: func(w *Writer) error {
				_, err := w.AddInterface(Interface{Name: "big", SnapLen: MaxSnapLen + 1})
				return err
			},
			wantErr: fmt.Sprintf(`pcapng: add interface "big": snap length %d exceeds %d: invalid argument`, MaxSnapLen+1, MaxSnapLen),
			is:      ErrInvalid,
		},
		{
			name: "name too long",
			do: func(w *Writer) error {
				_, err := w.AddInterface(Interface{Name: long})
				return err
			},
			wantErr: "pcapng: add interface: name is 70000 bytes, more than 65535: invalid argument",
			is:      ErrInvalid,
		},
		{
			name: "description too long",
			do: func(w *Writer) error {
				_, err := w.AddInterface(Interface{Name: "d", Description: long})
				return err
			},
			wantErr: `pcapng: add interface "d": description is 70000 bytes, more than 65535: invalid argument`,
			is:      ErrInvalid,
		},
		{
			name: "write after close",
			do: func(w *Writer) error {
				require.NoError(t, w.Close())
				return w.WritePacket(Packet{})
			},
			wantErr: "pcapng: write packet: writer closed",
			is:      ErrClosed,
		},
		{
			name: "add interface after close",
			do: func(w *Writer) error {
				require.NoError(t, w.Close())
				_, err := w.AddInterface(Interface{Name: "late"})
				return err
			},
			wantErr: `pcapng: add interface "late": writer closed`,
			is:      ErrClosed,
		},
		{
			name: "flush after close",
			do: func(w *Writer) error {
				require.NoError(t, w.Close())
				return w.Flush()
			},
			wantErr: "pcapng: flush: writer closed",
			is:      ErrClosed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWriter(io.Discard, Options{})
			require.NoError(t, err)
			_, err = w.AddInterface(Interface{Name: "only"})
			require.NoError(t, err)
			err = tt.do(w)
			require.EqualError(t, err, tt.wantErr)
			assert.ErrorIs(t, err, tt.is)
		})
	}

	t.Run("options too long", func(t *testing.T) {
		_, err := NewWriter(io.Discard, Options{Comment: long})
		require.EqualError(t, err, "pcapng: new writer: comment is 70000 bytes, more than 65535: invalid argument")
		_, err = NewWriter(io.Discard, Options{Application: long})
		require.EqualError(t, err, "pcapng: new writer: application is 70000 bytes, more than 65535: invalid argument")
	})
}

// TestFirstErrorRemembered: the fabric ignores WritePacket's result on the
// packet path and learns about problems from Flush and Close.
func TestFirstErrorRemembered(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{})
	require.NoError(t, err)
	_, err = w.AddInterface(Interface{Name: "a"})
	require.NoError(t, err)

	require.Error(t, w.WritePacket(Packet{Interface: 7}))
	require.Error(t, w.WritePacket(Packet{Interface: 0, Dir: 9}))
	require.NoError(t, w.WritePacket(Packet{Interface: 0, Data: []byte{0x45}}), "a rejected packet does not stop the writer")
	assert.Equal(t, uint64(1), w.Packets(), "rejected packets are not counted")

	const want = "pcapng: write packet: interface 7: unknown interface"
	require.EqualError(t, w.Flush(), want)
	require.EqualError(t, w.Close(), want)
	require.EqualError(t, w.Close(), want, "Close is idempotent")

	_, pkts := readAll(t, buf.Bytes())
	assert.Len(t, pkts, 1)
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestIOErrorSticky(t *testing.T) {
	diskFull := errors.New("disk full")
	w, err := NewWriter(failWriter{diskFull}, Options{}) // the header sits in the buffer
	require.NoError(t, err)
	_, err = w.AddInterface(Interface{Name: "a"})
	require.NoError(t, err)

	// Bigger than the buffer, so it goes straight to the failing writer.
	err = w.WritePacket(Packet{Data: make([]byte, 2*bufSize)})
	require.EqualError(t, err, "pcapng: write packet: disk full")
	assert.ErrorIs(t, err, diskFull)

	require.EqualError(t, w.WritePacket(Packet{Data: []byte{1}}), "pcapng: write packet: disk full")
	_, err = w.AddInterface(Interface{Name: "b"})
	require.EqualError(t, err, `pcapng: add interface "b": disk full`)
	require.EqualError(t, w.Flush(), "pcapng: write packet: disk full")
	require.EqualError(t, w.Close(), "pcapng: write packet: disk full")
}

func TestFlushError(t *testing.T) {
	w, err := NewWriter(failWriter{errors.New("broken pipe")}, Options{})
	require.NoError(t, err)
	require.EqualError(t, w.Flush(), "pcapng: flush: broken pipe")
	require.EqualError(t, w.Close(), "pcapng: flush: broken pipe")
}

func TestCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cap.pcapng")
	w, err := Create(path, Options{Application: "lab-test"})
	require.NoError(t, err)
	id, err := w.AddInterface(Interface{Name: "link0"})
	require.NoError(t, err)
	assert.Zero(t, w.Packets())
	require.NoError(t, w.WritePacket(Packet{Interface: id, Time: time.Unix(1700000000, 5), Data: []byte{0x45, 0}}))
	assert.Equal(t, uint64(1), w.Packets())
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	r, pkts := readAll(t, b)
	assert.Equal(t, "lab-test", r.Section().Application)
	assert.Equal(t, []Packet{{Time: time.Unix(1700000000, 5).UTC(), Data: []byte{0x45, 0}, OrigLen: 2}}, pkts)

	_, err = Create(filepath.Join(t.TempDir(), "missing", "cap.pcapng"), Options{})
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestConcurrentCapturePoints: several capture points share one Writer;
// every block must come out whole and each point's packets in order.
func TestConcurrentCapturePoints(t *testing.T) {
	const points, perPoint = 8, 300
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{})
	require.NoError(t, err)

	var wg sync.WaitGroup
	for g := range points {
		wg.Go(func() {
			id, err := w.AddInterface(Interface{Name: fmt.Sprintf("point-%d", g)})
			if !assert.NoError(t, err) {
				return
			}
			for i := range perPoint {
				data := fmt.Appendf(nil, "point %d packet %d", g, i)
				assert.NoError(t, w.WritePacket(Packet{
					Interface: id, Time: time.Unix(int64(i), 0), Data: data,
					Dir: Direction(i % 3), Comment: strings.Repeat("c", i%7),
				}))
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())

	r, pkts := readAll(t, buf.Bytes())
	require.Len(t, pkts, points*perPoint)
	next := make(map[string]int)
	for _, p := range pkts {
		name := r.Interfaces()[p.Interface].Name
		var g, i int
		_, err := fmt.Sscanf(string(p.Data), "point %d packet %d", &g, &i)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("point-%d", g), name)
		require.Equal(t, next[name], i, "packets of %s out of order", name)
		require.Equal(t, Direction(i%3), p.Dir)
		next[name]++
	}
}

func TestWritePacketAllocs(t *testing.T) {
	w, err := NewWriter(io.Discard, Options{})
	require.NoError(t, err)
	id, err := w.AddInterface(Interface{Name: "bench"})
	require.NoError(t, err)
	p := Packet{Interface: id, Time: time.Now(), Data: make([]byte, 1400), Dir: DirInbound, Comment: "dropped"}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkWritePacket(b *testing.B) {
	for _, bc := range []struct {
		name string
		p    Packet
	}{
		{"plain", Packet{}},
		{"dir+comment", Packet{Dir: DirInbound, Comment: "dropped by address-and-port-dependent filtering: no mapping for udp 198.51.100.9:5000 -> 203.0.113.1:40000"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w, err := NewWriter(io.Discard, Options{})
			require.NoError(b, err)
			id, err := w.AddInterface(Interface{Name: "bench"})
			require.NoError(b, err)
			p := bc.p
			p.Interface, p.Time, p.Data = id, time.Now(), make([]byte, 1400)
			b.SetBytes(int64(len(p.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WritePacket(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTimestampLimit: the last nanosecond a uint64 counts is written as
// itself, and every later time as it, not wrapped.
func TestTimestampLimit(t *testing.T) {
	last := time.Date(2554, 7, 21, 23, 34, 33, 709551615, time.UTC)
	assert.Equal(t, uint64(1<<64-1), timestamp(last))
	assert.Equal(t, uint64(1<<64-1-709551615), timestamp(last.Truncate(time.Second)))
	assert.Equal(t, uint64(1<<64-1), timestamp(last.Add(1)))
	assert.Equal(t, uint64(1<<64-1), timestamp(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)))
}
