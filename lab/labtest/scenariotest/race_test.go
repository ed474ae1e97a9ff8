//go:build race

package scenariotest

// race is whether the race detector is on: it makes the lab's CPU work
// about ten times slower, which virtual time cannot hide.
const race = true
