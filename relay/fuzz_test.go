package relay

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame and datagram
// decoders. Whatever the input: no panic; an error or a frame that
// consumed no more than the input; a decoded frame re-encodes to exactly
// the bytes it came from (so no field is silently dropped or invented);
// and the streaming reader agrees with the slice decoder.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		if b, err := appendFrame(nil, &fr); err == nil && len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{byte(frameSend), 0xff, 0xff})
	f.Add(appendDatagram(nil, 7, []byte("wireguard")))

	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := decodeFrame(in)
		switch {
		case errors.Is(err, errIncomplete):
		case err != nil:
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode error %v does not wrap ErrProtocol", err)
			}
		default:
			if n < frameHeaderLen || n > len(in) {
				t.Fatalf("consumed %d of %d bytes", n, len(in))
			}
			out, err := appendFrame(nil, &fr)
			if err != nil {
				t.Fatalf("re-encoding a decoded %s: %v", fr.typ, err)
			}
			if !bytes.Equal(out, in[:n]) {
				t.Fatalf("round trip changed the frame:\n in %x\nout %x", in[:n], out)
			}
		}

		got, rerr := readFrame(bufio.NewReaderSize(bytes.NewReader(in), bufSize))
		switch {
		case err == nil:
			if rerr != nil || got.typ != fr.typ || !bytes.Equal(got.data, fr.data) || got.key != fr.key {
				t.Fatalf("readFrame disagrees: %v %+v vs %+v", rerr, got, fr)
			}
		case errors.Is(err, ErrProtocol):
			if !errors.Is(rerr, ErrProtocol) {
				t.Fatalf("readFrame accepted what decodeFrame rejected (%v): %v", err, rerr)
			}
		default: // incomplete: the stream ends inside the frame
			if rerr == nil {
				t.Fatalf("readFrame decoded an incomplete frame")
			}
		}

		id, pkt, err := decodeDatagram(in)
		if err == nil {
			if id == 0 || len(pkt) == 0 || !bytes.Equal(appendDatagram(nil, id, pkt), in) {
				t.Fatalf("datagram round trip: id %d pkt %x from %x", id, pkt, in)
			}
		} else if !errors.Is(err, ErrProtocol) {
			t.Fatalf("datagram error %v does not wrap ErrProtocol", err)
		}
	})
}
