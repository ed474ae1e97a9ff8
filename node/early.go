package node

import (
	"sync"
	"time"
)

// earlySignals keeps signals from nodes we do not know yet, for a while.
// A peer that registers after us learns of us from its peer list while we
// learn of it from an event, and our first signals can reach it before its
// list does. Without lazy connections its own credentials then told us to
// send ours again; a lazy peer sends nothing until it has traffic, so the
// offer of a peer that wants a direct path at once (AlwaysDirect) would be
// lost until that peer's attempt timed out and retried. So a few such
// signals wait here, sealed (we have no key to open them with yet), and
// go to the peer when it is added. Bounded by sender, count and bytes, and
// dropped after signalMaxAge (the replay guard would refuse them then).
type earlySignals struct {
	mu    sync.Mutex
	m     map[string][]earlySignal
	bytes int
}

type earlySignal struct {
	at      time.Time
	payload []byte
}

const (
	earlyPerSender = 8
	earlyMaxBytes  = 256 << 10
)

// keep stores a copy of payload from the unknown node from, if there is
// room.
func (e *earlySignals) keep(from string, payload []byte, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pruneLocked(now)
	if e.m == nil {
		e.m = map[string][]earlySignal{}
	}
	if len(e.m[from]) >= earlyPerSender || e.bytes+len(payload) > earlyMaxBytes {
		return
	}
	e.m[from] = append(e.m[from], earlySignal{at: now, payload: append([]byte(nil), payload...)})
	e.bytes += len(payload)
}

// take removes and returns what from sent before we knew it, oldest
// first.
func (e *earlySignals) take(from string, now time.Time) [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pruneLocked(now)
	var out [][]byte
	for _, s := range e.m[from] {
		out = append(out, s.payload)
		e.bytes -= len(s.payload)
	}
	delete(e.m, from)
	return out
}

func (e *earlySignals) pruneLocked(now time.Time) {
	for from, list := range e.m {
		i := 0
		for i < len(list) && now.Sub(list[i].at) > signalMaxAge {
			e.bytes -= len(list[i].payload)
			i++
		}
		if i == len(list) {
			delete(e.m, from)
		} else if i > 0 {
			e.m[from] = list[i:]
		}
	}
}
