package relay

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// validFrames has one frame of every kind, at the edges of their bounds.
func validFrames() map[string]frame {
	k := key.Public{0xaa, 0xbb}
	return map[string]frame{
		"hello":           {typ: frameHello, version: ProtocolVersion, key: k, data: []byte("token")},
		"hello max token": {typ: frameHello, version: 7, key: k, data: bytes.Repeat([]byte{'t'}, MaxTokenSize)},
		"welcome":         {typ: frameWelcome, version: ProtocolVersion, keepalive: 20000},
		"send":            {typ: frameSend, key: k, data: []byte{1}},
		"send max":        {typ: frameSend, key: k, data: bytes.Repeat([]byte{2}, MaxPacketSize)},
		"recv":            {typ: frameRecv, key: k, data: bytes.Repeat([]byte{3}, 1400)},
		"ping":            {typ: framePing, ping: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}},
		"pong":            {typ: framePong, ping: [8]byte{8}},
		"peer gone":       {typ: framePeerGone, key: k, reason: uint8(GoneDisconnected)},
		"bind":            {typ: frameBind, id: 0xffffffff, key: k},
		"bind ack":        {typ: frameBindAck, id: 1},
		"close":           {typ: frameClose, reason: uint8(CloseAuthExpired), data: []byte("token expired")},
		"close empty":     {typ: frameClose, reason: uint8(CloseNormal)},
		"unknown":         {typ: 0x7f, data: []byte("future")},
		"unknown empty":   {typ: 0xff},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for name, f := range validFrames() {
		t.Run(name, func(t *testing.T) {
			b, err := appendFrame(nil, &f)
			require.NoError(t, err)

			got, n, err := decodeFrame(b)
			require.NoError(t, err)
			assert.Equal(t, len(b), n)
			assertFrameEqual(t, f, got)

			// Every prefix is incomplete, never an error or a frame.
			for _, cut := range []int{0, 1, frameHeaderLen, len(b) - 1} {
				if cut < len(b) {
					_, _, err := decodeFrame(b[:cut])
					assert.ErrorIs(t, err, errIncomplete, "prefix %d", cut)
				}
			}

			// readFrame agrees, through a buffer smaller than the frame too.
			for _, size := range []int{bufSize, 64} {
				br := bufio.NewReaderSize(bytes.NewReader(b), size)
				got, err := readFrame(br)
				require.NoError(t, err)
				assertFrameEqual(t, f, got)
				_, err = readFrame(br)
				assert.ErrorIs(t, err, io.EOF)
			}
		})
	}
}

func assertFrameEqual(t *testing.T, want, got frame) {
	t.Helper()
	if len(want.data) == 0 {
		want.data = nil
	}
	if len(got.data) == 0 {
		got.data = nil
	}
	assert.Equal(t, want, got)
}

func TestDecodeFrameRejects(t *testing.T) {
	hdr := func(t frameType, n int) []byte { return []byte{byte(t), byte(n >> 8), byte(n)} }
	withBody := func(h []byte, n int) []byte { return append(h, make([]byte, n)...) }
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"type zero", withBody(hdr(0, 1), 1), "frame type 0x00"},
		{"hello without token", withBody(hdr(frameHello, 1+key.Size), 1+key.Size), "HELLO body is 33 bytes, want 34..289"},
		{"hello token too long", hdr(frameHello, 1+key.Size+MaxTokenSize+1), "HELLO body is 290 bytes, want 34..289"},
		{"welcome short", withBody(hdr(frameWelcome, 4), 4), "WELCOME body is 4 bytes, want 5"},
		{"send without packet", withBody(hdr(frameSend, key.Size), key.Size), "SEND body is 32 bytes, want 33..65535"},
		{"recv empty", hdr(frameRecv, 0), "RECV body is 0 bytes, want 33..65535"},
		{"ping long", hdr(framePing, 9), "PING body is 9 bytes, want 8"},
		{"pong short", withBody(hdr(framePong, 7), 7), "PONG body is 7 bytes, want 8"},
		{"peer gone short", withBody(hdr(framePeerGone, key.Size), key.Size), "PEER_GONE body is 32 bytes, want 33"},
		{"bind short", withBody(hdr(frameBind, 35), 35), "BIND body is 35 bytes, want 36"},
		{"bind id zero", withBody(hdr(frameBind, 36), 36), "BIND with peer id 0"},
		{"bind ack id zero", withBody(hdr(frameBindAck, 4), 4), "BIND_ACK with peer id 0"},
		{"close empty", hdr(frameClose, 0), "CLOSE body is 0 bytes, want 1..257"},
		{"close message too long", hdr(frameClose, 1+MaxCloseMessage+1), "CLOSE body is 258 bytes, want 1..257"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := decodeFrame(tt.in)
			require.ErrorIs(t, err, ErrProtocol)
			assert.ErrorContains(t, err, tt.wantErr)

			_, err = readFrame(bufio.NewReaderSize(bytes.NewReader(tt.in), bufSize))
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
}

func TestReadFrameTruncated(t *testing.T) {
	f := frame{typ: frameSend, key: key.Public{1}, data: make([]byte, 100)}
	b, err := appendFrame(nil, &f)
	require.NoError(t, err)
	for _, cut := range []int{1, 2, frameHeaderLen, len(b) - 1} {
		_, err := readFrame(bufio.NewReaderSize(bytes.NewReader(b[:cut]), bufSize))
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", cut)
	}
	big := frame{typ: frameSend, key: key.Public{1}, data: make([]byte, 2*bufSize)}
	b, err = appendFrame(nil, &big)
	require.NoError(t, err)
	_, err = readFrame(bufio.NewReaderSize(bytes.NewReader(b[:len(b)-1]), bufSize))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestAppendFrameRefusesOutOfBounds(t *testing.T) {
	for _, f := range []frame{
		{typ: frameSend, data: make([]byte, MaxPacketSize+1)},
		{typ: frameSend},
		{typ: frameHello, data: make([]byte, MaxTokenSize+1)},
		{typ: frameClose, data: []byte(strings.Repeat("x", MaxCloseMessage+1))},
		{typ: 0},
	} {
		_, err := appendFrame(nil, &f)
		assert.ErrorIs(t, err, ErrProtocol, "%s with %d bytes", f.typ, len(f.data))
	}
	var bw bytes.Buffer
	w := bufio.NewWriter(&bw)
	assert.ErrorIs(t, writePacketFrame(w, frameSend, key.Public{}, make([]byte, MaxPacketSize+1)), ErrPacketSize)
	assert.ErrorIs(t, writePacketFrame(w, frameSend, key.Public{}, nil), ErrPacketSize)
}

func TestWritePacketFrameMatchesAppendFrame(t *testing.T) {
	f := frame{typ: frameRecv, key: key.Public{7, 7}, data: []byte("wireguard")}
	want, err := appendFrame(nil, &f)
	require.NoError(t, err)
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	require.NoError(t, writePacketFrame(bw, f.typ, f.key, f.data))
	require.NoError(t, bw.Flush())
	assert.Equal(t, want, buf.Bytes())
}

func TestDatagram(t *testing.T) {
	b := appendDatagram(nil, 42, []byte("pkt"))
	id, pkt, err := decodeDatagram(b)
	require.NoError(t, err)
	assert.Equal(t, uint32(42), id)
	assert.Equal(t, []byte("pkt"), pkt)

	b = appendPaddedDatagram(nil, 42, []byte("pkt"), 3)
	assert.Equal(t, []byte{datagramPadded, 0, 0, 0, 42, 'p', 'k', 't', 0, 0, 0, 3}, b)
	id, pkt, err = decodeDatagram(b)
	require.NoError(t, err)
	assert.Equal(t, uint32(42), id)
	assert.Equal(t, []byte("pkt"), pkt)
	_, pkt, err = decodeDatagram(appendPaddedDatagram(nil, 7, []byte("x"), 0))
	require.NoError(t, err)
	assert.Equal(t, []byte("x"), pkt)

	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"empty", nil, "0-byte datagram"},
		{"header only", appendDatagram(nil, 1, nil), "5-byte datagram"},
		{"wrong type", append([]byte{0x12, 0, 0, 0, 1}, 'x'), "datagram type 0x12"},
		{"id zero", appendDatagram(nil, 0, []byte("x")), "datagram with peer id 0"},
		{"padded id zero", appendPaddedDatagram(nil, 0, []byte("x"), 1), "datagram with peer id 0"},
		{"padding only", appendPaddedDatagram(nil, 1, nil, 2), "8-byte datagram padded by 2"},
		{"padding beyond the packet", []byte{datagramPadded, 0, 0, 0, 1, 'p', 'k', 't', 9}, "9-byte datagram padded by 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := decodeDatagram(tt.in)
			require.ErrorIs(t, err, ErrProtocol)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestPaddedLen(t *testing.T) {
	tests := []struct {
		size    int
		wantPad int
		wantOK  bool
	}{
		{MaxDatagramPacket, 0, false},
		{MaxDatagramPacket + 1, 0, false},
		{MaxDatagramPacket - 1, 0, true},
		{MaxDatagramPacket - 16, 15, true},
		{MaxDatagramPacket - maxDatagramPad, maxDatagramPad - 1, true},
		{MaxDatagramPacket - maxDatagramPad - 1, 0, false},
		{100, 0, false},
	}
	for _, tt := range tests {
		pad, ok := paddedLen(make([]byte, tt.size))
		assert.Equal(t, tt.wantOK, ok, "%d bytes", tt.size)
		assert.Equal(t, tt.wantPad, pad, "%d bytes", tt.size)
		if ok {
			assert.Len(t, appendPaddedDatagram(nil, 1, make([]byte, tt.size), pad), len(appendDatagram(nil, 1, make([]byte, MaxDatagramPacket))), "%d bytes", tt.size)
		}
	}
}

func TestFrameNames(t *testing.T) {
	assert.Equal(t, "PEER_GONE", framePeerGone.String())
	assert.Equal(t, "FEATURES", frameFeatures.String())
	assert.Equal(t, "frame-0x42", frameType(0x42).String())
	assert.Equal(t, "auth-expired", CloseAuthExpired.String())
	assert.Equal(t, "close-code-99", CloseCode(99).String())
	assert.Equal(t, "disconnected", GoneDisconnected.String())
	assert.Equal(t, "relay: closed by relay: auth-expired: token expired",
		(&CloseError{Code: CloseAuthExpired, Message: "token expired", Remote: true}).Error())
	assert.Equal(t, "relay: closed by local: idle", (&CloseError{Code: CloseIdle}).Error())
	assert.Equal(t, "relay: closed by client: normal: bye",
		(&CloseError{Code: CloseNormal, Message: "bye", Remote: true, byClient: true}).Error(), "as the relay reports a client's close")
}
