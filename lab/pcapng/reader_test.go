package pcapng

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	leEnc = enc{binary.LittleEndian}
	beEnc = enc{binary.BigEndian}
)

// TestReaderFormats feeds Reader what other writers produce: big-endian
// sections, microsecond and binary resolutions, timestamp offsets, Simple
// Packet Blocks, blocks it must skip, and a second section.
func TestReaderFormats(t *testing.T) {
	be, le := beEnc, leEnc
	in := cat(
		be.shb(be.opt(optSHBUserAppl, []byte("be-writer")), be.opt(optComment, []byte("one")), be.opt(optComment, []byte("two"))),
		be.block(0x00000BAD, be.u32(32473), []byte("custom!!")), // custom block: skipped
		be.idb(LinkTypeRaw, 0), // no if_tsresol: microseconds
		be.idb(LinkTypeEthernet, 1500,
			be.opt(optIfName, []byte("eth0")),
			be.opt(optIfTSResol, []byte{3}), // milliseconds
			be.opt(optIfTSOffset, be.u64(100)),
			be.opt(0x7fff, []byte("unknown option"))),
		be.block(4, be.u16(0), be.u16(0)), // name resolution block: skipped
		be.epb(0, 1_500_000, []byte{0x45, 0}, 60, // 1.5 s
			be.opt(optEPBFlags, be.u32(0x01000001)), // inbound, plus a CRC error bit
			be.opt(optComment, []byte("first")),
			be.opt(optComment, []byte("second"))),
		be.epb(1, 2500, []byte{1, 2, 3}, 3, be.opt(optEPBFlags, be.u32(3))), // 102.5 s, direction 0b11
		be.block(5, be.u32(0), be.u32(0), be.u32(0)),                        // interface statistics: skipped

		le.shb(),
		le.idb(LinkTypeRaw, 4, le.opt(optIfTSResol, []byte{0x80 | 10})), // 2^-10 s
		le.epb(0, 1536, []byte{0x60}, 1),                                // 1.5 s
		le.block(blockSPB, le.u32(10), []byte("0123456789xx")),          // cut to snaplen 4
	)

	r, err := NewReader(bytes.NewReader(in))
	require.NoError(t, err)
	assert.Equal(t, Options{Application: "be-writer", Comment: "one\ntwo"}, r.Section())

	want := []Packet{
		{Interface: 0, Time: time.Unix(1, 5e8).UTC(), Data: []byte{0x45, 0}, OrigLen: 60, Dir: DirInbound, Comment: "first\nsecond"},
		{Interface: 1, Time: time.Unix(102, 5e8).UTC(), Data: []byte{1, 2, 3}, OrigLen: 3},
		{Interface: 0, Time: time.Unix(1, 5e8).UTC(), Data: []byte{0x60}, OrigLen: 1},
		{Interface: 0, Time: time.Time{}, Data: []byte("0123"), OrigLen: 10},
	}
	for i, w := range want {
		got, err := r.Next()
		require.NoError(t, err, "packet %d", i)
		assert.Equal(t, w, got, "packet %d", i)
		if i == 1 {
			assert.Equal(t, []Interface{
				{LinkType: LinkTypeRaw},
				{Name: "eth0", LinkType: LinkTypeEthernet, SnapLen: 1500},
			}, r.Interfaces())
		}
	}
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF, "EOF is sticky")
	assert.Equal(t, []Interface{{LinkType: LinkTypeRaw, SnapLen: 4}}, r.Interfaces(), "the second section's interfaces")
	assert.Equal(t, Options{}, r.Section())
}

func TestReaderErrors(t *testing.T) {
	e := leEnc
	head := cat(e.shb(), e.idb(LinkTypeRaw, 0)) // packets start at offset 48
	epb := e.epb(0, 0, []byte{1, 2, 3, 4}, 4)   // 36 bytes
	patch := func(b []byte, at int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[at:], v)
		return b
	}
	tests := []struct {
		name       string
		in         []byte
		wantNewErr string // from NewReader
		wantErr    string // from Next
		is         error
	}{
		{name: "empty", in: nil, wantNewErr: "pcapng: empty input: not a pcapng file", is: ErrNotPcapng},
		{
			name:       "classic pcap",
			in:         cat([]byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0}, make([]byte, 16)),
			wantNewErr: "pcapng: block type 0xa1b2c3d4 at offset 0: not a pcapng file",
			is:         ErrNotPcapng,
		},
		{
			name:       "short header",
			in:         []byte{0x0a, 0x0d, 0x0d},
			wantNewErr: "pcapng: block at offset 0: header: unexpected EOF",
			is:         io.ErrUnexpectedEOF,
		},
		{
			name:       "no byte-order magic",
			in:         e.shb()[:10],
			wantNewErr: "pcapng: section header at offset 0: unexpected EOF",
			is:         io.ErrUnexpectedEOF,
		},
		{
			name:       "bad byte-order magic",
			in:         patch(e.shb(), 8, 0x11223344),
			wantNewErr: "pcapng: section header at offset 0: byte-order magic 0x11223344: corrupt block",
			is:         ErrCorrupt,
		},
		{
			name:       "version 2",
			in:         patch(e.shb(), 12, 2),
			wantNewErr: "pcapng: section header at offset 0: version 2.0: unsupported pcapng version",
			is:         ErrVersion,
		},
		{
			name:       "section header too short",
			in:         patch(e.shb(), 4, 24),
			wantNewErr: "pcapng: block type 0xa0d0d0a at offset 0: invalid length 24: corrupt block",
			is:         ErrCorrupt,
		},
		{
			name:       "section header option overruns",
			in:         e.shb(cat(e.u16(optComment), e.u16(9), []byte("abcd"))),
			wantNewErr: "pcapng: section header at offset 0: option 1: length 9 exceeds the block: corrupt block",
			is:         ErrCorrupt,
		},
		{
			name:    "block too large",
			in:      cat(head, e.u32(blockEPB), e.u32(MaxBlockLen+4)),
			wantErr: "pcapng: block type 0x6 at offset 48: length 16777220 exceeds 16777216: block too large",
			is:      ErrBlockTooLarge,
		},
		{
			name:    "length not a multiple of 4",
			in:      cat(head, patch(epb, 4, 34)),
			wantErr: "pcapng: block type 0x6 at offset 48: invalid length 34: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "length below the minimum",
			in:      cat(head, patch(epb, 4, 8)),
			wantErr: "pcapng: block type 0x6 at offset 48: invalid length 8: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "trailing length mismatch",
			in:      cat(head, patch(epb, 32, 99)),
			wantErr: "pcapng: block type 0x6 at offset 48: trailing length 99, want 36: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "truncated body",
			in:      cat(head, epb[:30]),
			wantErr: "pcapng: block type 0x6 at offset 48: body: unexpected EOF",
			is:      io.ErrUnexpectedEOF,
		},
		{
			name:    "truncated header",
			in:      cat(head, epb[:4]),
			wantErr: "pcapng: block at offset 48: header: unexpected EOF",
			is:      io.ErrUnexpectedEOF,
		},
		{
			name:    "unknown interface",
			in:      cat(head, e.epb(3, 0, nil, 0)),
			wantErr: "pcapng: enhanced packet at offset 48: interface 3: unknown interface",
			is:      ErrUnknownInterface,
		},
		{
			name:    "captured length beyond the block",
			in:      cat(head, patch(epb, 20, 100)),
			wantErr: "pcapng: enhanced packet at offset 48: captured length 100 exceeds the block: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "captured length near 2^32",
			in:      cat(head, patch(epb, 20, 0xfffffffd)),
			wantErr: "pcapng: enhanced packet at offset 48: captured length 4294967293 exceeds the block: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "packet block body too short",
			in:      cat(head, e.block(blockEPB, e.u32(0), e.u32(0))),
			wantErr: "pcapng: enhanced packet at offset 48: body of 8 bytes: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "packet option overruns",
			in:      cat(head, e.epb(0, 0, nil, 0, cat(e.u16(optComment), e.u16(200), []byte("abcd")))),
			wantErr: "pcapng: enhanced packet at offset 48: option 1: length 200 exceeds the block: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "interface block too short",
			in:      cat(e.shb(), e.block(blockIDB, e.u32(101))),
			wantErr: "pcapng: interface description at offset 28: body of 4 bytes: corrupt block",
			is:      ErrCorrupt,
		},
		{
			name:    "simple packet without interface",
			in:      cat(e.shb(), e.block(blockSPB, e.u32(0))),
			wantErr: "pcapng: simple packet at offset 28: interface 0: unknown interface",
			is:      ErrUnknownInterface,
		},
		{
			name:    "second section of an unknown version",
			in:      cat(head, epb, patch(e.shb(), 12, 3)),
			wantErr: "pcapng: section header at offset 84: version 3.0: unsupported pcapng version",
			is:      ErrVersion,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.in))
			if tt.wantNewErr != "" {
				require.EqualError(t, err, tt.wantNewErr)
				assert.ErrorIs(t, err, tt.is)
				return
			}
			require.NoError(t, err)
			for err == nil {
				_, err = r.Next()
			}
			require.EqualError(t, err, tt.wantErr)
			assert.ErrorIs(t, err, tt.is)
			_, again := r.Next()
			assert.Equal(t, err, again, "errors are sticky")
		})
	}
}

func TestTimestampResolutions(t *testing.T) {
	tests := []struct {
		name   string
		resol  uint8
		offset int64
		units  uint64
		want   time.Time
	}{
		{name: "nanoseconds", resol: 9, units: 1_700_000_000_123_456_789, want: time.Unix(1_700_000_000, 123_456_789)},
		{name: "microseconds", resol: 6, units: 1_700_000_000_123_456, want: time.Unix(1_700_000_000, 123_456_000)},
		{name: "seconds", resol: 0, units: 42, want: time.Unix(42, 0)},
		{name: "picoseconds truncate", resol: 12, units: 1_000_000_000_001_999, want: time.Unix(1000, 1)},
		{name: "10^-19", resol: 19, units: 1<<64 - 1, want: time.Unix(1, 844_674_407)},
		{name: "10^-20", resol: 20, units: 1<<64 - 1, want: time.Unix(0, 184_467_440)},
		{name: "10^-28", resol: 28, units: 1<<64 - 1, want: time.Unix(0, 1)},
		{name: "10^-29 underflows", resol: 29, units: 1<<64 - 1, want: time.Unix(0, 0)},
		{name: "10^-127", resol: 127, units: 1<<64 - 1, want: time.Unix(0, 0)},
		{name: "2^0", resol: 0x80, units: 7, want: time.Unix(7, 0)},
		{name: "2^-10", resol: 0x80 | 10, units: 3*1024 + 256, want: time.Unix(3, 250_000_000)},
		{name: "2^-63", resol: 0x80 | 63, units: 1<<63 | 1<<62, want: time.Unix(1, 500_000_000)},
		{name: "2^-64", resol: 0x80 | 64, units: 1 << 63, want: time.Unix(0, 500_000_000)},
		{name: "2^-127", resol: 0x80 | 127, units: 1<<64 - 1, want: time.Unix(0, 0)},
		{name: "with offset", resol: 9, offset: -10, units: 15e9, want: time.Unix(5, 0)},
		{name: "before the epoch by offset", resol: 6, offset: -100, units: 1, want: time.Unix(-100, 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ifc := readIface{resol: tt.resol, offset: tt.offset}
			at, err := ifc.time(tt.units)
			require.NoError(t, err)
			assert.Equal(t, tt.want.UTC(), at)
		})
	}
}

// TestTimestampOutOfRange: a timestamp later than a time.Time holds is
// corrupt, not wrapped to a time before the epoch.
func TestTimestampOutOfRange(t *testing.T) {
	const maxSec = 1<<63 - 1 - 62_135_596_800
	last := time.Unix(maxSec, 0).UTC()
	for _, tt := range []struct {
		name   string
		resol  uint8
		offset int64
		units  uint64
		want   time.Time // zero: corrupt
	}{
		{name: "the last second", resol: 0, units: maxSec, want: last},
		{name: "the last second by offset", resol: 0, offset: 10, units: maxSec - 10, want: last},
		{name: "back in range by offset", resol: 0, offset: -1 << 62, units: 1 << 63, want: time.Unix(1<<62, 0).UTC()},
		{name: "seconds past it", resol: 0, units: maxSec + 1},
		{name: "2^63 seconds", resol: 0, units: 1 << 63},
		{name: "2^0 units, 2^64-1", resol: 0x80, units: 1<<64 - 1},
		{name: "past it by offset", resol: 0, offset: 11, units: maxSec - 10},
		{name: "the largest offset", resol: 9, offset: 1<<63 - 1, units: 0},
		{name: "the smallest offset", resol: 0, offset: -1 << 63, units: 0, want: time.Unix(-1<<63, 0).UTC()},
		{name: "the smallest offset from 2^64-1", resol: 0, offset: -1 << 63, units: 1<<64 - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ifc := readIface{resol: tt.resol, offset: tt.offset}
			at, err := ifc.time(tt.units)
			if tt.want.IsZero() {
				require.ErrorIs(t, err, ErrCorrupt, "got %v", at)
				assert.ErrorContains(t, err, "is later than a time can be")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, at)
		})
	}
}

// validCapture is the fuzz seed: everything Writer emits.
func validCapture(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{Comment: "seed"})
	require.NoError(tb, err)
	for _, ifc := range []Interface{{Name: "a", Description: "first"}, {Name: "b", LinkType: LinkTypeEthernet, SnapLen: 8}} {
		_, err := w.AddInterface(ifc)
		require.NoError(tb, err)
	}
	at := time.Unix(1_700_000_000, 1)
	require.NoError(tb, w.WritePacket(Packet{Interface: 0, Time: at, Data: []byte{0x45, 0, 0, 20}, Dir: DirInbound, Comment: "c"}))
	require.NoError(tb, w.WritePacket(Packet{Interface: 1, Time: at, Data: make([]byte, 30), Dir: DirOutbound}))
	require.NoError(tb, w.WritePacket(Packet{Interface: 0, Time: at, Data: []byte{0x60}, OrigLen: 9000}))
	require.NoError(tb, w.Close())
	return buf.Bytes()
}

func FuzzReader(f *testing.F) {
	f.Add(validCapture(f))
	be := beEnc
	f.Add(cat(be.shb(), be.idb(LinkTypeRaw, 2, be.opt(optIfTSResol, []byte{0x85})),
		be.epb(0, 99, []byte{1, 2, 3}, 3, be.opt(optEPBFlags, be.u32(2))),
		be.block(blockSPB, be.u32(5), []byte{1, 2, 3, 4})))
	f.Add([]byte{})
	f.Add(leEnc.shb()[:12])

	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in))
		if err != nil {
			return
		}
		for range len(in) { // each block takes at least 12 bytes
			p, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					require.NotEmpty(t, err.Error())
				}
				return
			}
			ifcs := r.Interfaces()
			if p.Interface < 0 || p.Interface >= len(ifcs) {
				t.Fatalf("packet on interface %d of %d", p.Interface, len(ifcs))
			}
			if len(p.Data) > len(in) {
				t.Fatalf("%d bytes of data from %d bytes of input", len(p.Data), len(in))
			}
		}
		t.Fatal("Next never reached the end")
	})
}
