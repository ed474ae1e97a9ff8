//go:build race

package fabric

// raceEnabled: the race detector also shuffles which runnable goroutine
// runs next, so an order the runtime picks is not repeatable under it.
const raceEnabled = true
