package fabric

import "sync"

// Frames in the fabric are Ethernet frames held in plain byte slices. Most are
// at most one MTU plus the link header, so slices of frameCap bytes are pooled;
// larger frames (jumbo MTUs) are allocated and left to the GC.
const frameCap = 2048

var framePool = sync.Pool{New: func() any { b := make([]byte, frameCap); return &b }}

// getFrame returns a slice of length n. Release it with putFrame once the
// frame has been consumed or dropped.
func getFrame(n int) []byte {
	if n > frameCap {
		return make([]byte, n)
	}
	bp := framePool.Get().(*[]byte)
	return (*bp)[:n]
}

// putFrame returns b to the pool. b must not be used afterwards.
func putFrame(b []byte) {
	if cap(b) != frameCap {
		return
	}
	b = b[:frameCap]
	framePool.Put(&b)
}
