//go:build !race

package wgdev

const raceEnabled = false
