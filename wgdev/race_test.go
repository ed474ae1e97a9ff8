//go:build race

package wgdev

// raceEnabled: the race detector slows WireGuard several times over, so
// transfers are smaller under it.
const raceEnabled = true
