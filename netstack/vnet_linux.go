package netstack

import "encoding/binary"

// virtioNetHdr is struct virtio_net_hdr, which a TUN device made with
// IFF_VNET_HDR puts before every packet (in the host's byte order): with
// offloads on (TUNSETOFFLOAD), a read may be a TCP segment of up to 64 KB
// that the reader cuts at gsoSize (TSO), with only the pseudo-header in
// its checksum (NEEDS_CSUM), and a write may be such a segment (GRO).
type virtioNetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

const (
	virtioNetHdrLen = 10

	virtioNetHdrFNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM

	virtioNetHdrGSONone  = 0    // VIRTIO_NET_HDR_GSO_NONE
	virtioNetHdrGSOTCPv4 = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	virtioNetHdrGSOECN   = 0x80 // VIRTIO_NET_HDR_GSO_ECN
)

func (h *virtioNetHdr) decode(b []byte) {
	h.flags, h.gsoType = b[0], b[1]
	h.hdrLen = binary.NativeEndian.Uint16(b[2:])
	h.gsoSize = binary.NativeEndian.Uint16(b[4:])
	h.csumStart = binary.NativeEndian.Uint16(b[6:])
	h.csumOffset = binary.NativeEndian.Uint16(b[8:])
}

func (h *virtioNetHdr) encode(b []byte) {
	b[0], b[1] = h.flags, h.gsoType
	binary.NativeEndian.PutUint16(b[2:], h.hdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.gsoSize)
	binary.NativeEndian.PutUint16(b[6:], h.csumStart)
	binary.NativeEndian.PutUint16(b[8:], h.csumOffset)
}

// tcpSegment reports whether the header announces a TCP segment to cut at
// gsoSize (the ECN bit aside).
func (h *virtioNetHdr) tcpSegment() bool {
	return h.gsoType&^virtioNetHdrGSOECN == virtioNetHdrGSOTCPv4
}
