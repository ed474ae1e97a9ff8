//go:build !race

package vtime

// wallShare is how much of the network time a virtual run may take in wall
// time: a quarter.
const wallShare = 4
