package runner

import (
	"bytes"
	"runtime"
	"strconv"

	"github.com/latticelab/lattice/lab/scenario"
)

// Resources implements scenario.TimelineEnv. In a synctest bubble it
// counts the bubble's goroutines only, from their traceback headers
// ("goroutine 7 [select, synctest bubble 3]:"): runtime.NumGoroutine
// counts the whole process, which under go test holds the test
// framework and every scenario running in parallel. On the wall clock
// there is no such mark, and the count is the process's. The heap has no
// notion of a bubble: HeapInuse is the process's either way, after two
// collections (the second frees what the first's finalizers released).
func (l *Lab) Resources() scenario.Resources {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := scenario.Resources{HeapInuse: ms.HeapInuse, Scope: "process", Goroutines: runtime.NumGoroutine()}
	if id := ownBubble(); id != 0 {
		r.Scope, r.Goroutines = "bubble", bubbleGoroutines(allStacks(), id)
	}
	return r
}

const bubbleTag = ", synctest bubble "

// ownBubble is the calling goroutine's bubble id, 0 outside any bubble.
func ownBubble() int {
	buf := make([]byte, 1024)
	n := runtime.Stack(buf, false)
	header, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	id, _ := bubbleOf(header)
	return id
}

// bubbleOf reads the bubble id from a traceback header.
func bubbleOf(header []byte) (int, bool) {
	i := bytes.Index(header, []byte(bubbleTag))
	if i < 0 {
		return 0, false
	}
	rest := header[i+len(bubbleTag):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	id, err := strconv.Atoi(string(rest[:j]))
	return id, err == nil
}

// bubbleGoroutines counts the goroutines of bubble id in dump, every
// goroutine's traceback (runtime.Stack with all).
func bubbleGoroutines(dump []byte, id int) int {
	n := 0
	for g := range bytes.SplitSeq(dump, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if got, ok := bubbleOf(header); ok && got == id {
			n++
		}
	}
	return n
}

// allStacks is every goroutine's traceback.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
