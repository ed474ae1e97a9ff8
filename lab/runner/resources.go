package runner

import (
	"runtime"

	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

// Resources implements scenario.TimelineEnv. In a synctest bubble it
// counts the bubble's goroutines only, from their traceback headers
// ("goroutine 7 [select, synctest bubble 3]:"): runtime.NumGoroutine
// counts the whole process, which under go test holds the test
// framework and every scenario running in parallel. On the wall clock
// there is no such mark, and the count is the process's. The heap has no
// notion of a bubble: HeapLive and HeapInuse are the process's either
// way, after two collections (the second frees what the first's
// finalizers released).
func (l *Lab) Resources() scenario.Resources {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := scenario.Resources{HeapLive: ms.HeapAlloc, HeapInuse: ms.HeapInuse, Scope: "process", Goroutines: runtime.NumGoroutine()}
	if id := vtime.OwnBubble(); id != 0 {
		r.Scope, r.Goroutines = "bubble", vtime.CountBubble(vtime.AllStacks(), id)
	}
	return r
}
