package relay

import (
	"sync"

	"github.com/latticelab/lattice/key"
)

// pooledPacketSize covers every packet that fits a 1500-byte MTU, which
// is nearly all relayed traffic; larger packets get their own allocation.
const pooledPacketSize = 2048

var packetPool = sync.Pool{New: func() any {
	b := make([]byte, pooledPacketSize)
	return &b
}}

// outPacket is a packet queued for a writer: to key (client side) or from
// key (server side).
type outPacket struct {
	key key.Public
	pkt []byte
	buf *[]byte // pool buffer backing pkt, or nil
}

// copyPacket copies pkt into a pooled buffer when it fits one.
func copyPacket(dst key.Public, pkt []byte) outPacket {
	if len(pkt) > pooledPacketSize {
		return outPacket{key: dst, pkt: append([]byte(nil), pkt...)}
	}
	buf := packetPool.Get().(*[]byte)
	n := copy(*buf, pkt)
	return outPacket{key: dst, pkt: (*buf)[:n], buf: buf}
}

// release returns p's buffer to the pool; p must not be used afterwards.
func (p *outPacket) release() {
	if p.buf != nil {
		packetPool.Put(p.buf)
		p.buf, p.pkt = nil, nil
	}
}
