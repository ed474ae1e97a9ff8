package vtime

import (
	"bytes"
	"runtime"
	"strconv"
)

// OwnBubble is the bubble id of the calling goroutine, from its own
// traceback header; 0 outside any bubble.
func OwnBubble() int {
	buf := make([]byte, 512)
	n := runtime.Stack(buf, false)
	header, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	const tag = ", synctest bubble "
	i := bytes.Index(header, []byte(tag))
	if i < 0 {
		return 0
	}
	rest := header[i+len(tag):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	id, _ := strconv.Atoi(string(rest[:j]))
	return id
}

// AllStacks is every goroutine's traceback.
func AllStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// CountBubble counts the goroutines of bubble id in dump (AllStacks).
func CountBubble(dump []byte, id int) int {
	tag := []byte(", synctest bubble " + strconv.Itoa(id))
	n := 0
	for g := range bytes.SplitSeq(dump, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if i := bytes.Index(header, tag); i >= 0 && tagEnds(header[i+len(tag):]) {
			n++
		}
	}
	return n
}
