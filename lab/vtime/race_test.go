//go:build race

package vtime

// wallShare is how much of the network time a virtual run may take in wall
// time: the race detector multiplies the CPU a run costs (not the network
// time, which stays exact), so under it the speed claim is only "faster
// than real time".
const wallShare = 1
